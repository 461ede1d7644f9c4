"""``analyze(run)``: every analysis on a run's tables, and the summary the CLI, app and reports use.

:func:`analysis_tables` returns the frames (for the UI and notebooks); :func:`analyze` condenses them into a
JSON-ready dict: per rank ``compute_pct``, ``idle_pct``, ``comm_compute_overlap_pct``, ``exposed_comm_pct`` (percent
of the analysed window; null where the rank has no device activity, or no communication for the overlap), step
times, collective waits, kernel class times, and the ranked findings.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.analyses.breakdown import (
    KERNEL_WAIT_NS, breakdown_by_rank, breakdown_findings, idle_causes, idle_gaps, main_streams, time_breakdown,
)
from workbench.analyses.bubbles import bubble_findings, pipeline_bubbles, step_idle
from workbench.analyses.collectives import (
    clock_offsets, collective_drift, collective_findings, collective_instances, collective_wait_by_rank,
    match_collectives, spans_hosts,
)
from workbench.analyses.findings import findings_to_dicts, rank_findings
from workbench.analyses.kernels import kernel_class_time, launch_stats, top_kernels
from workbench.analyses.overlap import comm_compute_overlap
from workbench.analyses.stragglers import step_times, straggler_findings, straggler_ranks
from workbench.analyses.window import Window, window_kernels
from workbench.analyses.recompiles import recompile_findings
from workbench.schema import COLLECTIVES, COMPILES, EVENTS, FINGERPRINTS, KERNELS, RANKS, STEPS, empty


def _table(run: Any, name: str, schema: dict) -> pl.DataFrame:
    frame = getattr(run, name, None)
    return frame if isinstance(frame, pl.DataFrame) else empty(schema)


def _recompile_findings(run: Any, timeout_s: float | None) -> pl.DataFrame:
    """Findings of the recompile analysis, with steps, collectives and fingerprints so waits are measured."""
    return recompile_findings(
        _table(run, "compiles", COMPILES),
        steps=_table(run, "steps", STEPS),
        collectives=_table(run, "collectives", COLLECTIVES),
        fingerprints=_table(run, "fingerprints", FINGERPRINTS),
        timeout_s=timeout_s,
    )


def analysis_tables(run: Any, window: Window = "steady", kernel_wait_ns: int = KERNEL_WAIT_NS, *,
                    timeout_s: float | None = None) -> dict[str, pl.DataFrame]:
    """Every analysis frame for ``run`` (anything with ``kernels``, ``steps``, ``collectives``, ``events``,
    ``ranks`` polars attributes, e.g. :class:`workbench.Run`).

    Keys: ``breakdown`` (per rank and step), ``breakdown_by_rank``, ``overlap`` (per rank and step),
    ``idle_gaps``, ``idle_by_stream``, ``idle_by_step``, ``step_idle`` (GPU idle fraction per rank and step),
    ``bubbles``, ``collectives`` (matched, per rank and
    instance), ``collective_instances``, ``collective_wait``, ``clock_offsets``, ``collective_drift``,
    ``step_times``, ``stragglers``, ``top_kernels``, ``launch_stats``, ``kernel_class_time``, ``findings``.
    """
    kernels = _table(run, "kernels", KERNELS)
    steps = _table(run, "steps", STEPS)
    colls = _table(run, "collectives", COLLECTIVES)
    events = _table(run, "events", EVENTS)
    ranks = _table(run, "ranks", RANKS)

    out: dict[str, pl.DataFrame] = {}
    bd = time_breakdown(kernels, steps, window)
    out["breakdown"] = bd
    out["breakdown_by_rank"] = breakdown_by_rank(bd)
    out["overlap"] = comm_compute_overlap(bd)
    gaps = idle_gaps(kernels, steps, window, kernel_wait_ns)
    out["idle_gaps"] = gaps
    out["idle_by_stream"] = idle_causes(gaps, ("rank", "stream"))
    out["idle_by_step"] = idle_causes(gaps, ("rank", "step", "stream"))
    out["step_idle"] = step_idle(bd)
    out["bubbles"] = pipeline_bubbles(events, steps, window)
    matched = match_collectives(colls, ranks) if not colls.is_empty() else pl.DataFrame()
    out["collectives"] = matched
    out["collective_instances"] = collective_instances(matched)
    out["collective_wait"] = collective_wait_by_rank(matched)
    out["clock_offsets"] = clock_offsets(colls, ranks)
    out["collective_drift"] = collective_drift(matched)
    out["step_times"] = step_times(steps) if not steps.is_empty() else pl.DataFrame()
    bub = out["bubbles"]
    pipeline = not bub.is_empty() and bool((bub.group_by("rank").agg(pl.col("forwards").median())["forwards"] >= 2).any())
    out["stragglers"] = straggler_ranks(steps, matched, use_step_starts=not pipeline)
    kw = window_kernels(kernels, steps, window)
    out["top_kernels"] = top_kernels(kw)
    out["launch_stats"] = launch_stats(kw)
    out["kernel_class_time"] = kernel_class_time(kw)
    out["compiles_by_rank"] = compiles_by_rank(_table(run, "compiles", COMPILES))

    main = main_streams(kw)
    main_causes = out["idle_by_stream"].join(main, on=["rank", "stream"], how="semi") if not main.is_empty() else None
    out["findings"] = rank_findings([
        breakdown_findings(out["breakdown_by_rank"], main_causes, out["launch_stats"]),
        collective_findings(out["collective_instances"], out["clock_offsets"], out["collective_drift"],
                            aligned=spans_hosts(ranks)),
        straggler_findings(out["stragglers"]),
        bubble_findings(out["bubbles"]),
        _recompile_findings(run, timeout_s),
    ])
    return out


def compiles_by_rank(compiles: pl.DataFrame) -> pl.DataFrame:
    """Per rank: ``compiles`` (frame compiles), ``recompiles`` (compiles after a frame's first) and
    ``compile_time_ns`` (their total duration)."""
    if compiles.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "compiles": pl.UInt32, "recompiles": pl.UInt32,
                                    "compile_time_ns": pl.Int64})
    return compiles.group_by("rank").agg(
        compiles=pl.len(),
        recompiles=(pl.col("frame_compile_id") > 0).sum(),
        compile_time_ns=pl.col("duration_ns").sum(),
    ).sort("rank")


def _num(v: Any, nd: int = 2) -> Any:
    if v is None:
        return None
    if isinstance(v, float):
        return round(v, nd)
    return v


def summarize_tables(tables: dict[str, pl.DataFrame], rank_ids: list[int], window: str) -> dict[str, Any]:
    """The JSON-ready summary of :func:`analysis_tables` output (what :func:`analyze` returns)."""
    by_rank = {r["rank"]: r for r in tables["breakdown_by_rank"].iter_rows(named=True)}
    wait = {r["rank"]: r for r in tables["collective_wait"].iter_rows(named=True)} if not tables["collective_wait"].is_empty() else {}
    st = tables["step_times"]
    compiles = {r["rank"]: r for r in tables["compiles_by_rank"].iter_rows(named=True)}
    kct = tables["kernel_class_time"]
    ranks: dict[str, dict[str, Any]] = {}
    for rank in sorted(set(rank_ids) | set(by_rank)):
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
        if not st.is_empty():
            mine = st.filter(pl.col("rank") == rank)
            for source in ("collector", "profiler"):
                s = mine.filter(pl.col("source") == source)
                entry[f"{source}_steps"] = s.height
                entry[f"{source}_step_time_ns"] = int(s["dur"].median()) if s.height else None
            entry["step_time_ns"] = entry.get("collector_step_time_ns") or entry.get("profiler_step_time_ns")
            src = mine.filter(pl.col("source") == ("collector" if entry.get("collector_steps") else "profiler"))
            after_first = src.filter(pl.col("step") > src["step"].min()) if src.height > 1 else src
            entry["max_step_time_ns"] = int(after_first["dur"].max()) if after_first.height else None
        comp = compiles.get(rank)
        entry["recompiles"] = int(comp["recompiles"]) if comp else 0
        entry["compile_time_ns"] = int(comp["compile_time_ns"] or 0) if comp else 0
        w = wait.get(rank)
        entry["collective_wait_ns"] = w["wait_ns"] if w else None
        entry["collectives_last_pct"] = _num(w["last_pct"]) if w else None
        if not kct.is_empty():
            entry["kernel_time_ns"] = {r["kernel_class"]: r["total_ns"] for r in kct.filter(pl.col("rank") == rank).iter_rows(named=True)}
        ranks[str(rank)] = entry
    inst = tables["collective_instances"]
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
        "findings": findings_to_dicts(tables["findings"]),
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
