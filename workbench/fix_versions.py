"""Which compile-config setting changes what which torch does: the fix matrix's facts as one rule.

The facts are docs/compile-logs.md's "Fixes" table (``tests/data/compile_logs/matrix/fix_matrix.json.gz``: each
setting run on torch 2.5, 2.7, 2.9, 2.11, 2.13 and 2.15 in a fresh process and compared with the same bench without
it; ``tests/compile/test_fix_versions.py`` checks this module against every cell). The recommender writes a setting
only where it acts; the collector records a setting that cannot act on the running torch as not taking effect.

Example:
    >>> setting_acts("compiler", "dynamic_sources", "L['x']:1", "2.11.0+cu130").split(" reads")[0]
    'torch 2.11'
    >>> setting_acts("compiler", "dynamic_sources", "L['x']:1", "2.13.0+cpu") is None
    True
"""

from __future__ import annotations

import re
from typing import Any

_DIM_SUFFIX = re.compile(r":\d+\s*(?:,|$)")


def torch_release(version: str | None) -> tuple[int, int] | None:
    """``"2.11.0+cu130"`` → ``(2, 11)``; None when unknown or not a version."""
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def has_dim_suffix(value: Any) -> bool:
    """A ``dynamic_sources`` value with a ``<source>:<dim>`` entry."""
    return bool(_DIM_SUFFIX.search(str(value)))


def setting_acts(section: str, key: str, value: Any, torch_version: str | None) -> str | None:
    """None when ``[section] key = value`` changes what torch ``torch_version`` does (or the version is
    unknown), else why it does not."""
    v = torch_release(torch_version)
    if v is None:
        return None
    t = f"torch {v[0]}.{v[1]}"
    name = f"{section}.{key}"
    if name == "compiler.dynamic_sources":
        if v < (2, 7):
            return f"{t} has no torch.compiler.config.dynamic_sources"
        if v < (2, 13) and has_dim_suffix(value):
            return (f"{t} reads a ':<dim>' suffix as part of a regular expression that matches no source (the suffix "
                    "works from 2.13)")
    if name == "dynamo.recompile_limit" and v < (2, 7):
        return f"{t} calls it cache_size_limit"
    if name == "dynamo.capture_scalar_outputs" and v == (2, 7) and value is True:
        return "on torch 2.7 it turns an .item() break into a compile error (BackendCompilerFailed, KeyError: zuf0)"
    if name == "dynamo.specialize_float" and value is False and v >= (2, 7):
        return f"{t} already traces floats symbolically (a float argument costs 2 compiles either way)"
    if section == "stance" and v < (2, 7):
        return f"{t} has no torch.compiler.set_stance"
    if name == "distributed.guard_collectives" and v < (2, 9):
        return f"{t} has no guard_collectives"
    if section == "cache" and v < (2, 7):
        return f"{t} has no torch.compiler.load_cache_artifacts"
    return None
