"""The two tables of docs/compile-logs.md, generated from the recorded matrix: event class × torch version (what each
log shows, from ``survey.json``) and fix × torch version × order (from ``fix_matrix.json``), written
between the ``<!-- tables:start -->`` and ``<!-- fixes:start -->`` markers of docs/compile-logs.md.

    python scripts/compile_matrix/make_tables.py
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MATRIX = REPO / "tests" / "data" / "compile_logs" / "matrix"
DOC = REPO / "docs" / "compile-logs.md"
START, END = "<!-- tables:start (scripts/compile_matrix/make_tables.py) -->", "<!-- tables:end -->"
FIX_START, FIX_END = "<!-- fixes:start -->", "<!-- fixes:end -->"
READER_START, READER_END = "<!-- reader:start -->", "<!-- reader:end -->"
WRITER_START, WRITER_END = "<!-- writer:start -->", "<!-- writer:end -->"


def _module(path: Path, name: str):
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def reader_table() -> str:
    """Event class × torch version: what the workbench's reader gives (tests/compile/test_matrix.py checks each
    cell: counts, events, tlparse agreement; a gap is a fact the version's log lacks, checked as such)."""
    tm = _module(REPO / "tests" / "compile" / "test_matrix.py", "_wb_test_matrix")
    versions = tm.VERSIONS
    lines = ["| class | " + " | ".join(versions) + " |", "| --- |" + " --- |" * len(versions)]
    notes: dict[str, int] = {}
    for cls in tm.CLASSES:
        cells = []
        for v in versions:
            folder = MATRIX / v / cls
            exp = (json.loads(gzip.decompress((folder / "expected.json.gz").read_bytes()))
                   if (folder / "expected.json.gz").exists() else {})
            if not exp:
                cells.append("–")
            elif not exp.get("supported", True):
                cells.append("n/a (not recordable)")
            else:
                gaps = tm.GAPS.get((v, cls), {})
                marks = []
                for check, (_, why) in gaps.items():
                    n = notes.setdefault(why if why != "as above" else next(iter(gaps.values()))[1], len(notes) + 1)
                    marks.append(f"{check} [{n}]")
                cells.append("pass" + (f"; gap: {', '.join(dict.fromkeys(marks))}" if marks else ""))
        lines.append(f"| {cls} | " + " | ".join(cells) + " |")
    lines += [""] + [f"[{n}] {why}" + "  " for why, n in notes.items()]
    return "\n".join(lines)


def writer_table() -> str:
    """Fix × torch version: the matrix's outcome (the setting applied before the first call) and what the
    recommender writes for that torch (tests/compile/test_fix_versions.py checks each cell)."""
    tf = _module(REPO / "tests" / "compile" / "test_fix_versions.py", "_wb_test_fix_versions")
    from workbench.analyses.recommendations import Fix, for_torch

    versions = sorted(tf._FIXES, key=_vkey)
    lines = ["| setting | " + " | ".join(versions) + " |", "| --- |" + " --- |" * len(versions)]
    for text, st in tf.SETTINGS.items():
        cells = []
        for v in versions:
            if (v, text) not in tf.CELLS:
                cells.append("–")
                continue
            outcome = tf._outcome(v, text).replace("_", " ")
            fx = for_torch(Fix("f", "t", "e", 1.0, "w", config=(st,)), v)
            if fx.config == (st,):
                wrote = "written"
            elif fx.config:
                wrote = "writes " + ", ".join(f"`{x.key} = {json.dumps(x.value)}`" for x in fx.config)
            else:
                wrote = "not written"
            cells.append(f"{outcome} → {wrote}")
        lines.append(f"| `{text}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)

CACHE_SHORT = {"fx_graph_cache_hit": "fx hit", "fx_graph_cache_miss": "fx miss", "fx_graph_cache_bypass": "fx bypass",
               "aotautograd_cache_hit": "aot hit", "aotautograd_cache_miss": "aot miss",
               "aotautograd_cache_bypass": "aot bypass"}


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def log_cell(log: dict) -> str:
    """One rank's log in a few words: compiles, failures, artifacts that mark the class, cache events."""
    fwd = [m for m in log["compilation_metrics"] if m["kind"] == "compilation_metrics"]
    parts = [f"{len(fwd)} cm"]
    fails = Counter(m["fail_type"] for m in fwd if m["fail_type"])
    if fails:
        parts.append(", ".join(f"{n}× `{t}`" for t, n in fails.items()))
    empty = sum(1 for m in fwd if m["guard_count"] is None and m["graph_op_count"] is None and not m["fail_type"])
    if empty:
        parts.append(f"{empty} no-graph")
    restarts = sum(1 for m in fwd if m["restart_reasons"])
    if restarts:
        parts.append(f"{restarts} restart")
    arts = log["artifacts"]
    for name, short in (("dynamo_graph_break_reason", "gb"), ("recompile_reasons", "rr"), ("dynamo_error", "err")):
        if arts.get(name):
            parts.append(f"{short}×{arts[name]}")
    cache = [f"{CACHE_SHORT[k]}×{n}" for k, n in sorted(arts.items()) if k in CACHE_SHORT]
    if not cache and log["cache_states"]:
        states = Counter(f"{s['artifact'].split('_cache')[0].replace('aotautograd', 'aot').replace('fx_graph', 'fx')} "
                         f"{s['cache_state']}" for s in log["cache_states"])
        cache = [f"{k}×{n} (cache_state)" for k, n in sorted(states.items())]
    parts += cache
    if log["ids_without_compilation_metrics"]:
        parts.append("no metrics: " + ",".join(log["ids_without_compilation_metrics"][:3]))
    if any(m["compile_id"] and str(m["compile_id"]).startswith("!") for m in fwd):
        parts.append("`!N/` ids")
    if log["events"].get("optimize_ddp_split_graph") or log["artifacts"].get("optimize_ddp_split_graph"):
        parts.append("ddp split")
    return "; ".join(parts)


def class_table(survey: dict) -> str:
    versions = sorted(survey, key=_vkey)
    classes = sorted({c for v in survey.values() for c in v})
    lines = ["| class | " + " | ".join(versions) + " |", "| --- |" + " --- |" * len(versions)]
    for c in classes:
        cells = []
        for v in versions:
            x = survey[v].get(c)
            if x is None:
                cells.append("not recorded")
            elif not x["supported"]:
                cells.append("n/a: " + (x.get("why") or "")[:70].replace("|", "/"))
            elif len(x["logs"]) == 1:
                cells.append(log_cell(x["logs"][0]))
            else:
                cells.append(" / ".join(f"r{i}: {log_cell(lg)}" for i, lg in enumerate(x["logs"])))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fix_table(fixes: dict) -> str:
    versions = sorted(fixes["versions"], key=_vkey)
    keys: list[tuple] = []
    for v in sorted(versions, key=lambda v: -len(fixes["versions"][v]) * 1000 - _vkey(v)[1]):  # newest full run first
        for r in fixes["versions"][v]:
            k = (r["setting"], r["order"], r["variant"].get("dynamic"))
            if r["order"] not in ("none", "save") and k not in keys:
                keys.append(k)
    lines = ["| setting | order | torch.compile dynamic= | " + " | ".join(versions) + " |",
             "| --- | --- | --- |" + " --- |" * len(versions)]
    for setting, order, dyn in keys:
        cells = []
        for v in versions:
            row = next((r for r in fixes["versions"][v] if (r["setting"], r["order"], r["variant"].get("dynamic"))
                        == (setting, order, dyn)), None)
            cells.append(_fix_cell(row))
        lines.append(f"| `{setting}` | {order} | {dyn if dyn else '—'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fix_cell(row: dict | None) -> str:
    if row is None:
        return "—"
    if row.get("error"):
        err = row["error"]
        if any(t in err for t in ("has no attribute", "absent", "No module", "does not exist", "has no set_")):
            return "absent"
        last = next((t for t in reversed(row.get("traceback_tail") or []) if t.strip() and "TORCHDYNAMO" not in t
                     and not t.startswith("Set ")), "")
        return f"**raises** {err.split(':')[0]}" + (f" ({last.strip()[:40]})" if last else "")
    te = row.get("took_effect")
    base = row.get("baseline") or {}
    if row["fix"] == "guard_collectives":
        got = f"{base.get('compiles_by_rank')}→{row.get('compiles_by_rank')}"
    elif row["fix"] in ("capture_scalar_outputs", "reorderable_logging_functions"):
        got = f"breaks {base.get('graph_breaks')}→{row.get('graph_breaks')}"
    elif row["fix"] == "cache":
        got = f"fx hits {row.get('fxgraph_cache_hit')}, aot hits {row.get('aot_autograd_cache_hit')}"
    elif row["fix"] == "reduce_overhead":
        got = f"{row.get('compiles')} graphs, cudagraph skips {row.get('cudagraph_skips')}"
    else:
        lim = lambda d: "+limit" if (d.get("limit_hits") or 0) > 0 else ""  # noqa: E731
        got = f"{base.get('compiles')}{lim(base)}→{row.get('compiles')}{lim(row)}"
    mark = {True: "**yes**", False: "no", None: "n/a"}[te]
    return f"{mark} ({got})"


def _put(doc: str, start: str, end: str, text: str) -> str:
    a, b = doc.index(start) + len(start), doc.index(end)
    return doc[:a] + "\n" + text + "\n" + doc[b:]


def main() -> None:
    survey = json.loads(gzip.decompress((MATRIX / "survey.json.gz").read_bytes()))
    classes = "\n".join([
        "### Event class × torch version (what the log shows)", "",
        "Cells: `cm` = `compilation_metrics` events; `` N× `Type` `` = of them with that `fail_type`; no-graph = "
        "of them with no fail_type and `guard_count` and `graph_op_count` null (no graph, no guards); "
        "restart = `restart_reasons` set; gb/rr/err = "
        "`dynamo_graph_break_reason` / `recompile_reasons` / `dynamo_error` artifacts; fx/aot hit/miss/bypass = "
        "cache artifacts (or, marked cache_state, the `cache_state` of `*_cache_hash` artifacts); no metrics = "
        "compile ids seen with no `compilation_metrics`; `!N/` ids = compiled-autograd compile ids; r0/r1 = ranks. "
        "Each cell is checked against the log by the tests; `survey.json.gz` has the full facts per log.", "",
        class_table(survey)])
    fixes = ""
    if (MATRIX / "fix_matrix.json.gz").exists():
        fixes = "\n".join([
            "Cells: took effect? (baseline → with the fix: graphs compiled, `+limit` = the recompile limit was hit; "
            "breaks = graph breaks; for guard collectives the compiles per rank [rank 0, rank 1]). absent = the "
            "setting does not exist in that torch. Baselines: `dynamic=False` and 10 lengths (8 graphs + limit) or "
            "`dynamic=None` (2 graphs); `.item()` / `print` (1 break); 5 float values.", "",
            fix_table(json.loads(gzip.decompress((MATRIX / "fix_matrix.json.gz").read_bytes())))])
    if not DOC.exists():
        print(classes + "\n\n" + fixes)
        return
    doc = _put(DOC.read_text(), START, END, classes)
    if fixes:
        doc = _put(doc, FIX_START, FIX_END, fixes)
    if READER_START in doc:
        doc = _put(doc, READER_START, READER_END, reader_table())
    if WRITER_START in doc:
        doc = _put(doc, WRITER_START, WRITER_END, writer_table())
    DOC.write_text(doc)
    print(f"updated {DOC}")


if __name__ == "__main__":
    main()
