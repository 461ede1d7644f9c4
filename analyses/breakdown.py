"""Time breakdown of the device timeline per rank and per step, and idle time causes per stream.

Definitions (all times int64 ns, all on the device timeline of one rank; idle and the exposed times as
:mod:`workbench.analyses.metrics` defines them):

* window: from the first device activity start to the last device activity end in the analysed window
  (:mod:`workbench.analyses.window`). HTA calls this "kernel time".
* per step: the window is cut into consecutive segments, one per step, each from the first start of the activity
  launched in that step to the first start of the next step's activity (the last one to the window's end). The
  per-step rows therefore add up exactly to the per-rank totals.
* busy: time covered by at least one kernel, memcpy or memset (the union; ``sync`` rows are waits, not work).
* compute / communication / memcpy / memset: time covered by at least one activity of that ``kernel_class``.
* overlapped communication: communication time during which some compute runs (communication ∩ compute);
  exposed communication: the rest.
* exposed memory: memcpy/memset time with neither compute nor communication running.
* idle: window - busy. ``compute + exposed communication + exposed memory + idle = window``.
* HTA's ``non_compute`` = busy - compute = exposed communication + exposed memory.

Idle causes per stream follow HTA's ``get_idle_time_breakdown``: on each stream, the gap before each kernel is
*host wait* when that kernel's launch started after the previous kernel on the stream ended (the CPU was late),
*kernel wait* when the gap is shorter than ``kernel_wait_ns`` (back-to-back launch overhead), else *other*.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, format_ns, make_finding
from workbench.analyses.intervals import class_coverage, mask_has, previous_end
from workbench.analyses.metrics import COMM_EXPOSED_NS, IDLE_NS, MEMORY_EXPOSED_NS
from workbench.analyses.kinds import (
    EXPOSED_COMM_PCT, EXPOSED_MEMCPY_PCT, IDLE_HOST_PCT, IDLE_PCT, ExposedCommEvidence, ExposedMemcpyEvidence,
    IdleEvidence, Kind,
)
from workbench.analyses.window import Window, window_kernels

#: HTA's default ``consecutive_kernel_delay`` is 30 in trace units, which are microseconds.
KERNEL_WAIT_NS = 30_000

IDLE_CATEGORIES: tuple[str, ...] = ("host_wait", "kernel_wait", "other")
#: The most of a late-launched kernel's launch-to-start time still put on the host (``idle_gaps``' ``host_ns``):
#: a launch normally reaches an idle stream within a few to tens of µs.
LAUNCH_LATENCY_CAP_NS = 100_000

_NS_COLUMNS = (
    "window_ns", "busy_ns", "idle_ns", "compute_ns", "comm_ns", "comm_overlapped_ns", "comm_exposed_ns",
    "memcpy_ns", "memset_ns", "memory_ns", "memory_exposed_ns", "non_compute_ns",
)


def step_segments(kernels: pl.DataFrame) -> pl.DataFrame:
    """The device timeline of each rank cut into one segment per step.

    Columns: ``rank``, ``step`` (the launch step; null for activity launched outside every step), ``start``
    (first start of that step's activity), ``end`` (next segment's start when that is the next step, else this
    step's last activity end: segments never span the gap between two profiler windows; the rank's last segment
    ends at its last activity end),
    ``activities`` (device rows launched in that step).
    """
    if kernels.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64,
                                    "activities": pl.UInt32})
    per_step = kernels.group_by("rank", "step").agg(
        start=pl.col("start").min(), _last=pl.col("end").max(), activities=pl.len()
    )
    return (
        per_step.sort("rank", "start")
        .with_columns(
            _next_start=pl.col("start").shift(-1).over("rank"),
            _next_step=pl.col("step").shift(-1).over("rank"),
        )
        .with_columns(  # up to the next step's start, but never across a gap between profiler windows
            end=pl.when(pl.col("_next_step") == pl.col("step") + 1).then(pl.col("_next_start"))
            .when(pl.col("_next_start").is_null()).then(pl.col("_last").max().over("rank"))
            .otherwise(pl.min_horizontal("_next_start", pl.max_horizontal("_last", "start"))),
        )
        .with_columns(end=pl.max_horizontal("start", "end"))
        .select("rank", "step", "start", "end", "activities")
    )


def with_percentages(frame: pl.DataFrame) -> pl.DataFrame:
    """Add the percentage columns to a frame holding the ``*_ns`` columns of :func:`time_breakdown`.

    ``compute_pct``, ``comm_exposed_pct``, ``memory_exposed_pct``, ``idle_pct``, ``non_compute_pct``: percent of
    ``window_ns``. ``comm_overlap_pct``: overlapped / communication time (HTA's measure; null without
    communication). ``comm_overlap_of_max_pct``: overlapped / max(communication, compute).
    """
    w = pl.col("window_ns").cast(pl.Float64)

    def pct(num: pl.Expr, den: pl.Expr) -> pl.Expr:
        return pl.when(den > 0).then(100.0 * num.cast(pl.Float64) / den.cast(pl.Float64)).otherwise(None)

    return frame.with_columns(
        compute_pct=pct(pl.col("compute_ns"), w),
        comm_exposed_pct=pct(pl.col("comm_exposed_ns"), w),
        memory_exposed_pct=pct(pl.col("memory_exposed_ns"), w),
        idle_pct=pct(pl.col("idle_ns"), w),
        non_compute_pct=pct(pl.col("non_compute_ns"), w),
        comm_overlap_pct=pct(pl.col("comm_overlapped_ns"), pl.col("comm_ns")),
        comm_overlap_of_max_pct=pct(pl.col("comm_overlapped_ns"), pl.max_horizontal("comm_ns", "compute_ns")),
    )


def time_breakdown(kernels: pl.DataFrame, steps: pl.DataFrame, window: Window = "steady") -> pl.DataFrame:
    """Device time breakdown per rank and per step (see the module docstring for the definitions).

    Columns: ``rank``, ``step``, ``start``, ``end`` (the step's device segment), ``activities``, then in ns:
    ``window_ns`` (segment length), ``busy_ns``, ``idle_ns``, ``compute_ns``, ``comm_ns``, ``comm_overlapped_ns``,
    ``comm_exposed_ns``, ``memcpy_ns``, ``memset_ns``, ``memory_ns`` (memcpy ∪ memset), ``memory_exposed_ns``,
    ``non_compute_ns``, then the percentages of :func:`with_percentages`.
    """
    kw = window_kernels(kernels.select("rank", "step", "start", "end", "kernel_class"), steps, window)
    kw = kw.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
    seg = step_segments(kw)
    if seg.is_empty():
        return with_percentages(seg.with_columns([pl.lit(0, pl.Int64).alias(c) for c in _NS_COLUMNS]))
    # one sweep over every boundary: per segment, the time each combination of classes runs (intervals.py)
    classes = ("compute", "communication", "memcpy", "memset")
    cover = class_coverage(kw, seg, classes)

    def covered(*names: str, every: bool = False) -> pl.Expr:
        return pl.col("ns").filter(mask_has(classes, *names, every=every)).sum()

    sums = cover.group_by("rank", "start").agg(
        busy_ns=covered(*classes),
        compute_ns=covered("compute"),
        comm_ns=covered("communication"),
        _cc_ns=covered("compute", "communication"),
        memcpy_ns=covered("memcpy"),
        memset_ns=covered("memset"),
        memory_ns=covered("memcpy", "memset"),
        comm_overlapped_ns=covered("compute", "communication", every=True),
    )
    zero = ["busy_ns", "compute_ns", "comm_ns", "_cc_ns", "memcpy_ns", "memset_ns", "memory_ns", "comm_overlapped_ns"]
    out = (
        seg.lazy().join(sums, on=["rank", "start"], how="left")
        .with_columns([pl.col(z).fill_null(0).cast(pl.Int64) for z in zero])
        .with_columns(window_ns=pl.col("end") - pl.col("start"))
        .with_columns(IDLE_NS, MEMORY_EXPOSED_NS, COMM_EXPOSED_NS,   # metrics.py: the definitions
                      non_compute_ns=pl.col("busy_ns") - pl.col("compute_ns"))
        .select("rank", "step", "start", "end", "activities", *_NS_COLUMNS)
        .sort("rank", "start")
        .collect()
    )
    return with_percentages(out)


def breakdown_by_rank(step_breakdown: pl.DataFrame) -> pl.DataFrame:
    """Per-rank totals of :func:`time_breakdown` rows (sums of the ``*_ns`` columns, percentages recomputed).

    Columns: ``rank``, ``steps`` (segments summed), ``start``, ``end``, ``activities``, the ``*_ns`` columns and
    the percentages of :func:`with_percentages`.
    """
    out = step_breakdown.group_by("rank").agg(
        steps=pl.col("step").count(),
        start=pl.col("start").min(),
        end=pl.col("end").max(),
        activities=pl.col("activities").sum(),
        *[pl.col(c).sum() for c in _NS_COLUMNS],
    )
    return with_percentages(out.sort("rank"))


def idle_gaps(
    kernels: pl.DataFrame, steps: pl.DataFrame, window: Window = "steady", kernel_wait_ns: int = KERNEL_WAIT_NS
) -> pl.DataFrame:
    """Every idle gap on every stream, with its cause.

    Columns: ``rank``, ``stream``, ``step`` (the launch step of the kernel after the gap), ``start`` (end of the
    previous activity on the stream), ``end`` (start of the next one), ``gap_ns``, ``category`` (``host_wait``:
    the next kernel's launch began after ``start``; ``kernel_wait``: gap < ``kernel_wait_ns``; ``other``),
    ``launch_late_ns`` (launch start - ``start``, how late the CPU queued the kernel; null if not host wait),
    ``host_ns`` (the part of a host-wait gap the host is to blame for, see below; 0 for the other categories),
    ``name`` (the kernel after the gap).

    ``category`` follows HTA (the whole gap is host wait when the launch began after the stream went idle). But a
    kernel launched late may still have waited on the device after its launch: on another stream (an event, a
    collective it depends on) or behind other work. So ``host_ns`` keeps only the host's part: the gap up to the
    launch call's return plus the rank's usual launch-to-start latency (its median over host-wait gaps, at most
    ``LAUNCH_LATENCY_CAP_NS``); the rest of the gap is a device-side dependency, not the host. Without a launch end
    the whole gap counts. Rows are sorted by ``start``. Only gaps > 0 between two activities of one stream are listed, as HTA
    does (no gap before a stream's first activity or after its last).
    """
    cols = ["rank", "stream", "step", "start", "end", "launch_start", "launch_end", "name"]
    if "launch_end" not in kernels.columns:
        kernels = kernels.with_columns(launch_end=pl.lit(None, pl.Int64))
    kw = window_kernels(kernels.select(cols), steps, window).filter(pl.col("start").is_not_null())
    prev_end = previous_end(("rank", "stream"))
    host_gap = pl.col("category") == "host_wait"
    queued = pl.col("start") - pl.col("launch_end")  # launch call returned -> kernel started
    latency = pl.min_horizontal(queued.filter(host_gap).median().over("rank").clip(lower_bound=0),
                                pl.lit(LAUNCH_LATENCY_CAP_NS))
    g = (
        kw.lazy()
        .select(*cols)
        .sort("start")  # one key; the window expression below keeps that order inside each (rank, stream)
        .with_columns(_prev=prev_end)
        .filter(pl.col("_prev").is_not_null() & (pl.col("start") > pl.col("_prev")))
        .with_columns(gap_ns=pl.col("start") - pl.col("_prev"))
        .with_columns(
            category=pl.when(pl.col("launch_start") > pl.col("_prev"))
            .then(pl.lit("host_wait"))
            .when(pl.col("gap_ns") < kernel_wait_ns)
            .then(pl.lit("kernel_wait"))
            .otherwise(pl.lit("other"))
        )
        .with_columns(
            launch_late_ns=pl.when(host_gap).then(pl.col("launch_start") - pl.col("_prev")),
            host_ns=pl.when(host_gap & pl.col("launch_end").is_not_null())
            .then(pl.min_horizontal(pl.col("gap_ns"), pl.col("launch_end") - pl.col("_prev") + latency.fill_null(0)))
            .when(host_gap).then(pl.col("gap_ns")).otherwise(0).cast(pl.Int64),
        )
        .select("rank", "stream", "step", pl.col("_prev").alias("start"), pl.col("start").alias("end"), "gap_ns",
                "category", "launch_late_ns", "host_ns", "name")
        .collect()
    )
    return g


def idle_causes(gaps: pl.DataFrame, by: tuple[str, ...] = ("rank", "stream")) -> pl.DataFrame:
    """Idle time per cause, one row per ``by`` group (default: per rank and stream; add ``"step"`` per step).

    Columns: ``by...``, ``host_wait_ns``, ``kernel_wait_ns``, ``other_ns``, ``idle_ns`` (their sum), ``gaps``
    (number of gaps), ``host_wait_pct`` / ``kernel_wait_pct`` / ``other_pct`` (share of ``idle_ns``), ``host_ns``
    (the host's part of the host-wait gaps, :func:`idle_gaps`) and ``host_pct`` (its share of ``idle_ns``).
    """
    by = list(by)
    aggs = [pl.col("gap_ns").filter(pl.col("category") == c).sum().alias(f"{c}_ns") for c in IDLE_CATEGORIES]
    if "host_ns" not in gaps.columns:
        gaps = gaps.with_columns(host_ns=pl.when(pl.col("category") == "host_wait").then(pl.col("gap_ns"))
                                 .otherwise(0).cast(pl.Int64))
    aggs.append(pl.col("host_ns").sum())
    out = gaps.group_by(by).agg(*aggs, gaps=pl.len()).with_columns(
        idle_ns=sum(pl.col(f"{c}_ns") for c in IDLE_CATEGORIES)
    )
    return out.with_columns(
        [
            pl.when(pl.col("idle_ns") > 0).then(100.0 * pl.col(f"{c}_ns") / pl.col("idle_ns")).alias(f"{c}_pct")
            for c in (*IDLE_CATEGORIES, "host")
        ]
    ).sort(by)


def idle_breakdown_long(gaps: pl.DataFrame) -> pl.DataFrame:
    """HTA's ``get_idle_time_breakdown`` shape: one row per rank, stream and idle category.

    Columns: ``rank``, ``stream``, ``idle_category``, ``idle_ns`` (sum of the gaps), ``idle_ratio`` (share of
    the stream's idle time, null when the stream never idles), ``count``, ``mean_ns``, ``p50_ns``, ``max_ns``.
    """
    streams = gaps.select("rank", "stream").unique()
    cats = pl.DataFrame({"idle_category": list(IDLE_CATEGORIES)})
    stats = gaps.group_by("rank", "stream", pl.col("category").alias("idle_category")).agg(
        idle_ns=pl.col("gap_ns").sum(), count=pl.len(), mean_ns=pl.col("gap_ns").mean(),
        p50_ns=pl.col("gap_ns").median(), max_ns=pl.col("gap_ns").max(),
    )
    out = (
        streams.join(cats, how="cross")
        .join(stats, on=["rank", "stream", "idle_category"], how="left")
        .with_columns(idle_ns=pl.col("idle_ns").fill_null(0), count=pl.col("count").fill_null(0))
    )
    total = pl.col("idle_ns").sum().over("rank", "stream")
    return out.with_columns(idle_ratio=pl.when(total > 0).then(pl.col("idle_ns") / total)).sort(
        "rank", "stream", "idle_category"
    )


def main_streams(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the stream with the most compute time. Columns: ``rank``, ``stream``."""
    return (
        kernels.filter(pl.col("kernel_class").cast(pl.String) == "compute")
        .group_by("rank", "stream").agg(t=pl.col("dur").sum())
        .sort("t", descending=True).group_by("rank").first().select("rank", "stream").sort("rank")
    )


def breakdown_findings(
    by_rank: pl.DataFrame, main_stream_causes: pl.DataFrame | None = None, launch: pl.DataFrame | None = None,
    *, profiler_inflated: bool = False, steps_by_rank: dict[int, list[int]] | None = None,
    gaps: pl.DataFrame | None = None, segments: pl.DataFrame | None = None,
    launch_ns: dict[int, int] | None = None, claimed_ns: dict[int, int] | None = None,
) -> list[Finding[Any]]:
    """Findings (:class:`workbench.analyses.findings.Finding`) from the per-rank breakdown, one per rank.

    * ``exposed_communication``: communication not hidden under compute ≥ 5 % of the window on the rank
      (cost: its exposed time);
    * ``host_bound`` / ``launch_bound``: the GPU idles ≥ 20 % of the window, on the rank's main compute stream
      most idle time is host wait (``launch_bound`` when most compute kernels are also short), and the *launch
      gaps* reach 20 % of the window; cost: the launch gaps, what replaying each step as a CUDA graph saves.
      A launch gap is a host-wait gap on the main stream between two kernels of one step; the gap before a
      step's first activity (``segments``' starts) is the host's time between steps (the loop, data, a
      synchronisation), which no graph removes, and is not one. Without ``gaps``/``segments`` the cost is the
      idle time;
    * ``gpu_idle``: idle ≥ 30 % without a host-wait majority, or host wait mostly between steps;
    * ``exposed_memcpy``: memcpy/memset running alone ≥ 5 % of the window.

    ``main_stream_causes``: :func:`idle_causes` rows of each rank's main stream; ``launch``:
    :func:`workbench.analyses.kernels.launch_stats` rows; ``profiler_inflated``: the trace was recorded with
    with_stack/record_shapes (host time in the window is inflated; the messages say so); ``steps_by_rank``: the
    analysed steps of each rank (the findings' ``steps``: their cost covers those steps); ``gaps``:
    :func:`idle_gaps` rows (the host-wait ones of the main streams are read); ``segments``: :func:`time_breakdown`
    rows (``rank``, ``start``: where each step's activity begins). ``launch_ns``: per rank, the idle the GPU idle
    attribution (:mod:`workbench.analyses.idle_causes`) gives to launches inside a compiled region: where given, it
    is the launch gaps (syncs, an eager optimizer, data loading are their own findings, not launch overhead);
    ``claimed_ns``: per rank, idle time those findings already cost (left out of ``gpu_idle``).
    """
    out: list[Finding[Any]] = []
    if by_rank is None or by_rank.is_empty():
        return out
    steps_of = steps_by_rank or {}
    bd = by_rank.filter(pl.col("window_ns") > 0)
    for r in bd.filter(pl.col("comm_exposed_pct") >= EXPOSED_COMM_PCT).iter_rows(named=True):
        ev = ExposedCommEvidence(per_rank=({k: r[k] for k in ("rank", "comm_ns", "comm_exposed_ns", "comm_exposed_pct",
                                                               "comm_overlap_pct", "window_ns")},))
        out.append(make_finding(
            Kind.EXPOSED_COMMUNICATION,
            f"Communication not overlapped with compute takes {r['comm_exposed_pct']:.1f}% of the device time "
            f"on rank {r['rank']} (overlap {r['comm_overlap_pct'] or 0:.0f}% of communication time).",
            ev, Cost.measured(r["comm_exposed_ns"], "exposed communication time in the analysed window"),
            ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
    idle = bd.filter(pl.col("idle_pct") >= IDLE_HOST_PCT)
    if not idle.is_empty():
        causes = main_stream_causes if main_stream_causes is not None else pl.DataFrame()
        if not causes.is_empty():
            # the host's part of the host-wait gaps (idle_gaps' host_ns), not the whole gaps: a late launch that then
            # waits on another stream (a collective, an event) is a device-side dependency, not the host
            idle = idle.join(causes.select("rank", "stream", "host_ns", pl.col("host_pct").alias("host_wait_pct"),
                                           "kernel_wait_pct", "other_pct"), on="rank", how="left")
        else:
            idle = idle.with_columns(host_wait_pct=pl.lit(None, pl.Float64), stream=pl.lit(None, pl.Int64))
        short_pct = None
        if launch is not None and not launch.is_empty():
            lc = launch.filter(pl.col("kernel_class").cast(pl.String) == "compute")
            if not lc.is_empty():
                short_pct = float(100.0 * lc["short"].sum() / max(lc["count"].sum(), 1))
        note = (" The trace was recorded with with_stack/record_shapes, which slow every host-side op: part of this "
                "host wait is the profiler's own cost; measure without them before acting." if profiler_inflated
                else "")
        between: dict[int, int] | None = None  # per rank: host-wait gaps holding a step's start (between steps)
        if gaps is not None and segments is not None and "host_ns" in idle.columns:
            hw = gaps.filter(pl.col("category") == "host_wait").join(
                idle.select("rank", pl.col("stream").cast(gaps.schema["stream"])), on=["rank", "stream"], how="semi")
            starts = segments.select(pl.col("rank").cast(hw.schema["rank"]), pl.col("start").alias("_step_start"))
            held = hw.sort("start").join_asof(starts.sort("_step_start"), left_on="start", right_on="_step_start",
                                              by="rank", strategy="forward", allow_exact_matches=False,
                                              check_sortedness=False)
            held = held.filter(pl.col("_step_start") <= pl.col("end")).group_by("rank").agg(pl.col("host_ns").sum())
            between = {int(k): int(v) for k, v in held.iter_rows()}
        for r in idle.iter_rows(named=True):
            host = (r["host_wait_pct"] or 0) >= 50.0
            row = {k: r.get(k) for k in ("rank", "stream", "idle_ns", "idle_pct", "host_wait_pct", "window_ns")}
            claimed = (claimed_ns or {}).get(r["rank"], 0)
            # launch gaps inside a compiled region (the idle attribution): what graphs remove, the model's own nature
            attributed = (launch_ns is not None and r["rank"] in launch_ns
                          and 100.0 * launch_ns[r["rank"]] / r["window_ns"] >= IDLE_HOST_PCT)
            if host and between is not None:
                row["between_steps_wait_ns"] = between.get(r["rank"], 0)
                row["launch_gap_ns"] = max(0, int(r.get("host_ns") or 0) - row["between_steps_wait_ns"] - claimed)
            if host and attributed:
                row["launch_gap_ns"] = int(launch_ns[r["rank"]])
                row.setdefault("between_steps_wait_ns", 0)
            if host and "launch_gap_ns" in row:
                host = 100.0 * row["launch_gap_ns"] / r["window_ns"] >= IDLE_HOST_PCT
            if claimed:
                row["idle_ns"] = max(0, int(r["idle_ns"]) - claimed)
                row["idle_pct"] = 100.0 * row["idle_ns"] / r["window_ns"]
                row["explained_by_causes_ns"] = claimed
            cost = (Cost.measured(row["launch_gap_ns"], "launch gaps: host-wait gaps between the kernels of a step on "
                                                        "the main stream, in the analysed window")
                    if host and "launch_gap_ns" in row else Cost.measured(row["idle_ns"], "GPU idle time in the analysed "
                                                                            "window" + (", outside the host causes found"
                                                                                        if claimed else "")))
            if not host and row["idle_pct"] < IDLE_PCT:
                continue
            ev = IdleEvidence(per_rank=(row,), short_kernel_pct=short_pct, profiler_inflated=profiler_inflated)
            if not host and row.get("launch_gap_ns") is not None:
                out.append(make_finding(
                    Kind.GPU_IDLE,
                    f"The GPU idles {row['idle_pct']:.1f}% of the analysed window on rank {r['rank']}"
                    + (f" beyond the {format_ns(claimed)} the host causes above explain (waiting on its other streams: "
                       "communication, copies, or between steps)" if claimed else
                       f", mostly between steps: {format_ns(row['between_steps_wait_ns'])} before the steps' first "
                       "kernels (the training loop, data loading, a synchronisation, the profiler's own step), against "
                       f"{format_ns(row['launch_gap_ns'])} of launch gaps inside the steps") + f".{note}",
                    ev, cost, ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
                continue
            if host and attributed:
                launch_bound = short_pct is not None and short_pct >= 50.0
                steps_n = max(1, len(steps_of.get(r["rank"], ())) or 1)
                out.append(make_finding(
                    Kind.LAUNCH_BOUND if launch_bound else Kind.HOST_BOUND,
                    f"The compiled model's kernels are short{f' ({short_pct:.0f}% of compute kernels < 10 µs)' if short_pct is not None else ''}: "
                    f"on rank {r['rank']} the GPU waits for the host to launch them inside the compiled region "
                    f"{format_ns(row['launch_gap_ns'])} in the window (about {format_ns(row['launch_gap_ns'] // steps_n)} "
                    f"a step, {100.0 * row['launch_gap_ns'] / r['window_ns']:.0f}% of it). This is the model's own "
                    "launch-bound nature at this size, not a fault of the code around it: CUDA graphs "
                    f"(mode=\"reduce-overhead\") replay those launches at once.{note}",
                    ev, cost, ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
                continue
            if host:
                launch_bound = short_pct is not None and short_pct >= 50.0
                extra = (f" {short_pct:.0f}% of compute kernels run < 10 µs: launch overhead dominates."
                         if launch_bound else " The CPU does not queue work fast enough.")
                out.append(make_finding(
                    Kind.LAUNCH_BOUND if launch_bound else Kind.HOST_BOUND,
                    f"The GPU idles {r['idle_pct']:.1f}% of the time on rank {r['rank']}, "
                    f"{r['host_wait_pct']:.0f}% of it waiting for the host to launch kernels.{extra}{note}",
                    ev, cost, ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
            else:
                out.append(make_finding(
                    Kind.GPU_IDLE,
                    f"The GPU idles {r['idle_pct']:.1f}% of the analysed window on rank {r['rank']} "
                    "(not mainly waiting on kernel launches: synchronisation, data loading or waiting on peers).",
                    ev, cost, ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
    for r in bd.filter(pl.col("memory_exposed_pct") >= EXPOSED_MEMCPY_PCT).iter_rows(named=True):
        ev = ExposedMemcpyEvidence(per_rank=({k: r[k] for k in ("rank", "memcpy_ns", "memset_ns", "memory_exposed_ns",
                                                                 "memory_exposed_pct")},))
        out.append(make_finding(
            Kind.EXPOSED_MEMCPY,
            f"Memory copies/sets run with nothing else on the GPU for {r['memory_exposed_pct']:.1f}% of the "
            f"time on rank {r['rank']} (pinned memory and non_blocking copies on a side stream hide them).",
            ev, Cost.measured(r["memory_exposed_ns"], "exposed copy time in the analysed window"),
            ranks=[r["rank"]], steps=steps_of.get(r["rank"], ()), source="breakdown"))
    return out


@register_detector(Kind.EXPOSED_COMMUNICATION, Kind.HOST_BOUND, Kind.LAUNCH_BOUND, Kind.GPU_IDLE, Kind.EXPOSED_MEMCPY,
                   needs=("breakdown_by_rank", "main_causes", "launch_stats", "profiler_inflated", "steps_by_rank",
                          "idle_gaps", "breakdown", "idle_attribution"), order=10)
def _detect(x: Inputs) -> list[Finding[Any]]:
    """:func:`breakdown_findings` of the analysed window (launch gaps: the host-wait gaps inside steps)."""
    att = x.tables.get("idle_attribution")
    launch: dict[int, int] | None = None
    claimed: dict[int, int] = {}
    if att is not None and not att.is_empty():
        launch = {int(r): 0 for r in att["rank"].unique()}
        for r, ns in att.filter(pl.col("cause") == "launch").group_by("rank").agg(pl.col("ns").sum()).iter_rows():
            launch[int(r)] = int(ns)
        from workbench.analyses.idle_findings import claimed_ns, window_by_rank

        claimed = claimed_ns(att, window_by_rank(x.tables["breakdown_by_rank"]))
    return breakdown_findings(x.tables["breakdown_by_rank"], x.main_causes, x.tables["launch_stats"],
                              profiler_inflated=x.profiler_inflated, steps_by_rank=x.steps_by_rank,
                              gaps=x.tables["idle_gaps"], segments=x.tables["breakdown"], launch_ns=launch,
                              claimed_ns=claimed)
