"""What the findings say on real inputs: compiles in the window are a cause, not host-bound idle or a straggler;
profiler-inflated host time is said; graph breaks are never failures; different programs are not divergence;
one definition per metric; the typed contract (registry, severity, views)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

import workbench
from workbench.analyses import findings as F
from workbench.analyses import metrics
from workbench.analyses.kinds import CompileGroupEvidence
from workbench.analyses.recompiles import classify_compiles, divergent_compiles, recompile_finding_list
from workbench.analyses.summary import AnalysisTables, analysis_tables, analyze
from workbench.compile_log import read_compile_logs
from workbench.schema import ANALYSIS_TABLES, COMPILES, FINDINGS, empty

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
DATA = ROOT / "tests" / "data"


def _sample(name: str):
    path = SAMPLES / name
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return workbench.open(path)


def _data(rel: str) -> Path:
    return DATA / rel


def _without_compile_logs(run) -> SimpleNamespace:
    return SimpleNamespace(path=None, kernels=run.kernels, steps=run.steps, collectives=run.collectives,
                           events=run.events, ranks=run.ranks, compiles=empty(COMPILES),
                           fingerprints=run.fingerprints, world_size=run.world_size)


def test_compile_in_the_window_is_compiling_not_host_bound_nor_a_straggler() -> None:
    """h200x2-planted read from its traces alone: rank 1's 2.5 s compile shows only as torch.compile's own
    ``(dynamo_timed)`` ranges. It becomes the root cause; rank 1's idle GPU and rank 0's wait in the all-reduce are
    its symptoms (a wait, not communication: docs/critical-path.md); rank 1 is no straggler."""
    run = _sample("h200x2-planted")
    roots = list(analysis_tables(_without_compile_logs(run)).roots)
    top = roots[0]
    assert top.kind == "compiling" and top.ranks == (1,) and top.evidence.seen_in == "trace"
    assert 2.3e9 <= top.cost.ns <= 2.8e9 and top.cost.basis == "measured"
    under = {(s.kind, s.ranks) for s in top.symptoms}
    assert ("host_bound", (1,)) in under and ("collective_wait", (0,)) in under
    assert not [f for f in roots if f.kind == "exposed_communication" and f.ranks == (0,) and f.severity != "low"]
    assert sum(f.cost_ns for f in roots if f.kind == "host_bound") < 0.1 * top.cost.ns
    assert not [f for f in roots if f.kind == "straggler" and f.ranks == (1,)]


def test_profiler_with_stack_is_said_not_just_investigate() -> None:
    run = workbench.open(_data("traces/h200-probe/ws1c_r0.json.gz"))
    roots = run.findings()
    idle = [f for f in roots if f.kind in ("host_bound", "launch_bound")]
    assert idle and idle[0].evidence.profiler_inflated and "profiler's own cost" in idle[0].message
    note = [f for f in roots if f.kind == "profiler_overhead"]
    assert note and note[0].severity == "info" and note[0].evidence.python_events > 1000


def test_graph_break_is_never_a_failure_on_real_logs() -> None:
    logs = [_data("compile_logs/torch2.13-cpu/single-process/graph_break")]
    run = _sample("cpu-gloo-fsdp2")
    for compiles in (read_compile_logs(logs)[0], run.compiles):
        c = classify_compiles(compiles)
        found = recompile_finding_list(c)
        breaks = [f for f in found if f.kind == "graph_break"]
        assert breaks, [f.kind for f in found]
        assert not [f for f in found if f.kind == "compile_failure"]
        for f in breaks:
            assert "fail" not in f.message.lower() and isinstance(f.evidence, CompileGroupEvidence)
    failed = classify_compiles(read_compile_logs([_data("compile_logs/torch2.13-cpu/single-process/fullgraph_fail")])[0])
    kinds = {f.kind for f in recompile_finding_list(failed)}
    assert "compile_failure" in kinds  # fullgraph=True really raised there (status failed)


def test_ranks_compiling_different_frames_run_different_programs() -> None:
    """Two real single-process logs of different scenarios as ranks 0 and 1: they compile different frames, which
    is not a divergent recompile (nobody waited for code they never run)."""
    base = _data("compile_logs/torch2.13-cpu/single-process")
    a, _ = read_compile_logs([base / "graph_break"], rank=0)
    b, _ = read_compile_logs([base / "dtype"], rank=1)
    c = classify_compiles(pl.concat([a, b], how="vertical_relaxed"))
    found = recompile_finding_list(c)
    assert not [f for f in found if f.kind == "divergent_recompile"]
    prog = [f for f in found if f.kind == "different_programs"]
    assert len(prog) == 1 and set(prog[0].ranks) == {0, 1} and prog[0].evidence.only_on
    assert divergent_compiles(c).height == 0


def test_divergence_is_matched_by_code_object_on_the_real_two_rank_log() -> None:
    c = classify_compiles(read_compile_logs([_data("compile_logs/torch2.13-cpu/2rank-gloo-divergent-shape")])[0])
    div = divergent_compiles(c)
    assert div.height == 1 and div["ranks"][0].to_list() == [1] and div["missing_ranks"][0].to_list() == [0]
    f = next(x for x in recompile_finding_list(c) if x.kind == "divergent_recompile")
    assert f.cost.basis == "estimated" and "compile time" in f.cost.method  # no steps, no collectives given
    assert "estimated" in f.message


def test_one_definition_per_metric_used_by_the_summary() -> None:
    run = _sample("h200x2-planted")
    s = analyze(run)
    typical = metrics.typical_step_ns(run.steps)
    waits = metrics.data_wait_median_ns(run.steps)
    recompiles = metrics.recompile_counts(run.compiles)
    for rank, e in s["ranks"].items():
        r = int(rank)
        assert e["step_time_ns"] == typical[r]
        assert e["data_wait_median_ns"] == waits[r]
        assert e["recompiles"] == recompiles.get(r, 0)
    # the step time includes the data wait: the straggler (rank 0, 30 ms of loading a step) has the longer step
    assert s["ranks"]["0"]["step_time_ns"] > s["ranks"]["1"]["step_time_ns"]
    # data wait is a median: rank 0's two stalled steps (2.6 s and 0.55 s) do not move it off the planted 30 ms
    raw = run.steps.filter((pl.col("rank") == 0) & (pl.col("source").cast(pl.String) == "collector"))
    values = raw["data_wait_ns"].drop_nulls().to_list()
    assert statistics.mean(values) > 3 * 30e6 and waits[0] == pytest.approx(30.6e6, rel=0.05)


def test_analysis_tables_are_typed_and_declared() -> None:
    t = analysis_tables(_sample("cpu-gloo-4rank"))  # a CPU run: the device tables are empty
    assert isinstance(t, AnalysisTables)
    for name in AnalysisTables.names():
        frame = getattr(t, name)
        assert isinstance(frame, pl.DataFrame) and frame.width > 0, name  # never a column-less frame
        if name in ANALYSIS_TABLES:
            assert dict(frame.schema).items() >= ANALYSIS_TABLES[name].items(), name
    assert dict(t.findings.schema) == dict(FINDINGS)


def test_registry_declares_every_kind_once_with_its_evidence() -> None:
    from workbench.analyses import recommendations as R
    from workbench.analyses.kinds import CollectiveDriftEvidence, Kind, StragglerEvidence

    assert F.KINDS and all(dataclasses.is_dataclass(spec.evidence) for spec in F.KINDS.values())
    with pytest.raises(ValueError):
        F.declare_kind("straggler", F.Evidence, "again", "none")
    with pytest.raises(ValueError):  # not a name of Kind
        F.declare_kind("straggler_2", F.Evidence, "new", "none")
    with pytest.raises(KeyError):
        F.make_finding("recompile", "m", CompileGroupEvidence("shape", None, (), None, None, None, (), 1, None),
                       F.Cost.none())
    with pytest.raises(TypeError):  # evidence of another kind is refused
        F.make_finding("straggler", "m", CompileGroupEvidence("shape", None, (), None, None, None, (), 1, None),
                       F.Cost.none())
    f = F.make_finding("recompile_shape", "m", CompileGroupEvidence("shape", None, (), None, None, None, (), 1, None),
                       F.Cost.none())
    assert f.kind is Kind.RECOMPILE_SHAPE and f.kind == "recompile_shape"

    @R.register_fixer(CollectiveDriftEvidence)
    def fixer(f: F.Finding[CollectiveDriftEvidence]) -> list[R.Fix]:
        return []

    try:
        assert fixer in R.fixers_for(Kind.COLLECTIVE_DRIFT) and fixer not in R.fixers_for(Kind.STRAGGLER)
        with pytest.raises(ValueError):   # a kind whose evidence is another class
            R.register_fixer(StragglerEvidence, kinds=(Kind.COLLECTIVE_DRIFT,))
    finally:
        R.unregister_fixer(fixer)
    assert fixer not in R.fixers_for(Kind.COLLECTIVE_DRIFT)


def test_severity_rule() -> None:
    wall = 10_000_000_000
    assert F.severity_of(F.Cost.measured(1e9, "x"), wall) == "high"
    assert F.severity_of(F.Cost.measured(3e8, "x"), wall) == "medium"
    assert F.severity_of(F.Cost.measured(1e6, "x"), wall) == "low"
    assert F.severity_of(F.Cost.none(), wall) == "info"
    assert F.severity_of(F.Cost.measured(None, "x"), wall) == "info"
    assert F.severity_of(F.Cost.none(), wall, hazard=True) == "high"


def test_recompiles_into_the_limit_are_one_root_cause() -> None:
    """The real ``limit`` log: dtype recompiles of one frame until the recompile limit, then eager. One root
    (``recompile_limit``), the recompiles under it, its cost their compile time."""
    from workbench.analyses.rootcause import link_compile_causes

    c = classify_compiles(read_compile_logs([_data("compile_logs/torch2.13-cpu/single-process/limit")])[0])
    found = recompile_finding_list(c)
    limit = [f for f in found if f.kind == "recompile_limit"]
    assert len(limit) == 1
    frame = (limit[0].evidence.co_name, limit[0].evidence.co_firstlineno)
    same = [f for f in found if f.kind.startswith("recompile_") and f.kind != "recompile_limit"
            and (f.evidence.co_name, f.evidence.co_firstlineno) == frame]
    assert same
    roots = link_compile_causes(found)
    root = next(f for f in roots if f.kind == "recompile_limit")
    assert {s.id for s in root.symptoms} == {f.id for f in same}
    assert not [f for f in roots if f.id in {s.id for s in same}]
    assert root.cost_ns == sum(f.cost_ns for f in same) + limit[0].cost_ns and root.severity == "high"


def test_per_rank_root_costs_fit_in_the_analysed_wall_time_on_every_sample() -> None:
    runs = sorted(p for p in SAMPLES.iterdir() if (p / "run.json").is_file()) if SAMPLES.is_dir() else []
    if not runs:
        pytest.skip(f"{SAMPLES} has no runs")
    for path in runs:
        run = workbench.open(path)
        roots = run.findings()
        for rank, wall in metrics.wall_ns(run.steps).items():
            total = sum(f.cost_ns for f in roots if rank in f.ranks)
            assert total <= wall, (path.name, rank, total, wall, [(f.id, f.cost_ns) for f in roots])
        for f in F.flatten(roots):
            assert f.cost.basis in ("measured", "estimated") and f.cost.method, (path.name, f.id)


def test_the_findings_frame_keeps_an_unknown_cost_unknown() -> None:
    """An unmeasured cost is null in the frame (as in ``analyze --json``), never a measured-looking 0 ns; a
    symptom's time is shown within its root cause's; a zero-cost info finding is a note."""
    ev = CompileGroupEvidence("shape", None, (), None, None, None, (), 1, None)
    unknown = F.make_finding("recompile_shape", "m", ev, F.Cost.estimated(None, "not measured"), key="u")
    none = F.make_finding("recompile_shape", "m", ev, F.Cost.none(), key="n")
    frame = F.findings_frame([unknown, none])
    assert frame["cost_ns"].to_list() == [None, 0]
    assert [d["cost_ns"] for d in F.findings_to_dicts([unknown, none])] == frame["cost_ns"].to_list()
    assert F.symptom_cost_ns(2_640_634_313, 2_627_177_414) == 2_627_177_414
    assert F.symptom_cost_ns(5, 10) == 5 and F.symptom_cost_ns(None, 10) is None and F.symptom_cost_ns(7, None) == 7
    assert F.costs_no_time(0, "info") and F.costs_no_time(None, "info")
    assert not F.costs_no_time(0, "high") and not F.costs_no_time(1, "info")


def test_divergent_compiles_of_one_step_share_its_wait() -> None:
    """Two frames recompiled on rank 1 alone in step 5 (1 s and 3 s of compiling) while rank 0 waited 4 s in that
    step's all-reduce: one wait, split by compile time (1 s and 3 s), never 4 s counted for each frame; a third
    compile alone in step 7 keeps its own step's whole wait."""
    from workbench.analyses.recompiles import DIVERGENT, divergence_cost

    def compile_row(cid: str, step: int, ns: int) -> dict:
        return {"compile_id": cid, "co_name": f"f{cid}", "location": f"m.py:{step}", "ranks": [1],
                "missing_ranks": [0], "step": step, "start": step * 10**10, "end": step * 10**10 + ns,
                "duration_ns": ns, "cause": "shape", "cause_detail": None, "cause_source": None, "nth": 1}

    div = pl.DataFrame([compile_row("0/1", 5, 10**9), compile_row("1/1", 5, 3 * 10**9), compile_row("2/1", 7, 10**9)],
                       schema=DIVERGENT)
    matched = pl.DataFrame({"rank": [0, 0, 1, 1], "step": [5, 7, 5, 7], "p2p": [False] * 4, "last_rank": [1] * 4,
                            "wait_ns": [4 * 10**9, 2 * 10**9, 0, 0]})
    out = {r["compile_id"]: r for r in divergence_cost(div, collectives=matched).iter_rows(named=True)}
    assert [out[c]["wait_ns"] for c in ("0/1", "1/1", "2/1")] == [10**9, 3 * 10**9, 2 * 10**9]
    assert out["0/1"]["wait_ns"] + out["1/1"]["wait_ns"] == 4 * 10**9
    assert "share" in out["1/1"]["cost_method"] and "share" not in out["2/1"]["cost_method"]
    assert all(r["cost_basis"] == "measured" for r in out.values())


def test_a_recompile_costs_only_its_own_layer_of_the_wait() -> None:
    """Rank 2 recompiles alone in step 3 and arrives last at its all-reduce (t = 900 ms); rank 1, late for a reason
    of its own, arrived at 600 ms, rank 0 on time at 0: rank 0 waited 900 ms, but only the 300 ms after rank 1's
    arrival were for the compile (the critical path charges rank 1 the 600 ms before: never counted twice)."""
    from workbench.analyses.recompiles import DIVERGENT, divergence_cost

    ms = 10**6
    div = pl.DataFrame([{"compile_id": "0/1", "co_name": "f", "location": "m.py:3", "ranks": [2],
                         "missing_ranks": [0, 1], "step": 3, "start": 0, "end": 800 * ms, "duration_ns": 800 * ms,
                         "cause": "shape", "cause_detail": None, "cause_source": None, "nth": 1}], schema=DIVERGENT)
    arrivals = pl.DataFrame({"rank": [0, 1, 2], "pg_name": ["0"] * 3, "step": [3] * 3, "order": [7] * 3,
                             "arrival": [0, 600 * ms, 900 * ms], "p2p": [False] * 3, "ranks_seen": [3] * 3,
                             "last_arrival": [900 * ms] * 3, "last_rank": [2] * 3,
                             "wait_ns": [900 * ms, 300 * ms, 0]})
    row = divergence_cost(div, arrivals=arrivals).row(0, named=True)
    assert row["wait_ns"] == 300 * ms and row["cost_basis"] == "measured"
    assert json.loads(row["wait_by_rank"]) == {"0": 300 * ms, "1": 300 * ms}


@pytest.mark.parametrize("name", ["h200x2-planted", "cpu-gloo-4rank"])
def test_the_divergence_table_is_the_findings_numbers(name) -> None:
    """``AnalysisTables.divergent`` (what the app's Recompiles page and the report list) holds each divergent
    recompile finding's cost and method: one computation, one number."""
    tables = analysis_tables(_sample(name))
    found = {f.evidence.compile_id: f for f in tables.roots if f.kind == "divergent_recompile"}
    assert found and set(found) == set(tables.divergent["compile_id"].to_list())
    for r in tables.divergent.iter_rows(named=True):
        f = found[r["compile_id"]]
        assert (r["wait_ns"], r["cost_basis"], r["cost_method"]) == (f.cost.ns, f.cost.basis, f.cost.method)


def test_ranks_recompiling_a_frame_in_different_steps_are_two_events() -> None:
    """Three ranks compile ``forward`` at step 0; rank 0 recompiles it alone at step 2 and rank 1 at step 5 (each its second compile of the frame). Matched by their
    order on the rank they would be one event of both at step 2; they are two, each of one rank, at its own step,
    and every recompile is explained by its divergent finding (no second, per-cause finding of the same compile)."""
    from workbench import schema
    from workbench.analyses.kinds import Kind
    from workbench.analyses.recompiles import divergent_compiles, recompile_finding_list

    ms = 10**6
    rows = []
    for r in range(3):
        rows.append({"rank": r, "compile_id": "0/0", "frame_compile_id": 0, "co_name": "forward",
                     "co_filename": "m.py", "co_firstlineno": 3, "start": 0, "end": 100 * ms,
                     "duration_ns": 100 * ms, "status": "ok", "step": 0})
    for r, step, cid in ((0, 2, "0/1"), (1, 5, "0/2")):      # ids differ too: ranks number compiles on their own
        rows.append({"rank": r, "compile_id": cid, "frame_compile_id": int(cid[-1]), "co_name": "forward",
                     "co_filename": "m.py", "co_firstlineno": 3, "start": step * 1000 * ms,
                     "end": step * 1000 * ms + 300 * ms, "duration_ns": 300 * ms, "status": "ok", "step": step,
                     "recompile_reasons": ["tensor 'x' size mismatch at index 0. expected 16, actual 11"]})
    compiles = schema.conform(pl.DataFrame(rows), schema.COMPILES)
    div = divergent_compiles(compiles)
    assert sorted((d["step"], tuple(d["ranks"]), tuple(d["rank_compile_ids"])) for d in div.iter_rows(named=True)) \
        == [(2, (0,), ("0/1",)), (5, (1,), ("0/2",))]
    found = recompile_finding_list(compiles)
    div_steps = sorted((f.steps[0], tuple(f.evidence.compiling_ranks)) for f in found
                       if f.kind == Kind.DIVERGENT_RECOMPILE)
    assert div_steps == [(2, (0,)), (5, (1,))]
    assert not [f for f in found if f.kind.value.startswith("recompile_")]
