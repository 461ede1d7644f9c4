"""The timeline engine: kernels reduced on the server to what the visible window can show, and the lanes around them.

Kernels are merged into pixel-wide spans per rank and stream unless at most ``exact_limit`` kernels are visible, in
which case they are drawn exactly (FACTS §5), so a figure stays small (<100 kB) whatever the size of the run.
:class:`TimelineIndex` prepares a run's kernels once for repeated window queries; :func:`reduce_timeline` /
:func:`timeline_view` answer one; :func:`timeline_lanes`, :func:`drawn_steps`, :func:`activity_bounds` say which
lanes and which time a timeline of a run shows. The figure itself is :func:`workbench.figures.timeline_figure`.

Example:
    >>> import polars as pl
    >>> from workbench.schema import KERNELS, conform
    >>> k = conform(pl.DataFrame({"rank": [0, 0], "stream": [7, 7], "start": [0, 10], "end": [5, 20],
    ...     "dur": [5, 10], "name": ["a", "b"], "kernel_class": ["compute", "communication"]}), KERNELS)
    >>> spans = reduce_timeline(k)
    >>> spans.height, spans["exact"].all()
    (2, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from workbench.analyses import bubbles

#: Default number of pixel-wide bins the visible window is cut into when kernels are merged.
DEFAULT_WIDTH_PX = 400
#: At most this many visible kernels are drawn exactly; above it they are merged into pixel-wide spans, which look
#: the same at that zoom. Measured in chromium (h200x2-pipeline, whole run): 4,033 exact kernels take 1.7-3.2 s to
#: draw, the same window merged into 97 spans 0.24 s; a zoom to ~1,000 kernels is exact.
EXACT_LIMIT = 1000

SPAN_COLUMNS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "stream": pl.Int64,
    "kernel_class": pl.String,
    "start": pl.Int64,
    "end": pl.Int64,
    "count": pl.UInt32,
    "busy_ns": pl.Int64,
    "name": pl.String,
    "exact": pl.Boolean,
}


def time_bounds(*frames: pl.DataFrame | None) -> tuple[int, int] | None:
    """Smallest ``start`` and largest ``end`` over the frames that have rows, or ``None``."""
    lo: list[int] = []
    hi: list[int] = []
    for f in frames:
        if f is None or f.is_empty() or "start" not in f.columns:
            continue
        s = f["start"].min()
        e = f["end"].max() if "end" in f.columns else f["start"].max()
        if s is not None:
            lo.append(int(s))
        if e is not None:
            hi.append(int(e))
    if not lo or not hi:
        return None
    return min(lo), max(hi)


class TimelineIndex:
    """Kernels prepared for repeated window queries: the columns the timeline needs, sorted by start.

    A window query slices the sorted frame by binary search (kernels starting before the window's end and after
    its start minus the longest kernel), so zoomed-in views cost what they show, not the size of the run.
    Build it once per run (the app caches it) and pass it to :func:`reduce_timeline` instead of the frame.
    """

    __slots__ = ("frame", "max_dur", "bounds")

    def __init__(self, kernels: pl.DataFrame):
        f = (
            kernels.lazy()
            .filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
            .select(
                pl.col("rank").cast(pl.Int32),
                pl.col("stream").fill_null(-1).cast(pl.Int64),
                "kernel_class",
                "start",
                "end",
                pl.col("dur").fill_null(pl.col("end") - pl.col("start")),
                "name",
            )
            .sort("start")
            .collect()
        )
        self.frame = f
        self.max_dur = int(f["dur"].max() or 0) if f.height else 0
        self.bounds = (int(f["start"].min()), int(f["end"].max())) if f.height else None

    def visible(self, start: int | None, end: int | None, ranks: list[int] | None = None) -> pl.DataFrame:
        f = self.frame
        if end is not None:
            f = f.slice(0, int(f["start"].search_sorted(end, side="right")))
        if start is not None:
            lo = int(f["start"].search_sorted(start - self.max_dur, side="left"))
            f = f.slice(lo).filter(pl.col("end") >= start)
        if ranks is not None:
            f = f.filter(pl.col("rank").is_in(list(ranks)))
        return f


def reduce_timeline(
    kernels: pl.DataFrame | TimelineIndex,
    *,
    start: int | None = None,
    end: int | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
    exact_limit: int = EXACT_LIMIT,
    ranks: list[int] | None = None,
) -> pl.DataFrame:
    """Kernels visible in ``[start, end]`` reduced to what ``width_px`` pixels can show.

    Args:
        kernels: a frame with the ``KERNELS`` columns ``rank``, ``stream``, ``kernel_class``, ``start``, ``end``,
            ``dur`` and ``name`` (ns on the absolute clock), or a :class:`TimelineIndex` of one (faster when the
            same kernels are queried again and again).
        start, end: the visible window in ns; ``None`` means the frame's bounds.
        width_px: how many pixel-wide bins the window is cut into when merging.
        exact_limit: when at most this many kernels are visible they are returned one row each (``exact``).
        ranks: keep only these ranks.

    Returns:
        A frame with :data:`SPAN_COLUMNS`, sorted by rank, stream and start. When merged, the window is cut into
        ``width_px`` bins; per (rank, stream) lane, each occupied bin takes the kernel class with the most busy
        time in it (a bin of 2,000 memsets and one long GEMM is ``compute``), and runs of adjacent bins of one
        class become one span: ``start``/``end`` are its first start and last end, ``count`` the kernels in it
        (every class), ``busy_ns`` their summed duration and ``name`` the longest one. Spans of a lane never
        overlap; every kernel is counted in exactly one span.
    """
    index = kernels if isinstance(kernels, TimelineIndex) else TimelineIndex(kernels)
    visible = index.visible(start, end, ranks)
    if visible.height <= exact_limit:
        return visible.select(
            "rank",
            "stream",
            pl.col("kernel_class").cast(pl.String),
            "start",
            "end",
            pl.lit(1, dtype=pl.UInt32).alias("count"),
            pl.col("dur").alias("busy_ns"),
            pl.col("name").cast(pl.String),
            pl.lit(True).alias("exact"),
        ).sort("rank", "stream", "start")
    lo = int(visible["start"].min()) if start is None else int(start)
    hi = int(visible["end"].max()) if end is None else int(end)
    bin_ns = max(1, (hi - lo) // max(1, width_px) + 1)
    lane = ["rank", "stream"]
    per_class = (
        visible.lazy()
        .with_columns(((pl.col("start").clip(lower_bound=lo) - lo) // bin_ns).alias("bin"),
                      pl.col("kernel_class").cast(pl.String))
        .group_by([*lane, "bin", "kernel_class"])
        .agg(
            pl.col("start").min(),
            pl.col("end").max(),
            pl.len().cast(pl.UInt32).alias("count"),
            pl.col("dur").sum().alias("busy_ns"),
            pl.col("name").get(pl.col("dur").arg_max()).alias("name"),
            pl.col("dur").max().alias("_longest"),
        )
    )
    # one class per pixel: the one that takes most of its busy time
    per_bin = (
        per_class.sort([*lane, "bin", "busy_ns", "kernel_class"], descending=[False, False, False, True, False])
        .group_by([*lane, "bin"], maintain_order=True)
        .agg(
            pl.col("kernel_class").first(),
            pl.col("start").min(),
            pl.col("end").max(),
            pl.col("count").sum(),
            pl.col("busy_ns").sum(),
            pl.col("name").get(pl.col("_longest").arg_max()),
            pl.col("_longest").max(),
        )
        .sort([*lane, "bin"])
    )
    # adjacent occupied bins of one lane and class look like one bar at this zoom: one span
    brk = (
        (pl.col("rank") != pl.col("rank").shift())
        | (pl.col("stream") != pl.col("stream").shift())
        | (pl.col("kernel_class") != pl.col("kernel_class").shift())
        | (pl.col("bin") - pl.col("bin").shift() > 1)
    ).fill_null(True)
    return (
        per_bin.with_columns(brk.cum_sum().alias("_run"))
        .group_by("_run")
        .agg(
            pl.col("rank").first(),
            pl.col("stream").first(),
            pl.col("kernel_class").first(),
            pl.col("start").min(),
            pl.col("end").max(),
            pl.col("count").sum(),
            pl.col("busy_ns").sum(),
            pl.col("name").get(pl.col("_longest").arg_max()),
        )
        .select(
            "rank",
            "stream",
            pl.col("kernel_class").cast(pl.String),
            "start",
            "end",
            "count",
            "busy_ns",
            pl.col("name").cast(pl.String),
            pl.lit(False).alias("exact"),
        )
        .sort("rank", "stream", "start")
        .collect()
    )


@dataclass(frozen=True, slots=True)
class TimelineView:
    """What a timeline figure shows: the reduced spans plus a one-line description."""

    spans: pl.DataFrame
    visible_kernels: int
    exact: bool
    start: int
    end: int

    def describe(self) -> str:
        if self.exact:
            return f"{self.visible_kernels:,} kernels shown exactly"
        return (f"{self.visible_kernels:,} kernels merged into {self.spans.height:,} pixel-wide spans "
                "(each coloured by the class that takes most of its time)")


def timeline_view(
    kernels: pl.DataFrame | TimelineIndex,
    *,
    start: int | None = None,
    end: int | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
    exact_limit: int = EXACT_LIMIT,
    ranks: list[int] | None = None,
) -> TimelineView:
    """:func:`reduce_timeline` plus the window and counts a caption needs."""
    spans = reduce_timeline(kernels, start=start, end=end, width_px=width_px, exact_limit=exact_limit, ranks=ranks)
    visible = int(spans["count"].sum()) if spans.height else 0
    exact = bool(spans.height == 0 or spans["exact"].all())
    index = kernels if isinstance(kernels, TimelineIndex) else None
    bounds = (index.bounds if index is not None else time_bounds(kernels)) or (0, 0)
    return TimelineView(
        spans=spans,
        visible_kernels=visible,
        exact=exact,
        start=int(start if start is not None else bounds[0]),
        end=int(end if end is not None else bounds[1]),
    )


def run_microbatches(run: Any) -> pl.DataFrame:
    """A :class:`workbench.Run`'s micro-batch ranges where their work ran
    (:func:`workbench.analyses.bubbles.microbatches_on_device` of :func:`~workbench.analyses.bubbles.microbatch_ranges`),
    from filtered scans (only the matching annotations and their ranks' kernels are read; the tables already
    loaded when they are)."""
    is_mb = (pl.col("kind").cast(pl.String) == "annotation") & pl.col("name").cast(pl.String).str.contains(
        bubbles.MICROBATCH_PATTERN)
    if hasattr(run, "scan") and not run.loaded("events"):
        mb = bubbles.microbatch_ranges(run.scan("events").filter(is_mb).collect())
    else:
        mb = bubbles.microbatch_ranges(run.events.filter(is_mb) if run.events.height else run.events)
    if mb.is_empty():
        return bubbles.microbatches_on_device(mb, None)
    kernels = run.scan("kernels") if hasattr(run, "scan") and not run.loaded("kernels") else run.kernels
    return bubbles.microbatches_on_device(mb, kernels)


def timeline_lanes(kernels: pl.DataFrame | TimelineIndex, *, ranks: list[int] | None = None,
                   steps: pl.DataFrame | None = None, collectives: pl.DataFrame | None = None,
                   compiles: pl.DataFrame | None = None, microbatches: pl.DataFrame | None = None) -> list[str]:
    """Every lane the timeline of ``ranks`` has over the whole run, in display order: the same lanes at every
    zoom (a lane with nothing in the window stays, empty)."""
    frame = kernels.frame if isinstance(kernels, TimelineIndex) else kernels
    labels: set[str] = set()

    def add(f: pl.DataFrame | None, what: str | None) -> None:
        if f is None or f.is_empty():
            return
        if ranks is not None:
            f = f.filter(pl.col("rank").is_in(list(ranks)))
        if what is None:
            for r, st in f.select("rank", pl.col("stream").fill_null(-1)).unique().iter_rows():
                labels.add(f"rank {r} · stream {st}")
        else:
            labels.update(f"rank {r} · {what}" for r in f["rank"].unique().to_list())

    add(frame, None)
    add(steps, "steps")
    add(microbatches, "micro-batches")
    add(collectives, "collectives")
    add(compiles.filter(pl.col("start").is_not_null()) if compiles is not None and not compiles.is_empty()
        else None, "compile")
    return sorted(labels, key=lane_sort_key)


def drawn_steps(steps: pl.DataFrame | None) -> pl.DataFrame:
    """The steps a timeline draws: the profiler's when a rank has both sources (they frame its device activity),
    else the collector's."""
    if steps is None or steps.is_empty():
        return pl.DataFrame()
    if "source" not in steps.columns:
        return steps
    s = steps.with_columns(pl.col("source").cast(pl.String))
    has_prof = s.group_by("rank").agg(p=(pl.col("source") == "profiler").any())
    return s.join(has_prof, on="rank").filter(
        pl.when(pl.col("p")).then(pl.col("source") == "profiler").otherwise(True)).drop("p")


def activity_bounds(kernels: pl.DataFrame | TimelineIndex | None, steps: pl.DataFrame | None = None,
                    collectives: pl.DataFrame | None = None) -> tuple[int, int] | None:
    """Where the timeline's activity is: device kernels, collectives and the drawn steps (:func:`drawn_steps`) —
    not the collector's first step, which can start seconds before the profiler recorded anything."""
    k = kernels.frame if isinstance(kernels, TimelineIndex) else kernels
    co = None
    if collectives is not None and not collectives.is_empty():
        co = collectives.select(pl.coalesce("kernel_start", "start").alias("start"),
                                pl.max_horizontal("kernel_end", "end").alias("end"))
    return time_bounds(k, co, drawn_steps(steps))


def lane_sort_key(label: str) -> tuple:
    """Display order of a lane label: ``"rank 3 · stream 7"`` → ``(3, 2, 7, …)``; per rank the steps first, then
    micro-batches, streams, collectives, compile."""
    try:
        head, what = label.split(" · ", 1)
        rank = int(head.split()[1])
    except (ValueError, IndexError):
        return (10**9, 9, 0, label)
    order = {"steps": 0, "micro-batches": 1, "collectives": 3, "compile": 4}
    if what.startswith("stream "):
        try:
            return (rank, 2, int(what.split()[1]), label)
        except ValueError:
            return (rank, 2, 0, label)
    return (rank, order.get(what, 5), 0, label)
