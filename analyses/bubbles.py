"""Bubbles: GPU idle inside steady-state steps, pipeline bubbles from forward/backward ranges, and the delay
before the first forward of each step.

Forward and backward ranges are annotations (``record_function`` / NVTX ranges reaching Kineto: kinds
``annotation`` on the CPU and ``gpu_annotation`` on the device) whose names match ``forward_pattern`` /
``backward_pattern`` (the collector writes ``forward`` and ``backward``; pipeline schedules usually name them per
micro-batch, e.g. ``forward_mb3``). The device ranges are used when the rank has any, else the CPU ranges.

Per rank (pipeline stage) and step:

* ``work_ns``: time covered by forward or backward ranges (their union) inside the step, less the time inside
  them spent in point-to-point calls (``p2p_wait_ns``): the receive waits (``gloo:recv``, ``nccl:recv``,
  ``c10d::recv_``) and the send calls (``c10d::send``; not the asynchronous ``gloo:send`` range, which runs on
  under the compute), since ``torch.distributed.pipelining`` wraps both in its ``Forward i`` / ``Backward i``
  ranges. A send call can hold the thread for a large part of the step on a busy host;
* ``bubble_ns`` = step duration - ``work_ns``: time the stage spends on neither (waiting for activations or
  gradients from the neighbouring stage, optimizer, data loading);
* ``first_forward_delay_ns``: from the step start to the first forward range.

On a GPU timeline the step is the rank's device segment of that step (as in the breakdown) and ``work_ns`` is
the busy time of its compute kernels: NCCL receive kernels spin on the GPU while a stage waits for its neighbour,
so the ranges alone would count the wait as work.
"""

from __future__ import annotations

import polars as pl

from workbench.analyses.breakdown import step_segments
from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, make_finding
from workbench.analyses.intervals import covered_between, merge_intervals
from workbench.analyses.kinds import BUBBLE_PCT, Kind, PipelineBubbleEvidence
from workbench.analyses.window import Window, window_steps
from workbench.communication import is_p2p_call_range
from workbench.format import duration

FORWARD_PATTERN = r"(?i)(^|[^a-z])(forward|fwd)([^a-z]|$)"
BACKWARD_PATTERN = r"(?i)(^|[^a-z])(backward|bwd)([^a-z]|$)"


def step_idle(step_breakdown: pl.DataFrame) -> pl.DataFrame:
    """GPU idle fraction per rank and step, from :func:`workbench.analyses.breakdown.time_breakdown` rows.

    Columns: ``rank``, ``step``, ``window_ns``, ``idle_ns``, ``idle_pct``.
    """
    return step_breakdown.select("rank", "step", "window_ns", "idle_ns", "idle_pct")


def _step_by_segment(ann: pl.DataFrame, seg: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """``ann`` with each device range of ``ranks`` given the step whose device segment holds its start (null
    outside every segment). A device range has no launch of its own, so ingest labels it by host time; when the
    host runs ahead of the GPU that is the next step, and its first-forward delay came out negative."""
    segs = seg.filter(pl.col("rank").is_in(ranks)).select(
        pl.col("rank").cast(pl.Int32), pl.col("start").alias("_s"), pl.col("end").alias("_e"),
        pl.col("step").cast(pl.Int32).alias("_step")).sort("_s")
    out = ann.with_columns(pl.col("rank").cast(pl.Int32)).sort("start").join_asof(
        segs, left_on="start", right_on="_s", by="rank", strategy="backward", check_sortedness=False)
    on_gpu = (pl.col("timeline") == "gpu") & pl.col("rank").is_in(ranks)
    inside = pl.col("_step").is_not_null() & (pl.col("start") < pl.col("_e"))
    return out.with_columns(step=pl.when(~on_gpu).then(pl.col("step")).when(inside).then(pl.col("_step"))
                            .otherwise(None).cast(pl.Int32)).drop("_s", "_e", "_step")


def pipeline_bubbles(
    events: pl.DataFrame,
    steps: pl.DataFrame,
    window: Window = "steady",
    forward_pattern: str = FORWARD_PATTERN,
    backward_pattern: str = BACKWARD_PATTERN,
) -> pl.DataFrame:
    """Pipeline bubble per rank and step (see the module docstring).

    Columns: ``rank``, ``step``, ``start``, ``end`` (the step's range), ``step_ns``, ``timeline`` (``"gpu"`` or
    ``"cpu"``: which ranges were used), ``forwards`` / ``backwards`` (number of disjoint ranges, nested ones counted once: micro-batches),
    ``forward_ns`` / ``backward_ns`` (their unions), ``p2p_wait_ns``, ``work_ns`` (forward ∪ backward less the
    p2p waits), ``bubble_ns``,
    ``bubble_pct`` (of ``step_ns``), ``first_forward_delay_ns``.
    """
    ws = window_steps(steps, window).filter(pl.col("in_window"))
    if ws.is_empty() or events.is_empty():
        return pl.DataFrame()
    ann = events.filter(pl.col("kind").cast(pl.String).is_in(["annotation", "gpu_annotation"])).with_columns(
        name=pl.col("name").cast(pl.String), timeline=pl.when(pl.col("kind").cast(pl.String) == "gpu_annotation")
        .then(pl.lit("gpu")).otherwise(pl.lit("cpu")),
    ).with_columns(
        is_fwd=pl.col("name").str.contains(forward_pattern),
        is_bwd=pl.col("name").str.contains(backward_pattern),
    ).filter(pl.col("is_fwd") | pl.col("is_bwd"))
    if ann.is_empty():
        return pl.DataFrame()
    has_gpu = ann.group_by("rank").agg(gpu=(pl.col("timeline") == "gpu").any())
    ann = ann.join(has_gpu, on="rank").filter((pl.col("timeline") == "gpu") == pl.col("gpu"))
    # device ranges run later than the step's CPU range: give each step the device span of its ranges
    seg = ws.select("rank", "step", "start", "end")
    gpu_ranks = has_gpu.filter(pl.col("gpu"))["rank"].to_list()
    device = events.filter(pl.col("rank").is_in(gpu_ranks) & pl.col("kind").cast(pl.String).is_in(
        ["kernel", "memcpy", "memset"])) if gpu_ranks else events.clear()
    if gpu_ranks and not device.is_empty():
        # on a GPU a step is its device segment (first activity launched in it → next step's), as in the breakdown
        dseg = step_segments(device).rename({"start": "g_start", "end": "g_end"}).select("rank", "step", "g_start", "g_end")
        seg = seg.join(dseg, on=["rank", "step"], how="left").with_columns(
            start=pl.when(pl.col("rank").is_in(gpu_ranks)).then(pl.coalesce("g_start", "start")).otherwise("start"),
            end=pl.when(pl.col("rank").is_in(gpu_ranks)).then(pl.coalesce("g_end", "end")).otherwise("end"),
        ).drop("g_start", "g_end")
        ann = _step_by_segment(ann, seg, gpu_ranks)
    fwd = covered_between(ann.filter("is_fwd"), seg, name="forward_ns").select("rank", "step", "forward_ns")
    bwd = covered_between(ann.filter("is_bwd"), seg, name="backward_ns").select("rank", "step", "backward_ns")
    # time inside the ranges spent receiving from or sending to the neighbouring stage is communication, not work
    waits = events.filter(
        pl.col("kind").cast(pl.String).is_in(["annotation", "cpu_op"])
        & is_p2p_call_range(pl.col("name"))   # receive waits and send calls: not work
        & ~pl.col("rank").is_in(gpu_ranks)
    ).select("rank", "start", "end")
    span = covered_between(ann, seg, name="span_ns").select("rank", "step", "span_ns")
    if waits.is_empty():
        work = span.with_columns(p2p_wait_ns=pl.lit(0, pl.Int64), work_ns=pl.col("span_ns"))
    else:
        w = covered_between(waits, seg, name="w_ns").select("rank", "step", "w_ns")
        both = covered_between(pl.concat([ann.select("rank", "start", "end"), waits]), seg, name="u_ns").select(
            "rank", "step", "u_ns")
        work = span.join(w, on=["rank", "step"], how="left").join(both, on=["rank", "step"], how="left").with_columns(
            p2p_wait_ns=(pl.col("span_ns") + pl.col("w_ns") - pl.col("u_ns")).clip(lower_bound=0),
        ).with_columns(work_ns=pl.col("span_ns") - pl.col("p2p_wait_ns"))
    work = work.select("rank", "step", "work_ns", "p2p_wait_ns")
    if gpu_ranks and not device.is_empty():
        # on a GPU the NCCL receive kernels spin inside the ranges while the stage waits: the work is the
        # compute kernels' busy time in the step, and what is left of the step is the bubble
        compute = device.filter(pl.col("kernel_class").cast(pl.String) == "compute").select("rank", "start", "end")
        busy = covered_between(compute, seg.filter(pl.col("rank").is_in(gpu_ranks)), name="busy_ns").select(
            "rank", "step", "busy_ns")
        work = work.join(busy, on=["rank", "step"], how="left").with_columns(
            p2p_wait_ns=pl.when(pl.col("busy_ns").is_not_null()).then(pl.lit(0, pl.Int64)).otherwise("p2p_wait_ns"),
            work_ns=pl.coalesce("busy_ns", "work_ns"),
        ).drop("busy_ns")
    # micro-batches: disjoint forward (backward) ranges of the step; nested ranges count once
    nf = merge_intervals(ann.filter("is_fwd"), ["rank", "step"]).group_by("rank", "step").agg(forwards=pl.len())
    nb = merge_intervals(ann.filter("is_bwd"), ["rank", "step"]).group_by("rank", "step").agg(backwards=pl.len())
    counts = (
        ann.group_by("rank", "step").agg(
            first_forward=pl.col("start").filter("is_fwd").min(), timeline=pl.col("timeline").first())
        .lazy().join(nf, on=["rank", "step"], how="left").join(nb, on=["rank", "step"], how="left").collect()
    )
    out = (
        seg.lazy().join(fwd, on=["rank", "step"], how="left").join(bwd, on=["rank", "step"], how="left")
        .join(work, on=["rank", "step"], how="left").join(counts.lazy(), on=["rank", "step"], how="left")
        .with_columns(step_ns=pl.col("end") - pl.col("start"))
        .with_columns(
            bubble_ns=pl.col("step_ns") - pl.col("work_ns"),
            first_forward_delay_ns=pl.col("first_forward") - pl.col("start"),
            forwards=pl.col("forwards").fill_null(0), backwards=pl.col("backwards").fill_null(0),
        )
        .with_columns(bubble_pct=pl.when(pl.col("step_ns") > 0).then(100.0 * pl.col("bubble_ns") / pl.col("step_ns")))
        .select("rank", "step", "start", "end", "step_ns", "timeline", "forwards", "backwards", "forward_ns",
                "backward_ns", "p2p_wait_ns", "work_ns", "bubble_ns", "bubble_pct", "first_forward_delay_ns")
        .sort("rank", "step")
        .collect()
    )
    return out


def bubble_findings(bubbles: pl.DataFrame, min_pct: float = BUBBLE_PCT) -> list[Finding[PipelineBubbleEvidence]]:
    """Findings of kind ``pipeline_bubble``: ranks with several micro-batch forwards per step whose bubble is at
    least ``min_pct`` % of the step. Cost: the worst rank's summed bubble time."""
    if bubbles is None or bubbles.is_empty():
        return []
    per_rank = bubbles.group_by("rank").agg(
        mb=pl.col("forwards").median(), bubble_ns=pl.col("bubble_ns").sum(), step_ns=pl.col("step_ns").sum(),
        delay=pl.col("first_forward_delay_ns").median(), steps=pl.col("step"),
    ).with_columns(pct=100.0 * pl.col("bubble_ns") / pl.col("step_ns")).filter(
        (pl.col("mb") >= 2) & (pl.col("pct") >= min_pct)
    )
    if per_rank.is_empty():
        return []
    worst = per_rank.sort("bubble_ns", descending=True).row(0, named=True)
    stages = bubbles["rank"].n_unique()
    mb = float(worst["mb"])
    theory = gpipe_bubble_pct(stages, mb)
    return [make_finding(
        Kind.PIPELINE_BUBBLE,
        f"Pipeline bubbles take {worst['pct']:.0f}% of the step on rank {worst['rank']} "
        f"({per_rank.height} stage{'s' if per_rank.height != 1 else ''} above {min_pct:.0f}%; GPipe theory with "
        f"{stages} stage{'s' if stages != 1 else ''} and {mb:.0f} micro-batches: {theory or 0:.0f}%); the first "
        f"forward starts {duration(worst['delay'] or 0)} into the "
        "step.",
        PipelineBubbleEvidence(tuple(per_rank.drop("steps").sort("rank").to_dicts()), theory, mb, stages),
        Cost.measured(worst["bubble_ns"], "step time not covered by any forward or backward on the worst stage"),
        ranks=per_rank["rank"].to_list(), steps=worst["steps"], source="bubbles")]


#: Names of micro-batch ranges (pipeline schedules): ``forward_mb3``, ``backward_mb0``.
MICROBATCH_PATTERN = r"(?i)^(forward|backward|fwd|bwd)[_ ]?(mb|microbatch)?[_ ]?(\d+)$"


def microbatch_ranges(events: pl.DataFrame | None) -> pl.DataFrame:
    """Forward/backward micro-batch ranges of a pipeline run, per rank: ``rank``, ``start``, ``end``, ``phase``
    (``"forward"``/``"backward"``), ``mb`` (micro-batch number), ``step``, ``name``.

    Ranges are the host-side annotations named like ``forward_mb3`` (or ``Forward 3`` where a rank has no
    ``_mb`` names): on a GPU the device copies of backward ranges are empty, so the host ranges are the ones
    that show the schedule. Empty when the run has none.
    """
    cols = {"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "phase": pl.String, "mb": pl.Int32,
            "step": pl.Int32, "name": pl.String}
    if events is None or events.is_empty():
        return pl.DataFrame(schema=cols)
    ann = events.filter(pl.col("kind").cast(pl.String) == "annotation").with_columns(
        name=pl.col("name").cast(pl.String)).filter(pl.col("name").str.contains(MICROBATCH_PATTERN))
    if ann.is_empty():
        return pl.DataFrame(schema=cols)
    ann = ann.with_columns(
        phase=pl.when(pl.col("name").str.to_lowercase().str.contains("^(forward|fwd)")).then(pl.lit("forward"))
        .otherwise(pl.lit("backward")),
        mb=pl.col("name").str.extract(r"(\d+)$", 1).cast(pl.Int32),
        is_mb=pl.col("name").str.to_lowercase().str.contains("mb|microbatch"),
    )
    has_mb = ann.group_by("rank").agg(any_mb=pl.col("is_mb").any())
    ann = ann.join(has_mb, on="rank").filter(pl.col("is_mb") == pl.col("any_mb"))
    return ann.select(*[pl.col(c).cast(t) for c, t in cols.items()]).sort("rank", "start")


def microbatches_on_device(microbatches: pl.DataFrame, kernels: pl.DataFrame | pl.LazyFrame | None) -> pl.DataFrame:
    """:func:`microbatch_ranges` placed where the work ran: on a rank with device activity each range becomes the
    span of the compute kernels launched inside it (any of the rank's threads: backward launches from the autograd
    thread), all of its device activity when it launched no compute; ``timeline`` says ``"gpu"`` for those and
    ``"cpu"`` for the ranges kept at their host time (a CPU rank, or a range that launched nothing);
    ``host_start``/``host_end`` keep the host range (what a launch is matched against). A host range
    runs ahead of its kernels, so drawn beside device kernels and steps it would show the schedule in the wrong
    place."""
    out = microbatches.with_columns(timeline=pl.lit("cpu"), host_start=pl.col("start"), host_end=pl.col("end"))
    if microbatches.is_empty() or kernels is None:
        return out
    k = (kernels.lazy() if isinstance(kernels, pl.DataFrame) else kernels).filter(
        pl.col("rank").is_in(microbatches["rank"].unique().implode()) & pl.col("launch_start").is_not_null()
    ).select("rank", "start", "end", "launch_start",
             compute=pl.col("kernel_class").cast(pl.String) == "compute").sort("launch_start").collect()
    if k.is_empty():
        return out
    ranges = out.with_row_index("i").sort("start")
    # each launch to the latest range that began before it, kept when the range was still open
    hit = k.join_asof(ranges.select("rank", "i", r_start="start", r_end="end"), left_on="launch_start",
                      right_on="r_start", by="rank", strategy="backward", check_sortedness=False).filter(
        pl.col("i").is_not_null() & (pl.col("launch_start") <= pl.col("r_end")))
    span = hit.group_by("i").agg(
        d_start=pl.when(pl.col("compute").any()).then(pl.col("start").filter("compute").min())
        .otherwise(pl.col("start").min()),
        d_end=pl.when(pl.col("compute").any()).then(pl.col("end").filter("compute").max())
        .otherwise(pl.col("end").max()),
    )
    return ranges.join(span, on="i", how="left").with_columns(
        start=pl.coalesce("d_start", "start"), end=pl.coalesce("d_end", "end"),
        timeline=pl.when(pl.col("d_start").is_not_null()).then(pl.lit("gpu")).otherwise(pl.lit("cpu")),
    ).sort("i").drop("i", "d_start", "d_end").sort("rank", "start")


def gpipe_bubble_pct(stages: int, microbatches: float) -> float | None:
    """The GPipe bubble fraction ``(S-1)/(M+S-1)`` in percent, or None without stages."""
    if stages <= 1 or microbatches <= 0:
        return None
    return 100.0 * (stages - 1) / (microbatches + stages - 1)


def stage_summary(bubbles: pl.DataFrame) -> pl.DataFrame:
    """Per stage (rank) of :func:`pipeline_bubbles` rows, over its analysed steps: ``steps``, ``microbatches``
    (median forwards per step), and the medians of ``work_ns``, ``bubble_ns``, ``bubble_pct`` and
    ``first_forward_delay_ns``; ``timeline`` (where the work was measured)."""
    return bubbles.group_by("rank").agg(
        pl.len().alias("steps"),
        pl.col("forwards").median().alias("microbatches"),
        pl.col("work_ns").median(),
        pl.col("bubble_ns").median(),
        pl.col("bubble_pct").median(),
        pl.col("first_forward_delay_ns").median(),
        pl.col("timeline").first(),
    ).sort("rank")


def pipeline_shape(bubbles: pl.DataFrame) -> tuple[int, float, float | None]:
    """``(stages, micro-batches per step, GPipe theory %)`` of :func:`pipeline_bubbles` rows: the stages are its
    ranks, the micro-batches the median forwards per stage and step."""
    stages = bubbles["rank"].n_unique() if not bubbles.is_empty() else 0
    m = float(bubbles["forwards"].median() or 0) if stages else 0.0
    return stages, m, gpipe_bubble_pct(stages, m)


@register_detector(Kind.PIPELINE_BUBBLE, needs=("bubbles",), order=40)
def _detect(x: Inputs) -> list[Finding[PipelineBubbleEvidence]]:
    return bubble_findings(x.tables["bubbles"])
