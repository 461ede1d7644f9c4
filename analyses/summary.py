"""``analyze(run)``: every analysis on a run's tables, and the summary the CLI, app and reports use.

:func:`analysis_tables` returns the frames (for the UI and notebooks); :func:`analyze` condenses them into a
JSON-ready dict: per rank ``compute_pct``, ``idle_pct``, ``comm_compute_overlap_pct``, ``exposed_comm_pct`` (percent
of the analysed window; null where the rank has no device activity, or no communication for the overlap), step
times, collective waits, kernel class times, and the ranked findings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import polars as pl

from workbench.analyses import (  # noqa: F401  (detectors)
    applied, bubbles, hangs, idle_findings, late_ranks, recompiles, stragglers,
)
from workbench.analyses import metrics
from workbench.analyses.breakdown import KERNEL_WAIT_NS, breakdown_by_rank
from workbench.analyses.bubbles import step_idle
from workbench.analyses.collectives import (
    clock_offsets, collective_drift, collective_instances, collective_wait_by_rank, match_collectives,
)
from workbench.analyses.critical_path import (
    CriticalPath, critical_path, crowded_ranks, explain, export_costs, victim_waits, window_events,
)
from workbench.analyses.detectors import Inputs, register_detector, run_detectors
from workbench.analyses.findings import (
    Cost, Finding, symptom_cost_ns, costs_no_time, findings_frame, findings_to_dicts, make_finding,
)
from workbench.analyses.hangs import collective_arrivals, job_failure_first
from workbench.analyses.kinds import Kind, ProfilerOverheadEvidence
from workbench.analyses.overlap import comm_compute_overlap
from workbench.analyses.per_rank import event_tables
from workbench.analyses.recompiles import classify_compiles, divergence_table
from workbench.analyses.rootcause import attribute, trace_compile_spans, without_waits
from workbench.analyses.stragglers import step_times, straggler_ranks
from workbench.analyses.window import Window
from workbench.format import duration, kind_title
from workbench.schema import (
    COLLECTIVES, COMPILES, FINGERPRINTS, RANKS, STEPS, HangTables, conform, empty, empty_hang_tables,
)


def _table(run: Any, name: str, schema: dict) -> pl.DataFrame:
    frame = getattr(run, name, None)
    return frame if isinstance(frame, pl.DataFrame) else empty(schema)


@dataclass(frozen=True)
class AnalysisTables:
    """Every analysis output of one run (schemas in ``workbench.schema.ANALYSIS_TABLES``), plus the typed
    findings (``roots``: root causes, most costly first, symptoms under them) and their frame view
    (``findings``); read a frame as an attribute (``tables.breakdown``).

    ``idle_gaps`` holds every gap up to ``per_rank.IDLE_GAPS_KEPT`` rows; a larger run keeps each rank's longest
    (``per_rank.kept_gaps``), so thousands of ranks fit in memory. ``idle_by_stream`` / ``idle_by_step`` always
    count every gap."""

    divergent: pl.DataFrame            # each compile made on some ranks only, with the others' wait (recompiles.py)
    breakdown: pl.DataFrame
    breakdown_by_rank: pl.DataFrame
    overlap: pl.DataFrame
    idle_gaps: pl.DataFrame
    idle_by_stream: pl.DataFrame
    idle_by_step: pl.DataFrame
    idle_attribution: pl.DataFrame     # what the host did while the GPU waited (analyses/idle_causes.py)
    step_idle: pl.DataFrame
    bubbles: pl.DataFrame
    collectives: pl.DataFrame
    collective_instances: pl.DataFrame
    collective_wait: pl.DataFrame
    clock_offsets: pl.DataFrame
    collective_drift: pl.DataFrame
    step_times: pl.DataFrame
    stragglers: pl.DataFrame
    top_kernels: pl.DataFrame
    launch_stats: pl.DataFrame
    kernel_class_time: pl.DataFrame
    compiles_by_rank: pl.DataFrame
    step_table: pl.DataFrame
    findings: pl.DataFrame
    roots: tuple[Finding, ...] = ()
    critical_path: CriticalPath | None = None   # who waited for whom at every collective (docs/critical-path.md)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The frames' names (every field but ``roots`` and ``critical_path``)."""
        return tuple(f.name for f in fields(cls) if f.name not in ("roots", "critical_path"))


def _declared(name: str, frame: pl.DataFrame | None) -> pl.DataFrame:
    """``frame`` in its declared schema (never a column-less empty frame)."""
    from workbench.schema import ANALYSIS_TABLES

    sch = ANALYSIS_TABLES.get(name)
    if sch is None:
        return frame if frame is not None else pl.DataFrame()
    if frame is None or frame.width == 0:
        return empty(sch)
    extra = [c for c in frame.columns if c not in sch]
    return conform(frame, sch) if not extra else conform(frame, sch).hstack(frame.select(extra))


def _hangs(run: Any) -> HangTables:
    """The run's hang tables (``Run.hangs``: the I/O layer reads them), empty when it has none."""
    hang = getattr(run, "hangs", None)
    return hang if isinstance(hang, HangTables) else empty_hang_tables()


def _critical_path(run: Any, hang: HangTables, colls: pl.DataFrame, steps: pl.DataFrame, compiles: pl.DataFrame,
                   traced: dict[int, list[tuple[int, int]]], ranks: pl.DataFrame, fingerprints: pl.DataFrame
                   ) -> CriticalPath:
    """The run's critical path across ranks, its late ranks' time explained with the window events of its ranks
    (read through the run, only when some rank held the others back)."""
    from workbench.analyses.late_ranks import with_traced

    compiles = with_traced(compiles, traced)
    exports = export_costs(hang.trace_exports, crowded_ranks(fingerprints))
    cp = critical_path(hang.entries, colls, steps, compiles, None, ranks, exports, hang.gc_pauses)
    if cp.layers.is_empty():
        return cp
    events = window_events(run, sorted(cp.instances["rank"].unique().to_list()))
    return explain(cp, steps, compiles, events, ranks, exports, hang.gc_pauses) if events is not None else cp


def _with_stack_ranks(python_events: pl.DataFrame) -> pl.DataFrame:
    """The ranks whose traces hold ``python_function`` events (recorded with ``with_stack``), with their counts."""
    if python_events.is_empty() or "events" not in python_events.columns:
        return python_events.clear()
    return python_events.filter(pl.col("events") > 0)


@register_detector(Kind.PROFILER_OVERHEAD, needs=("python_events", "ranks"), order=70)
def _profiler_overhead(x: Inputs) -> list[Finding[ProfilerOverheadEvidence]]:
    """``profiler_overhead`` when the traces hold ``python_function`` events (recorded with ``with_stack``);
    ``python_events``: their count per rank (``rank``, ``events``; ``per_rank.rank_tables``)."""
    py = _with_stack_ranks(x.python_events)
    if py.is_empty():
        return []
    with_stack = sorted(set(py["rank"].to_list()))
    shapes: list[int] = []
    if "record_shapes" in x.ranks.columns:
        shapes = sorted(x.ranks.filter(pl.col("record_shapes").fill_null(False))["rank"].to_list())
    return [make_finding(
        Kind.PROFILER_OVERHEAD,
        f"The trace of rank {', '.join(map(str, with_stack))} was recorded with with_stack=True"
        f"{' and record_shapes=True' if shapes else ''}: the profiler then slows every host-side op, so host time "
        "and host-bound idle in this window are inflated. Record without them to measure the host cost.",
        ProfilerOverheadEvidence(tuple(with_stack), int(py["events"].sum()), tuple(shapes)),
        Cost.none("none (it inflates the host time measured in the window)"), ranks=with_stack, source="summary")]


def _steps_by_rank(breakdown: pl.DataFrame) -> dict[int, list[int]]:
    """The analysed steps of each rank (the per-step breakdown's rows)."""
    if breakdown is None or breakdown.is_empty() or "step" not in breakdown.columns:
        return {}
    g = breakdown.drop_nulls("step").group_by("rank").agg(pl.col("step").unique().sort())
    return {int(r): [int(x) for x in st] for r, st in g.iter_rows()}


def _distorted_steps(compiles: pl.DataFrame, steps: pl.DataFrame, traced: dict[int, list] | None = None) -> set[int]:
    """Steps whose start times say nothing about a straggler: steps in which some rank recompiled (by the compile
    log's step, or a profiler step holding the trace's compile ranges) and the step after (the compile is its own
    cause), and the first step after each profiler window (the trace export)."""
    out: set[int] = set()
    known: set[int] = set()
    if not compiles.is_empty():
        known |= {int(s) for s in compiles.filter(pl.col("frame_compile_id").fill_null(0) > 0)["step"].drop_nulls()}
    if traced and not steps.is_empty():
        prof = steps.filter(pl.col("source").cast(pl.String) == "profiler")
        for r, st, a, b in prof.select("rank", "step", "start", "end").iter_rows():
            if any(s < b and e > a for s, e in traced.get(int(r), [])):
                known.add(int(st))
    out |= known | {s + 1 for s in known}
    col = steps.filter(pl.col("source").cast(pl.String) == "collector") if not steps.is_empty() else steps
    if not col.is_empty() and col["profiled"].any():
        prof = col.filter(pl.col("profiled").fill_null(False))["step"].unique()
        out |= {int(s) + 1 for s in prof if int(s) + 1 not in set(prof.to_list())}
    return out


def analysis_tables(run: Any, window: Window = "steady", kernel_wait_ns: int = KERNEL_WAIT_NS, *,
                    timeout_s: float | None = None) -> AnalysisTables:
    """Every analysis output for ``run`` (anything with ``kernels``, ``steps``, ``collectives``, ``events``,
    ``ranks``, ``compiles``, ``fingerprints`` polars attributes and optionally ``hangs``, e.g. :class:`workbench.Run`), as
    :class:`AnalysisTables`; its ``roots`` are the typed findings, root causes first."""
    steps = _table(run, "steps", STEPS)
    colls = _table(run, "collectives", COLLECTIVES)
    ranks = _table(run, "ranks", RANKS)
    ev = event_tables(run, steps, window, kernel_wait_ns)  # rank by rank on a workbench.Run: analyses/per_rank.py
    compiles = _table(run, "compiles", COMPILES)
    if compiles.height:
        compiles = classify_compiles(compiles)
    fingerprints = _table(run, "fingerprints", FINGERPRINTS)

    out: dict[str, pl.DataFrame] = {}
    bd = ev["breakdown"]
    out["breakdown"] = bd
    out["breakdown_by_rank"] = breakdown_by_rank(bd)
    out["overlap"] = comm_compute_overlap(bd)
    gaps = ev["idle_gaps"]
    out["idle_gaps"] = gaps
    out["idle_by_stream"] = ev["idle_by_stream"]  # from every gap, batch by batch (idle_gaps may be cut)
    out["idle_by_step"] = ev["idle_by_step"]
    out["idle_attribution"] = ev["idle_attribution"]
    out["step_idle"] = step_idle(bd)
    out["bubbles"] = ev["bubbles"]
    matched = match_collectives(colls, ranks) if not colls.is_empty() else pl.DataFrame()
    out["collectives"] = matched
    out["collective_instances"] = collective_instances(matched)
    out["collective_wait"] = collective_wait_by_rank(matched)
    out["clock_offsets"] = clock_offsets(colls, ranks)
    out["collective_drift"] = collective_drift(matched)
    out["step_times"] = step_times(steps) if not steps.is_empty() else pl.DataFrame()
    out["step_table"] = metrics.step_table(steps)
    pipeline = metrics.is_pipeline(out["bubbles"])
    traced = trace_compile_spans(ev.get("compile_events"))
    out["stragglers"] = straggler_ranks(steps, matched, use_step_starts=not pipeline,
                                        exclude_steps=_distorted_steps(compiles, steps, traced))
    out["top_kernels"] = ev["top_kernels"]
    out["launch_stats"] = ev["launch_stats"]
    out["kernel_class_time"] = ev["kernel_class_time"]
    out["compiles_by_rank"] = compiles_by_rank(compiles)

    main = ev["main_streams"]
    main_causes = out["idle_by_stream"].join(main, on=["rank", "stream"], how="semi") if not main.is_empty() else None
    hang = _hangs(run)
    cp = _critical_path(run, hang, colls, steps, compiles, traced, ranks, fingerprints)   # critical_path.py
    arrivals = collective_arrivals(hang.entries, steps)    # every step's, from the Flight Recorder
    out["divergent"] = divergence_table(compiles, steps, matched if not matched.is_empty() else colls, arrivals)
    device = without_waits(ev["device_time"], victim_waits(cp, ranks))     # exposed communication: transfer only
    inputs = Inputs(
        steps=steps, collectives=colls, matched=matched, ranks=ranks, compiles=compiles, fingerprints=fingerprints,
        meta=getattr(run, "meta", None) or {}, world_size=getattr(run, "world_size", None), timeout_s=timeout_s,
        tables=out, main_causes=main_causes, python_events=ev["python_events"],
        profiler_inflated=not _with_stack_ranks(ev["python_events"]).is_empty(), steps_by_rank=_steps_by_rank(bd),
        device=device, traced=traced, hangs=hang, critical_path=cp, arrivals=arrivals)
    found = run_detectors(inputs)   # analyses/detectors.py: every registered detector, in order
    wall = metrics.wall_ns(steps) or {r: sum(e - s for s, e in w) for r, w in device.window.items()}
    roots = attribute(found, device=device, compiles=compiles, matched=matched, steps=steps, wall_ns=wall)
    # why the job stopped comes first; its cost is the other ranks' blocked time, not capped at its own ranks' wall
    roots = job_failure_first([*run_detectors(inputs, attributed=False), *roots])  # analyses/hangs.py
    tables = {name: _declared(name, frame) for name, frame in out.items()}
    return AnalysisTables(**tables, findings=findings_frame(roots), roots=tuple(roots), critical_path=cp)


def run_findings(run: Any, window: Window = "steady", *, timeout_s: float | None = None) -> list[Finding]:
    """The typed findings of ``run``: root causes, most costly first, each with its symptoms (``run.findings()``)."""
    return list(analysis_tables(run, window, timeout_s=timeout_s).roots)


def compiles_by_rank(compiles: pl.DataFrame) -> pl.DataFrame:
    """Per rank: ``compiles`` (frame compiles), ``recompiles`` (:func:`workbench.analyses.metrics.recompile_counts`)
    and ``compile_time_ns`` (:func:`workbench.analyses.metrics.compile_time_ns`; null when no duration is known)."""
    from workbench.schema import ANALYSIS_TABLES

    if compiles.is_empty():
        return empty(ANALYSIS_TABLES["compiles_by_rank"])
    re, ns = metrics.recompile_counts(compiles), metrics.compile_time_ns(compiles)
    out = compiles.group_by("rank").agg(compiles=pl.len()).sort("rank")
    return out.with_columns(recompiles=pl.col("rank").replace_strict(re, default=0, return_dtype=pl.UInt32),
                            compile_time_ns=pl.col("rank").replace_strict(ns, default=None, return_dtype=pl.Int64)) \
        .select("rank", "compiles", "recompiles", "compile_time_ns")


def findings_costs(findings: pl.DataFrame, *, top: int = 15) -> pl.DataFrame:
    """The findings (``FINDINGS`` rows, e.g. the root causes) by the time they cost, most costly first (at most
    ``top``): ``label`` ("1. divergent recompile"), ``cost_ns``, ``text`` (its cost and whether it was measured or
    estimated), ``severity`` and ``message``: what the root-cause bars of the report and the app show."""
    schema = {"label": pl.String, "cost_ns": pl.Int64, "text": pl.String, "severity": pl.String, "message": pl.String}
    if findings is None or findings.is_empty():
        return pl.DataFrame(schema=schema)
    f = findings.sort("cost_ns", descending=True, nulls_last=True, maintain_order=True).head(top)
    basis = f["cost_basis"].to_list() if "cost_basis" in f.columns else [None] * f.height
    costs = f["cost_ns"].fill_null(0).to_list()
    return pl.DataFrame({
        "label": [f"{i + 1}. {str(k).replace('_', ' ')}" for i, k in enumerate(f["kind"].to_list())],
        "cost_ns": costs,
        "text": [duration(c) + (f" {b}" if b else "") for c, b in zip(costs, basis)],
        "severity": f["severity"].to_list(),
        "message": f["message"].fill_null("").to_list(),
    }, schema=schema)


#: The role of a root finding that costs no time (:func:`~workbench.analyses.findings.costs_no_time`).
NOTE_ROLE = "note, costing no time"


def findings_table(findings: pl.DataFrame) -> pl.DataFrame:
    """Every finding (``FINDINGS`` rows) as a table tells it, the one view of the Overview's grid and the report's:
    the root causes that cost time numbered most costly first (``n`` "1", as the Overview's cards), each followed
    by its symptoms ("1.1", …) at their time within the root's cost
    (:func:`~workbench.analyses.findings.symptom_cost_ns`), then the findings that cost no time as notes
    (unnumbered, ``role`` :data:`NOTE_ROLE`; :func:`~workbench.analyses.findings.costs_no_time`). Columns: ``n``,
    ``kind`` (its title), ``role`` ("root cause" / "symptom of <its cause>" / the note's), ``severity``,
    ``cost_ns`` (raw, null when unknown), ``cost_basis``, ``ranks``, ``steps`` (text) and ``message``."""
    f = findings
    kinds = dict(zip(f["id"].to_list(), f["kind"].to_list()))
    table = f.select(
        pl.lit("").alias("n"),
        pl.col("kind").map_elements(kind_title, return_dtype=pl.String).alias("kind"),
        pl.when(pl.col("is_root")).then(pl.lit("root cause")).otherwise(
            pl.concat_str([pl.lit("symptom of "), pl.col("cause_id").replace_strict(
                kinds, default=pl.col("cause_id")).map_elements(kind_title, return_dtype=pl.String)])
        ).alias("role"),
        pl.col("severity"),
        pl.col("cost_ns"),
        pl.col("cost_basis").fill_null("–"),
        pl.col("ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("ranks"),
        pl.col("steps").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("steps"),
        pl.col("message"),
    )
    rows = [(t, x["id"], x["cause_id"]) for t, x in zip(table.iter_rows(named=True),
                                                        f.select("id", "cause_id").iter_rows(named=True))]
    roots = [(t, i) for t, i, c in rows if c is None]
    costly = [(t, i) for t, i in roots if not costs_no_time(t["cost_ns"], t["severity"])]
    number = {i: str(k) for k, (_, i) in enumerate(costly, 1)}
    out: list[dict[str, Any]] = []
    for root, rid in [*costly, *((t, i) for t, i in roots if i not in number)]:
        n = number.get(rid)
        out.append({**root, "n": n or "", "role": "root cause" if n else NOTE_ROLE})
        for j, (s, _, _) in enumerate((r for r in rows if r[2] == rid), 1):
            out.append({**s, "n": f"{n}.{j}" if n else "", "cost_ns": symptom_cost_ns(s["cost_ns"], root["cost_ns"])})
    return pl.DataFrame(out, schema=table.schema) if out else table


def _num(v: Any, nd: int = 2) -> Any:
    if v is None:
        return None
    if isinstance(v, float):
        return round(v, nd)
    return v


def summarize_tables(tables: AnalysisTables, rank_ids: list[int], window: str) -> dict[str, Any]:
    """The JSON-ready summary of :func:`analysis_tables` output (what :func:`analyze` returns)."""
    by_rank = {r["rank"]: r for r in tables.breakdown_by_rank.iter_rows(named=True)}
    wait = {r["rank"]: r for r in tables.collective_wait.iter_rows(named=True)}
    st = tables.step_table
    steps = {r["rank"]: r for r in metrics.summarize_step_table(st).iter_rows(named=True)}
    compiles = {r["rank"]: r for r in tables.compiles_by_rank.iter_rows(named=True)}
    kct = tables.kernel_class_time
    ranks: dict[str, dict[str, Any]] = {}
    for rank in sorted(set(rank_ids) | set(by_rank) | set(st["rank"].to_list())):
        b = by_rank.get(rank, {})
        entry: dict[str, Any] = {
            "compute_pct": _num(b.get("compute_pct")),
            "idle_pct": _num(b.get("idle_pct")),
            "comm_compute_overlap_pct": _num(b.get("comm_overlap_pct")),
            "exposed_comm_pct": _num(b.get("comm_exposed_pct")),
            "comm_overlap_of_max_pct": _num(b.get("comm_overlap_of_max_pct")),
            "exposed_memory_pct": _num(b.get("memory_exposed_pct")),
            "window_ns": b.get("window_ns"),
            "busy_ns": b.get("busy_ns"),
            "compute_ns": b.get("compute_ns"),
            "comm_ns": b.get("comm_ns"),
            "comm_exposed_ns": b.get("comm_exposed_ns"),
            "idle_ns": b.get("idle_ns"),
            "steps_analysed": b.get("steps"),
        }
        s = steps.get(rank, {})   # metrics.step_summary: the one step-time definition
        entry["step_source"] = s.get("source")
        entry["steps"] = s.get("steps", 0)
        entry["step_time_ns"] = s.get("median_ns")
        entry["max_step_time_ns"] = s.get("max_ns")
        entry["data_wait_median_ns"] = s.get("data_wait_median_ns")
        comp = compiles.get(rank)
        entry["compiles"] = int(comp["compiles"]) if comp else 0
        entry["recompiles"] = int(comp["recompiles"]) if comp else 0
        entry["compile_time_ns"] = comp["compile_time_ns"] if comp else 0
        w = wait.get(rank)
        entry["collective_wait_ns"] = w["wait_ns"] if w else None
        entry["collectives_last_pct"] = _num(w["last_pct"]) if w else None
        if not kct.is_empty():
            entry["kernel_time_ns"] = {r["kernel_class"]: r["total_ns"] for r in kct.filter(pl.col("rank") == rank).iter_rows(named=True)}
        ranks[str(rank)] = entry
    inst = tables.collective_instances
    coll = {}
    if not inst.is_empty():
        real = inst.filter(~pl.col("p2p") & (pl.col("ranks_seen") > 1))
        coll = {
            "instances": inst.height,
            "mismatched": int((~inst["consistent"] & ~inst["p2p"]).sum()),  # a send meets a recv: not a mismatch
            "incomplete": int((~inst["complete"]).sum()),
            "median_skew_ns": int(real["skew_ns"].median()) if real.height else None,
            "max_skew_ns": int(real["skew_ns"].max()) if real.height else None,
            "median_busbw_gbps": _num(real["busbw_gbps"].median()) if real.height else None,
        }
    return {
        "window": window,
        "ranks": ranks,
        "collectives": coll,
        "findings": findings_to_dicts(tables.roots),
    }


def analyze(run: Any, window: Window = "steady", kernel_wait_ns: int = KERNEL_WAIT_NS, *,
            timeout_s: float | None = None) -> dict[str, Any]:
    """Summary of every analysis on ``run``'s tables as a JSON-ready dict.

    Keys: ``window``; ``ranks`` (``"<rank>"`` → ``compute_pct``, ``idle_pct``, ``comm_compute_overlap_pct``
    (HTA's overlapped / communication time), ``exposed_comm_pct``, ``comm_overlap_of_max_pct``,
    ``exposed_memory_pct``, the ``*_ns`` totals, ``step_time_ns`` (median; collector steps when there are any, else
    profiler steps), ``collective_wait_ns``, ``collectives_last_pct``, ``kernel_time_ns`` per class);
    ``collectives`` (instances, mismatched, incomplete, skew, bus bandwidth); ``findings`` (FINDINGS rows as dicts,
    most costly first).
    """
    tables = analysis_tables(run, window, kernel_wait_ns, timeout_s=timeout_s)
    ranks = _table(run, "ranks", RANKS)
    rank_ids = ranks["rank"].to_list() if not ranks.is_empty() else []
    return summarize_tables(tables, rank_ids, window)
