"""The recommender writes a setting only for the torch versions where the fix matrix says it acts
(``tests/data/compile_logs/matrix/fix_matrix.json.gz``: every fix run on torch 2.5 … 2.15 in a fresh process)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from workbench.analyses.recommendations import Fix, Setting, for_torch, setting_acts
from workbench.compile_config import load_compile_config  # noqa: F401  (the settings below are the config's)

MATRIX = Path(__file__).resolve().parents[1] / "data" / "compile_logs" / "matrix"
_FIXES = json.loads(gzip.decompress((MATRIX / "fix_matrix.json.gz").read_bytes()))["versions"]
#: fix_matrix ``setting`` text → the Setting the recommender writes.
SETTINGS = {
    "[compiler] dynamic_sources = \"L['x']\"": Setting("compiler", "dynamic_sources", "L['x']"),
    "[compiler] dynamic_sources = \"L['x']:1\"": Setting("compiler", "dynamic_sources", "L['x']:1"),
    "[dynamo] recompile_limit = 16": Setting("dynamo", "recompile_limit", 16),
    "[dynamo] cache_size_limit = 16": Setting("dynamo", "cache_size_limit", 16),
    "[dynamo] capture_scalar_outputs = true": Setting("dynamo", "capture_scalar_outputs", True),
    "[dynamo] reorderable_logging_functions = [\"print\"]": Setting("dynamo", "reorderable_logging_functions",
                                                                     ["print"]),
    "[dynamo] specialize_float = false": Setting("dynamo", "specialize_float", False),
    "[stance] stance = \"eager_on_recompile\"": Setting("stance", "stance", "eager_on_recompile"),
    "[distributed] guard_collectives = true": Setting("distributed", "guard_collectives", True),
    "[mark_dynamic] x = { dim = 1 }": Setting("mark_dynamic", "x", {"dim": 1}),
    "[compile] dynamic = true": Setting("compile", "dynamic", True),
    "[cache] load/save = \"compile_cache.bin\"": Setting("cache", "load", "compile_cache.bin"),
}
#: The order of calls the collector applies a config in: at ``Collector()``, before the user's first call.
ORDERS = ("before_compile", "after_compile", "per_call", "compile_kwarg", "load_before_compile", "after_first_call")
CELLS = sorted({(v, r["setting"]) for v, rows in _FIXES.items() for r in rows
                if r["setting"] in SETTINGS and r["order"] in ORDERS and r["outcome"] != "baseline"})


def _outcome(version: str, setting: str) -> str:
    """The matrix's outcome for the setting applied before the first call (``after_first_call`` for the stance)."""
    rows = {r["order"]: r["outcome"] for r in _FIXES[version] if r["setting"] == setting}
    for order in ORDERS:
        if order in rows and not (setting.startswith("[stance]") and order == "before_compile"):
            return rows[order]
    raise AssertionError(setting)


@pytest.mark.parametrize(("version", "setting"), CELLS)
def test_setting_is_written_only_where_it_acts(version: str, setting: str) -> None:
    acts = setting_acts(SETTINGS[setting], version) is None
    assert acts == (_outcome(version, setting) == "took_effect"), (version, setting, _outcome(version, setting))


def test_the_next_best_fix_is_written_instead() -> None:
    ds = Fix("dynamic_sources", "t", "e", 1.0, "w", config=(Setting("compiler", "dynamic_sources", "L['x']:1"),))
    assert for_torch(ds, "2.13.0+cpu") == ds
    on_211 = for_torch(ds, "2.11.0+cu130")
    assert on_211.config == (Setting("compiler", "dynamic_sources", "L['x']"),) and "2.11" in on_211.why
    assert on_211.gain == ds.gain                        # the same stall removed: the saving shown is unchanged
    assert for_torch(ds, "2.5.1").config == ()          # no such setting: not written
    lim = Fix("raise", "t", "e", 0.1, "w", config=(Setting("dynamo", "recompile_limit", 16),))
    assert for_torch(lim, "2.5.1").config == (Setting("dynamo", "cache_size_limit", 16),)
    cso = Fix("cso", "t", "e", 0.8, "w", config=(Setting("dynamo", "capture_scalar_outputs", True),))
    assert for_torch(cso, "2.7.1").config == () and for_torch(cso, "2.9.1") == cso
    assert for_torch(ds, None) == ds                     # unknown torch: written as recommended
