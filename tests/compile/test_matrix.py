"""Every cell of the compile-log version matrix (event class × torch 2.5 … 2.15) read through the product.

Each cell is one recorded log folder under ``tests/data/compile_logs/matrix/<version>/<class>/`` (see its README):
the logs go through :func:`workbench.compile_log.read_compile_logs` and
:func:`workbench.analyses.recompiles.classify_compiles`, and the result is checked

- against ``expected.json.gz`` (what the scenario script knew): the per-rank counts (:func:`event_counts`), and per
  declared event its class, step (where the log carries one: torch 2.9+), user line and cost (the compile time the
  product reports is part of the step's measured extra wall time, and most of it);
- against ``tlparse.json.gz`` (tlparse 0.4.3 on the unpruned log): the compile ids, which of them failed or restarted,
  the graph-break and recompile-reason artifacts, and the cache hits / misses / bypasses.

:data:`GAPS` lists the cells where a torch version's log does not hold a fact, with the value the product gives
there and why; each is checked as such (a gap that closes fails the test, so the table stays true).
docs/compile-logs.md's reader table is generated from this module (``scripts/compile_matrix/make_tables.py``).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from workbench.analyses.recompiles import (
    break_location, classify_compiles, classify_graph_break, event_counts, recompile_finding_list,
)
from workbench.analyses.kinds import Kind
from workbench.compile_log import read_compile_logs

MATRIX = Path(__file__).resolve().parents[1] / "data" / "compile_logs" / "matrix"
VERSIONS = sorted((p.name for p in MATRIX.iterdir() if p.is_dir() and p.name[0].isdigit()),
                  key=lambda v: tuple(int(x) for x in v.split(".")))
CLASSES = sorted({p.name for v in VERSIONS for p in (MATRIX / v).iterdir() if p.is_dir()})
CELLS = [(v, c) for v in VERSIONS for c in CLASSES if (MATRIX / v / c / "expected.json.gz").exists()]


def _json(path: Path) -> dict:
    """A stored ``*.json.gz``."""
    return json.loads(gzip.decompress(path.read_bytes()))

#: The product's recompile cause (and detail, when it matters) for each cause a scenario declares.
RECOMPILE_CAUSE = {
    "shape": ("shape", None), "dtype": ("dtype", None), "stride": ("stride", None), "int_arg": ("int_arg", None),
    "float_arg": ("float_arg", None), "module_attr": ("module", "attribute"), "global": ("global", None),
    "grad_mode": ("grad_mode", None), "train_eval": ("module", "training"), "requires_grad": ("requires_grad", None),
}
_NO_REASON_25 = "torch 2.5 logs neither the reason nor the line of a skipped frame (no artifact at all)"
_NO_LINE_BACKEND = ("a backend error names no user line (fail_user_frame is null): the product names the frame that "
                    "runs eagerly (co_name, co_firstlineno) instead of the call")
#: (version, class) → {check: (the product's value there, why)}: facts a version's log does not hold.
GAPS: dict[tuple[str, str], dict[str, tuple[object, str]]] = {
    ("2.5.1", "gb_loop"): {
        "count graph_breaks": (0, _NO_REASON_25),
        "skipped_frame skip_reason": ("no_reason_logged", _NO_REASON_25),
        "skipped_frame line": (None, _NO_REASON_25),
    },
    ("2.5.1", "gb_nested"): {
        "count graph_breaks": (2, "torch 2.5 logs no break artifact: the break shows as two resume frames (in "
                                  "helper at the branch, in f at the call), and nothing links them"),
    },
    ("2.5.1", "suppress_errors"): {
        "count failures": (1, "torch 2.5's compilation_metrics carry no dynamo_config: a suppressed error reads "
                              "as a failure"),
        "count suppressed": (0, "as above"), "count skipped_frames": (0, "as above"),
        "skipped_frame skip_reason": (None, "as above"),
    },
    ("2.5.1", "gb_plain"): {
        "graph_break type": (["other"], "torch 2.5 logs no reason for a break dynamo did not restart at: only the "
                                        "resume frame shows it (its line, not its kind)"),
    },
    **{(v, "suppress_errors"): {"skipped_frame line": (None, _NO_LINE_BACKEND)}
       for v in ("2.7.1", "2.9.1", "2.11.0", "2.13.0", "2.15.0")},
    ("2.5.1", "cache_bypass"): {
        "cache_bypass": (0, "torch 2.5 does not report the bypass (the custom pass made it a miss)"),
    },
    ("2.5.1", "compiled_autograd"): {
        "compiled_autograd": (0, "torch 2.5 writes no compiled_autograd_id: its graphs are plain frame ids"),
    },
}


def _gap(v: str, c: str, check: str) -> tuple[object, str] | None:
    return GAPS.get((v, c), {}).get(check)


def _read(v: str, c: str) -> tuple[dict, pl.DataFrame]:
    folder = MATRIX / v / c
    exp = _json(folder / "expected.json.gz")
    compiles, skipped = read_compile_logs(sorted(folder.glob("*.log.gz")))
    assert not skipped.filter(pl.col("reason").str.contains("unknown event|malformed")).height, skipped
    return exp, classify_compiles(compiles)


def _check(v: str, c: str, check: str, got: object, want: object) -> None:
    gap = _gap(v, c, check)
    if gap is None:
        assert got == want, f"{v} {c}: {check}: got {got!r}, the script knew {want!r}"
    else:
        assert got == gap[0], f"{v} {c}: {check}: the documented gap ({gap[1]}) changed: got {got!r}"


def _line(loc: str | None) -> int | None:
    return int(loc.rsplit(":", 1)[1]) if loc and loc.rsplit(":", 1)[-1].isdigit() else None


def _cost_ok(row: dict, cost_ns: int | None) -> bool:
    """The product's cost of the event (its compile time) lies within the step's measured extra wall time, and is
    most of it when the step cost much (compile-dominated steps; the CPU was shared, hence the slack)."""
    dur = row["duration_ns"]
    if cost_ns is None or dur is None:
        return True
    if dur > cost_ns * 1.1 + 20_000_000:
        return False
    return cost_ns < 100_000_000 or dur >= 0.3 * cost_ns


@pytest.mark.parametrize(("version", "cls"), CELLS)
def test_counts_per_rank(version: str, cls: str) -> None:
    exp, c = _read(version, cls)
    if not exp.get("supported", True):
        assert c.is_empty()
        return
    got = event_counts(c)
    for rank, r in exp["ranks"].items():
        mine = got.get(int(rank), {})
        for key, want in r["counts"].items():
            _check(version, cls, f"count {key}", mine.get(key), want)


@pytest.mark.parametrize(("version", "cls"), CELLS)
def test_events_class_step_line_cost(version: str, cls: str) -> None:
    exp, c = _read(version, cls)
    if not exp.get("supported", True):
        pytest.skip(exp.get("why", "not supported on this torch"))
    has_step = tuple(int(x) for x in version.split(".")[:2]) >= (2, 9)
    for rank, r in exp["ranks"].items():
        rows = c.filter(pl.col("rank") == int(rank)).to_dicts()
        recompiles = [x for x in rows if (x["frame_compile_id"] or 0) > 0 and x["status"] in ("ok", "graph_break")]
        limits = [x for x in rows if x["status"] == "eager_fallback"]
        failures = [x for x in rows if x["status"] == "failed"]
        n_recompile = n_failure = 0
        for e in r["events"]:
            kind, step = e["kind"], e.get("step")
            if kind in ("recompile", "recompile_limit", "failure"):
                pool = {"recompile": recompiles, "recompile_limit": limits, "failure": failures}[kind]
                i = {"recompile": n_recompile, "failure": n_failure}.get(kind, 0)
                assert i < len(pool), f"{version} {cls}: no {kind} #{i} in the product's compiles"
                row = pool[i]
                if kind == "recompile":
                    n_recompile += 1
                    cause, detail = RECOMPILE_CAUSE[e["cause"]]
                    assert row["cause"] == cause and (detail is None or row["cause_detail"] == detail), row
                    if e.get("frame") and row["co_name"] != "inner":   # torch names a compiled module's call "inner"
                        assert row["co_name"] == e["frame"]
                elif kind == "failure":
                    n_failure += 1
                    if row["fail_user_frame"]:
                        assert _line(row["fail_user_frame"]) == e["line"]
                assert row["step"] == (step if has_step else None), (kind, row["step"], step)
                assert _cost_ok(row, e.get("cost_ns")), (kind, row["duration_ns"], e.get("cost_ns"))
            elif kind == "graph_break":
                breaks = [x for x in rows if x["status"] == "graph_break"]
                assert breaks, f"{version} {cls}: no graph break read"
                types = {classify_graph_break(x["break_reason"] or "")[0] for x in breaks} | {x["cause_detail"] for x in breaks}
                _check(version, cls, "graph_break type", e["cause"] if e["cause"] in types else sorted(types),
                       e["cause"])
                lines = {_line(break_location(x)) for x in rows if break_location(x)}
                assert e["line"] in lines, (e["line"], lines)
                assert breaks[0]["step"] == (step if has_step else None)
                first_step = [x for x in rows if x["step"] == breaks[0]["step"]]
                total = sum(x["duration_ns"] or 0 for x in first_step)
                assert _cost_ok({"duration_ns": total or None}, e.get("cost_ns"))
            elif kind == "skipped_frame":
                sk = [x for x in rows if x["status"] == "skipped_frame"]
                _check(version, cls, "skipped_frame skip_reason", sk[0]["skip_reason"] if sk else None, e["cause"])
                if sk:
                    assert sk[0]["co_name"] == e["frame"]
                    _check(version, cls, "skipped_frame line", _line(sk[0]["fail_user_frame"]), e["line"])
                    assert sk[0]["step"] == (step if has_step else None)
                    assert _cost_ok(sk[0], e.get("cost_ns"))
            elif kind in ("cache_hit", "cache_miss"):
                got = [x for x in rows if x["cause_detail"] == kind]
                assert got, f"{version} {cls}: no {kind}"
                assert got[0]["step"] == (step if has_step else None)
                assert _cost_ok(got[0], e.get("cost_ns"))
            elif kind == "cache_bypass":
                _check(version, cls, "cache_bypass", sum(x["cache_bypasses"] or 0 for x in rows), 1)
            elif kind == "compiled_autograd":
                _check(version, cls, "compiled_autograd",
                       len({x["compiled_autograd_id"] for x in rows if x["compiled_autograd_id"] is not None}), 2)
            elif kind in ("first_compile", "reset"):
                gen = e["generation"]
                assert any(x["generation"] == gen and x["frame_compile_id"] == 0 for x in rows), (kind, gen)
                if kind == "first_compile" and has_step:
                    assert {x["step"] for x in rows if x["generation"] == gen} == {step}
            elif kind == "wait_for_peer_compile":
                found = [f for f in recompile_finding_list(c) if f.kind == Kind.DIVERGENT_RECOMPILE]
                assert len(found) == 1, found
                ev = found[0].evidence
                assert ev.waiting_ranks == (int(rank),) and ev.step == (step if has_step else None)
            elif kind in ("ddp_split", "ddp_internal_breaks", "fsdp2_compile"):
                assert rows, f"{version} {cls}: no compile read"
                if kind == "ddp_internal_breaks" and version != "2.5.1":
                    assert any(x["status"] == "graph_break" for x in rows)
            else:
                pytest.fail(f"event kind {kind!r} has no check")


def _base(cid: str) -> str:
    return cid.split("_", 1)[0]


@pytest.mark.parametrize(("version", "cls"), CELLS)
def test_tlparse_agreement(version: str, cls: str) -> None:
    """The product reads each log as tlparse does: the same compile ids (a reset's repeated ids are one id, as
    tlparse merges them), the same failed and restarted ids, graph-break and recompile-reason artifacts, and cache
    hits / misses / bypasses."""
    _, c = _read(version, cls)
    tl = _json(MATRIX / version / cls / "tlparse.json.gz")
    for rank, t in tl["ranks"].items():
        if t.get("exit") != 0:
            continue
        rows = c.filter(pl.col("rank") == int(rank)).to_dicts() if rank.isdigit() else c.to_dicts()
        tl_ids = {_base(i) for i in t["compile_ids"] if "-" not in i}   # compiled autograd's "!0/-/-": no frame
        assert {_base(x["compile_id"]) for x in rows} == tl_ids
        with_metrics = {_base(x["compile_id"]) for x in rows if x["status"] not in ("incomplete",)
                        and not (x["status"] == "eager_fallback" and x["start"] is None)}
        assert len(with_metrics) == t["counts"]["with_compilation_metrics"]
        errors = {_base(i) for i, s in t["status"].items() if s == "error"}
        raised = {_base(x["compile_id"]) for x in rows
                  if x["status"] == "failed" or (x["status"] == "skipped_frame" and x["fail_type"])}
        assert raised == errors, (raised, errors)
        restarted = {_base(x["compile_id"]) for x in rows if x["restart_reasons"]}
        broke = {_base(i) for i, s in t["status"].items() if s == "break"}   # restarted with a graph
        empty = {_base(i) for i, s in t["status"].items() if s == "empty"}   # no graph (restarted or not)
        assert broke <= restarted <= broke | empty, (restarted, broke, empty)
        counts = t["counts"]
        gt0 = {_base(x["compile_id"]) for x in rows if (x["frame_compile_id"] or 0) > 0}
        assert len(gt0) == counts["frame_compile_id_gt0"]   # tlparse's "recompiles" (retries and refusals too)
        assert sum(len(x["graph_breaks"]) for x in rows) == counts["graph_break_artifacts"]
        cache = counts.get("cache", {})
        hits = cache.get("fx_graph_cache_hit", 0) + cache.get("aotautograd_cache_hit", 0)
        misses = cache.get("fx_graph_cache_miss", 0) + cache.get("aotautograd_cache_miss", 0)
        if hits or misses:
            assert sum(x["cache_hits"] or 0 for x in rows) == hits
            assert sum(x["cache_misses"] or 0 for x in rows) == misses
        assert sum(x["cache_bypasses"] or 0 for x in rows) == cache.get("aotautograd_cache_bypass", 0)


def test_docs_tables_are_the_tested_ones() -> None:
    """docs/compile-logs.md's reader table (from :data:`GAPS`) and writer table (from the fix-version rules and
    ``fix_matrix.json``) are what ``scripts/compile_matrix/make_tables.py`` generates now."""
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("_wb_make_tables", root / "scripts" / "compile_matrix" / "make_tables.py")
    mt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mt)   # type: ignore[union-attr]
    doc = (root / "docs" / "compile-logs.md").read_text()
    assert mt.reader_table() in doc and mt.writer_table() in doc, "run scripts/compile_matrix/make_tables.py"


TLPARSE_INPUTS = MATRIX / "tlparse_inputs"


def test_tlparse_cache_hit_miss_reset_is_generations_not_recompiles() -> None:
    """tlparse's ``cache_hit_miss.log``: a process that resets dynamo between compiles (2 frames × 3 generations)
    is 6 first compiles and no recompile; tlparse merges the repeated ids into 2 and counts the same cache events."""
    c = classify_compiles(read_compile_logs([TLPARSE_INPUTS / "logs" / "cache_hit_miss.log.gz"])[0])
    counts = event_counts(c)[0]
    assert (counts["compiles"], counts["first_compiles"], counts["recompiles"], counts["generations"]) == (6, 6, 0, 3)
    tl = _json(TLPARSE_INPUTS / "cache_hit_miss.tlparse.json.gz")["ranks"]["0"]
    assert {_base(x) for x in c["compile_id"].to_list()} == {_base(i) for i in tl["compile_ids"]}
    cache = tl["counts"]["cache"]
    assert int(c["cache_hits"].sum()) == cache.get("fx_graph_cache_hit", 0) + cache.get("aotautograd_cache_hit", 0)
    assert int(c["cache_misses"].sum()) == cache.get("fx_graph_cache_miss", 0) + cache.get("aotautograd_cache_miss", 0)
    assert int(c["cache_bypasses"].sum()) == cache.get("aotautograd_cache_bypass", 0)


def test_tlparse_multi_rank_runtime_repeated_blocks_are_not_compile_ids() -> None:
    """tlparse's ``multi_rank_runtime``: on ranks 0-4 the ``0/1`` block is written three times (as 0/1, 0/2, 0/3,
    identical times and content). The product reads one 0/1 per rank (the copies are noted), so every rank made the
    same 2 compiles: no divergent recompile, one recompile finding for the 7 ranks."""
    logs = sorted((TLPARSE_INPUTS / "logs" / "multi_rank_runtime").glob("*.log.gz"))
    compiles, skipped = read_compile_logs(logs)
    c = classify_compiles(compiles)
    tl = _json(TLPARSE_INPUTS / "multi_rank_runtime.tlparse.json.gz")["ranks"]
    for rank in range(7):
        mine = set(c.filter(pl.col("rank") == rank)["compile_id"].to_list())
        assert mine == {"0/0", "0/1"} and mine <= set(tl[str(rank)]["compile_ids"])
        copies = len(tl[str(rank)]["compile_ids"]) - len(mine)
        noted = skipped.filter((pl.col("rank") == rank) & pl.col("reason").str.contains("repeated"))["count"].sum()
        assert noted == copies
    found = recompile_finding_list(c)
    assert not [f for f in found if f.kind == Kind.DIVERGENT_RECOMPILE]
    rec = [f for f in found if f.kind.value.startswith("recompile_")]
    assert len(rec) == 1 and rec[0].ranks == tuple(range(7))
