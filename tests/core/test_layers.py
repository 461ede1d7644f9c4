"""The import contract (docs/architecture.md, "Layers"): every ``import`` of every module, function-level ones
included, goes down the layers — base → I/O and config → analyses → presentation — and the collectors reach only
the run-directory writers and the config.

The contract is data (:data:`LAYERS`, :data:`MAY_IMPORT`, :data:`FORBIDDEN_PACKAGES`); the tests parse the source
(``ast``), so an import inside a function counts as much as one at the top. An analysis reads no file: no
``open(``, ``Path.read_*``, ``pl.read_*`` / ``pl.scan_*`` in ``analyses/``.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Source folder → import name (pyproject.toml's package-dir).
FOLDERS = {"workbench": "workbench", "analyses": "workbench.analyses", "app": "workbench.app",
           "collectors": "workbench.collectors"}

#: Layer → its modules (glob patterns over import names; the first layer that matches wins).
LAYERS: dict[str, tuple[str, ...]] = {
    # what everything may use: schemas, errors, formats, what counts as communication, plain records
    "base": ("workbench.schema", "workbench.errors", "workbench.format", "workbench.communication",
             "workbench.source_scan", "workbench.config_policy", "workbench.fix_versions"),
    # the compile-config format (data: load, validate, dump) and the cache bundle it may point to
    "config": ("workbench.compile_config", "workbench.compile_cache"),
    # reading: ingest, the run directory, the cache, the Run, Flight Recorder dumps
    "io": ("workbench.kineto", "workbench.compile_log", "workbench.run", "workbench.rundir", "workbench.discover",
           "workbench.cache", "workbench.lazy", "workbench.parallel", "workbench.flight_recorder",
           "workbench.regular_file", "workbench.jobs"),
    # frames in, typed findings out
    "analyses": ("workbench.analyses", "workbench.analyses.*"),
    # inside training
    "collectors": ("workbench.collectors", "workbench.collectors.*"),
    # what a person sees: the notebook entry (the package itself), figures, the report, the CLI, the app
    "presentation": ("workbench", "workbench.notebook", "workbench.timeline", "workbench.figures", "workbench.schedule",
                     "workbench.report",
                     "workbench.critical_path_view", "workbench.export", "workbench.export.*",
                     "workbench.cli", "workbench.commands", "workbench.commands.*", "workbench.app",
                     "workbench.app.*"),
}

#: Layer → the layers its modules may import.
MAY_IMPORT: dict[str, set[str]] = {
    "base": {"base"},
    "config": {"base", "config", "io"},
    "io": {"base", "config", "io"},
    "analyses": {"base", "config", "analyses"},
    "collectors": {"collectors"},
    "presentation": {"base", "config", "io", "analyses", "presentation"},
}
#: The only workbench modules outside their own package the collectors may import: the run-directory writers and
#: the compile config (with what those two stand on).
COLLECTORS_MAY_IMPORT = {"workbench.rundir", "workbench.compile_config", "workbench.compile_cache",
                         "workbench.config_policy", "workbench.errors", "workbench.source_scan",
                         "workbench.fix_versions"}

#: Layer → third-party packages its modules never import (anywhere in the module).
FORBIDDEN_PACKAGES: dict[str, set[str]] = {
    "base": {"plotly", "dash", "rich", "typer", "torch"},
    "io": {"plotly", "dash", "rich", "typer", "torch"},
    "analyses": {"plotly", "dash", "rich", "typer", "torch"},
    "collectors": {"polars", "plotly", "dash", "rich", "typer"},
}
#: Calls that read files, which no analysis makes (attribute names on any object, and the builtin).
FILE_READS = {"read_text", "read_bytes", "read_csv", "read_json", "read_ndjson", "read_parquet", "read_ipc",
              "read_database", "read_excel", "scan_csv", "scan_ndjson", "scan_parquet", "scan_ipc"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, name in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((name, *parts))] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> str | None:
    for layer, patterns in LAYERS.items():
        if any(fnmatch(module, p) for p in patterns):
            return layer
    return None


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    package = module.split(".")
    is_package = MODULES[module].name == "__init__.py"
    base = package if is_package else package[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports_of(module: str) -> list[tuple[str, int]]:
    """Every module ``module`` imports (``from pkg import submodule`` names the submodule), with its line."""
    tree = ast.parse(MODULES[module].read_text(), str(MODULES[module]))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            out += [(s, node.lineno) for s in subs] or [(target, node.lineno)]
    return out


def _ours(name: str) -> str | None:
    """The workbench module ``name`` is (or lies in), else None (a third-party or standard module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) is None] == []


def test_imports_go_down_the_layers():
    bad = []
    for module in MODULES:
        mine = layer_of(module)
        for name, line in imports_of(module):
            target = _ours(name)
            if target is None or target == module:
                continue
            theirs = layer_of(target)
            if mine == "collectors" and theirs != "collectors":
                if target not in COLLECTORS_MAY_IMPORT:
                    bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: collectors import {target}")
            elif theirs not in MAY_IMPORT[mine]:  # type: ignore[index]
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {mine} imports {target} ({theirs})")
    assert bad == []


def test_layers_keep_their_third_party_packages_out():
    bad = []
    for module in MODULES:
        forbidden = FORBIDDEN_PACKAGES.get(layer_of(module) or "", set())
        for name, line in imports_of(module):
            if name.split(".")[0] in forbidden:
                bad.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {layer_of(module)} imports {name}")
    assert bad == []


def test_analyses_read_no_file():
    bad = []
    for module, path in MODULES.items():
        if layer_of(module) != "analyses":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "open") or (isinstance(f, ast.Attribute) and f.attr in FILE_READS):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(f)}(")
    assert bad == []


@pytest.mark.parametrize(("source", "expected"), [
    ("from workbench.analyses import metrics\n", "workbench.analyses.metrics"),
    ("def f():\n    from workbench.figures import empty_figure\n", "workbench.figures"),
    ("from . import kinds\n", "workbench.analyses.kinds"),
])
def test_the_parser_sees_every_import(source, expected, monkeypatch, tmp_path):
    """A top-level import, a function-level one and a relative one are all read (so the contract has no gap)."""
    f = tmp_path / "probe.py"
    f.write_text(source)
    monkeypatch.setitem(MODULES, "workbench.analyses.probe", f)
    assert expected in [_ours(n) for n, _ in imports_of("workbench.analyses.probe")]


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by their base name (the tests folders are not packages): two files of one name in
    different folders stop the whole collection on a fresh clone."""
    from collections import Counter

    tests = Path(__file__).resolve().parents[1]
    names = Counter(p.name for p in tests.rglob("test_*.py"))
    assert not [n for n, c in names.items() if c > 1]
