"""Plotly figure builders shared by the Dash app, the batch HTML report and notebooks.

Every function takes polars frames (tables from :mod:`workbench.schema` or analysis results) and returns a
``plotly.graph_objects.Figure``; none of them reads files or prints. The app's callbacks and
:mod:`workbench.report` call the same functions, so the UI and the report cannot drift apart.

The timeline is reduced on the server to what the visible window can show (FACTS §5): kernels are merged into
pixel-wide spans per rank and stream unless at most ``exact_limit`` kernels are visible, in which case they are
drawn exactly. Spans are drawn as line segments of one SVG path per kernel class, so a figure stays small
(<100 kB) whatever the size of the run.

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

import numpy as np
import plotly.graph_objects as go
import polars as pl

from workbench.schema import KERNEL_CLASSES

#: Colour of each kernel class; the app, the report and the notebooks all use these.
CLASS_COLORS: dict[str, str] = {
    "compute": "#4C78A8",
    "communication": "#F58518",
    "memcpy": "#54A24B",
    "memset": "#B279A2",
    "sync": "#9D755D",
    "collective": "#E45756",
    "compile": "#D62728",
    "step": "#BAB0AC",
}
#: Part colours for breakdown bars (keys are matched as substrings of column names).
PART_COLORS: dict[str, str] = {
    "compute": "#4C78A8",
    "exposed": "#E45756",
    "overlap": "#F58518",
    "comm": "#F58518",
    "memcpy": "#54A24B",
    "memset": "#B279A2",
    "idle": "#BAB0AC",
    "sync": "#9D755D",
}
#: Default number of pixel-wide bins the visible window is cut into when kernels are merged.
DEFAULT_WIDTH_PX = 400
#: At most this many visible kernels are drawn exactly; above it they are merged (FACTS §5: SVG bars ~5k).
EXACT_LIMIT = 5000

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


def _base_layout(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    fig.update_layout(
        template="plotly_white",
        title=title,
        height=height,
        margin=dict(l=60, r=20, t=50 if title else 20, b=40),
        legend=dict(orientation="h", yanchor="bottom", y=1.01, xanchor="right", x=1),
    )
    return fig


def empty_figure(message: str, *, height: int = 240) -> go.Figure:
    """A blank figure that says ``message`` (nothing to show, or an analysis that is not available)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, height=height)


# --------------------------------------------------------------------------------------------------- timeline


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
        ``width_px`` bins; per (rank, stream, kernel class), the kernels starting in a bin are merged, and runs of
        adjacent occupied bins become one span: ``start``/``end`` are its first start and last end, ``count`` the
        kernels in it, ``busy_ns`` their summed duration and ``name`` the longest one. Spans of different classes
        may overlap in a lane (both ran in those pixels); every kernel is counted in exactly one span.
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
    lane = ["rank", "stream", "kernel_class"]
    per_bin = (
        visible.lazy()
        .with_columns(((pl.col("start").clip(lower_bound=lo) - lo) // bin_ns).alias("bin"))
        .group_by([*lane, "bin"])
        .agg(
            pl.col("start").min(),
            pl.col("end").max(),
            pl.len().cast(pl.UInt32).alias("count"),
            pl.col("dur").sum().alias("busy_ns"),
            pl.col("name").get(pl.col("dur").arg_max()).alias("name"),
            pl.col("dur").max().alias("_longest"),
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
        return f"{self.visible_kernels:,} kernels merged into {self.spans.height:,} pixel-wide spans"


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


def _segments(frame: pl.DataFrame, lane: pl.Expr, origin: int, text: pl.Expr) -> tuple[np.ndarray, list, np.ndarray]:
    """x/y/text arrays drawing each row as a horizontal segment (NaN x separates segments).

    x is in ms since ``origin``; y holds lane labels (mapped to numbers by the caller); the hover text sits on the
    first point of each segment only. numpy arrays keep plotly's validation and the JSON (base64) cheap.
    """
    if frame.is_empty():
        return np.empty(0), [], np.empty(0, dtype=str)
    d = frame.select(
        ((pl.col("start") - origin) / 1e6).alias("x0"),
        ((pl.col("end") - origin) / 1e6).alias("x1"),
        lane.alias("lane"),
        text.fill_null("").alias("text"),
    )
    n = d.height
    x = np.full(3 * n, np.nan)
    x[0::3] = d["x0"].to_numpy()
    x[1::3] = d["x1"].to_numpy()
    lanes = d["lane"].to_list()
    y: list = [None] * (3 * n)
    y[0::3] = lanes
    y[1::3] = lanes
    texts = d["text"].to_numpy().astype(str)
    t = np.full(3 * n, "", dtype=texts.dtype)
    t[0::3] = texts
    return x, y, t


def _lane_label(rank: pl.Expr, what: pl.Expr | str) -> pl.Expr:
    what_expr = pl.lit(what) if isinstance(what, str) else what
    return pl.concat_str([pl.lit("rank "), rank.cast(pl.String), pl.lit(" · "), what_expr])


def _ms(col: str) -> pl.Expr:
    return (pl.col(col) / 1e6).round(3).cast(pl.String)


def timeline_figure(
    view: TimelineView,
    *,
    origin: int,
    collectives: pl.DataFrame | None = None,
    compiles: pl.DataFrame | None = None,
    steps: pl.DataFrame | None = None,
    uirevision: str = "timeline",
    title: str | None = None,
) -> go.Figure:
    """A per-rank, per-stream timeline of the reduced spans of ``view``, in ms since ``origin``.

    Collectives (``COLLECTIVES`` rows) get a lane per rank, recompiles (``COMPILES`` rows) a marker lane per rank
    and steps (``STEPS`` rows) a lane per rank; only rows inside the view's window are drawn (at most
    :data:`EXACT_LIMIT` collectives; beyond that they are merged like kernels). ``uirevision`` keeps the user's
    zoom across updates.
    """
    lo, hi = view.start, view.end
    fig = go.Figure()
    lanes: set[str] = set()

    def in_window(f: pl.DataFrame | None, s: str = "start", e: str = "end") -> pl.DataFrame:
        if f is None or f.is_empty():
            return pl.DataFrame()
        return f.filter((pl.col(e) >= lo) & (pl.col(s) <= hi))

    # steps first: they sit at the top of each rank's group of lanes
    st = in_window(steps)
    if not st.is_empty():
        if "source" in st.columns and st["source"].cast(pl.String).n_unique() > 1:
            st = st.filter(pl.col("source").cast(pl.String) == "profiler")
        st = st.sort("rank", "start").head(20_000)
        for parity, color in ((0, CLASS_COLORS["step"]), (1, "#79706E")):  # alternate shades show step edges
            part = st.filter(pl.col("step").fill_null(0) % 2 == parity)
            if part.is_empty():
                continue
            x, y, t = _segments(
                part,
                _lane_label(pl.col("rank"), "steps"),
                origin,
                pl.concat_str([pl.lit("step "), pl.col("step").cast(pl.String), pl.lit(" · "), _ms("dur"),
                               pl.lit(" ms")]),
            )
            lanes.update(v for v in y[0::3])
            fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name="steps", hoverinfo="text",
                                     legendgroup="steps", showlegend=parity == 0, line=dict(color=color, width=6)))

    sp = view.spans
    if not sp.is_empty():
        lane = _lane_label(pl.col("rank"), pl.concat_str([pl.lit("stream "), pl.col("stream").cast(pl.String)]))
        text = pl.when(pl.col("exact")).then(
            pl.concat_str([pl.col("name").str.slice(0, 60), pl.lit(" · "), _ms("busy_ns"), pl.lit(" ms")])
        ).otherwise(
            pl.concat_str([pl.col("count").cast(pl.String), pl.lit(" kernels · "), _ms("busy_ns"), pl.lit(" ms busy")])
        )
        for cls in [*KERNEL_CLASSES, None]:
            part = sp.filter(pl.col("kernel_class").is_null()) if cls is None else sp.filter(pl.col("kernel_class") == cls)
            if part.is_empty():
                continue
            x, y, t = _segments(part, lane, origin, text)
            lanes.update(v for v in y[0::3])
            fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name=cls or "other", hoverinfo="text",
                                     line=dict(color=CLASS_COLORS.get(cls or "", "#888"), width=14)))

    co = in_window(collectives)
    if not co.is_empty():
        co = co.with_columns(
            pl.coalesce("kernel_start", "start").alias("_s"), pl.coalesce("kernel_end", "end").alias("_e")
        ).select("rank", pl.col("_s").alias("start"), pl.col("_e").alias("end"),
                 pl.col("collective").cast(pl.String), "pg_name", "seq", "bytes")
        if co.height > EXACT_LIMIT:
            merged = reduce_timeline(
                co.with_columns(pl.lit(0, pl.Int64).alias("stream"), pl.col("collective").alias("name"),
                                pl.lit("communication").alias("kernel_class"),
                                (pl.col("end") - pl.col("start")).alias("dur")),
                start=lo, end=hi, exact_limit=0,
            )
            text = pl.concat_str([pl.col("count").cast(pl.String), pl.lit(" collectives")])
            x, y, t = _segments(merged, _lane_label(pl.col("rank"), "collectives"), origin, text)
        else:
            text = pl.concat_str([
                pl.col("collective"), pl.lit(" #"), pl.col("seq").cast(pl.String), pl.lit(" pg "),
                pl.col("pg_name").fill_null("?"), pl.lit(" · "), pl.col("bytes").fill_null(0).cast(pl.String),
                pl.lit(" B · "), ((pl.col("end") - pl.col("start")) / 1e6).round(3).cast(pl.String), pl.lit(" ms"),
            ])
            x, y, t = _segments(co, _lane_label(pl.col("rank"), "collectives"), origin, text)
        lanes.update(v for v in y[0::3])
        fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name="collectives", hoverinfo="text",
                                 line=dict(color=CLASS_COLORS["collective"], width=10)))

    cp = in_window(compiles)
    if not cp.is_empty():
        cp = cp.filter(pl.col("start").is_not_null())
        label = _lane_label(pl.col("rank"), "compile")
        d = cp.select(
            ((pl.col("start") - origin) / 1e6).alias("x"),
            label.alias("y"),
            pl.concat_str([
                pl.lit("compile "), pl.col("compile_id").fill_null("?"), pl.lit(" · "),
                pl.col("cause").fill_null("?"), pl.lit(" · "),
                (pl.col("duration_ns").fill_null(0) / 1e6).round(1).cast(pl.String), pl.lit(" ms"),
                pl.when(pl.col("step").is_not_null()).then(
                    pl.concat_str([pl.lit(" · step "), pl.col("step").cast(pl.String)])).otherwise(pl.lit("")),
            ]).alias("text"),
        )
        lanes.update(d["y"].to_list())
        fig.add_trace(go.Scatter(x=d["x"].to_numpy(), y=d["y"].to_list(), text=d["text"].to_numpy().astype(str),
                                 mode="markers", name="recompiles", hoverinfo="text",
                                 marker=dict(symbol="triangle-down", size=12, color=CLASS_COLORS["compile"])))
        x, y, t = _segments(cp.with_columns(pl.coalesce("end", "start").alias("end")), label, origin,
                            pl.col("compile_id").fill_null("?"))
        fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", showlegend=False, hoverinfo="text",
                                 line=dict(color=CLASS_COLORS["compile"], width=4)))

    order = sorted(lanes, key=_lane_sort_key)
    index = {label: i for i, label in enumerate(order)}
    for tr in fig.data:  # lane labels → numbers (short JSON); the axis shows the labels
        if tr.y is not None:
            tr.y = np.array([np.nan if v is None else index[v] for v in tr.y], dtype=np.float32)
    fig.update_yaxes(tickvals=list(range(len(order))), ticktext=order, range=[len(order) - 0.5, -0.5],
                     fixedrange=True, showgrid=False, zeroline=False)
    fig.update_xaxes(title="ms since start of run", range=[(lo - origin) / 1e6, (hi - origin) / 1e6],
                     showgrid=True)
    _base_layout(fig, title=title, height=max(220, 70 + 26 * len(order)))
    fig.update_layout(margin=dict(l=150))
    fig.update_layout(uirevision=uirevision, hovermode="closest", dragmode="zoom",
                      meta={"exact": view.exact, "visible_kernels": view.visible_kernels, "spans": view.spans.height})
    return fig


def run_timeline(run: Any, *, start: int | None = None, end: int | None = None, ranks: list[int] | None = None,
                 width_px: int = DEFAULT_WIDTH_PX) -> go.Figure:
    """The app's Timeline figure for a :class:`workbench.Run` in one call (notebooks, reports).

    ``start``/``end`` are absolute ns (``None``: the whole run); x is in ms since the run's first kernel or step.
    """
    view = timeline_view(run.kernels, start=start, end=end, ranks=ranks, width_px=width_px)
    origin = (time_bounds(run.kernels, run.steps, run.collectives) or (0, 0))[0]
    sel = (lambda f: f.filter(pl.col("rank").is_in(ranks))) if ranks else (lambda f: f)
    return timeline_figure(view, origin=origin, collectives=sel(run.collectives), compiles=sel(run.compiles),
                           steps=sel(run.steps), title=view.describe())


def _lane_sort_key(label: str) -> tuple:
    # "rank 3 · stream 7" → (3, 1, 7); steps first, then streams, collectives, compile
    try:
        head, what = label.split(" · ", 1)
        rank = int(head.split()[1])
    except (ValueError, IndexError):
        return (10**9, 9, 0, label)
    order = {"steps": 0, "collectives": 2, "compile": 3}
    if what.startswith("stream "):
        try:
            return (rank, 1, int(what.split()[1]), label)
        except ValueError:
            return (rank, 1, 0, label)
    return (rank, order.get(what, 4), 0, label)


# ------------------------------------------------------------------------------------------------ step time


def step_time_figure(steps: pl.DataFrame, *, title: str | None = "Step time per rank") -> go.Figure:
    """Step duration (ms) per rank over steps, one line per rank (``STEPS`` rows; collector steps preferred)."""
    if steps is None or steps.is_empty():
        return empty_figure("no steps recorded")
    s = steps
    if "source" in s.columns:
        sources = set(s["source"].cast(pl.String).unique().to_list())
        if "collector" in sources:
            s = s.filter(pl.col("source").cast(pl.String) == "collector")
    fig = go.Figure()
    for rank in sorted(s["rank"].unique().to_list()):
        r = s.filter(pl.col("rank") == rank).sort("step")
        fig.add_trace(go.Scatter(x=r["step"].to_list(), y=(r["dur"] / 1e6).to_list(), mode="lines+markers",
                                 name=f"rank {rank}", marker=dict(size=4)))
    fig.update_xaxes(title="step")
    med = s["dur"].median()
    if med and s["dur"].max() > 20 * med:  # compile-time first steps would flatten the rest
        fig.update_yaxes(title="step time (ms, log scale)", type="log")
    else:
        fig.update_yaxes(title="step time (ms)", rangemode="tozero")
    return _base_layout(fig, title=title, height=360)


# ------------------------------------------------------------------------------------------- generic shapes


def stacked_bar_figure(
    frame: pl.DataFrame,
    *,
    x: str,
    parts: list[str],
    scale: float = 1.0,
    unit: str = "",
    title: str | None = None,
    x_title: str | None = None,
    horizontal: bool = False,
) -> go.Figure:
    """One stacked bar per value of ``x`` with one segment per column in ``parts`` (values divided by ``scale``)."""
    if frame is None or frame.is_empty():
        return empty_figure("nothing to show")
    fig = go.Figure()
    xs = [str(v) for v in frame[x].to_list()]
    for p in parts:
        if p not in frame.columns:
            continue
        vals = (frame[p].cast(pl.Float64) / scale).to_list()
        color = next((c for k, c in PART_COLORS.items() if k in p), None)
        label = p.replace("_ns", "").replace("_pct", " %").replace("_", " ")
        if horizontal:
            fig.add_trace(go.Bar(y=xs, x=vals, name=label, orientation="h", marker_color=color))
        else:
            fig.add_trace(go.Bar(x=xs, y=vals, name=label, marker_color=color))
    fig.update_layout(barmode="stack")
    axis = dict(title=unit)
    if horizontal:
        fig.update_xaxes(**axis)
        fig.update_yaxes(title=x_title or x, type="category")
    else:
        fig.update_yaxes(**axis)
        fig.update_xaxes(title=x_title or x, type="category")
    return _base_layout(fig, title=title, height=360)


def heatmap_figure(
    frame: pl.DataFrame,
    *,
    x: str,
    y: str,
    z: str,
    scale: float = 1.0,
    unit: str = "",
    title: str | None = None,
    colorscale: str = "Reds",
    x_title: str | None = None,
    y_title: str | None = None,
    text: str | None = None,
) -> go.Figure:
    """A ``y`` × ``x`` heatmap of ``z`` from a long frame (one row per cell); missing cells stay empty."""
    if frame is None or frame.is_empty():
        return empty_figure("nothing to show")
    xs = sorted(frame[x].unique().drop_nulls().to_list(), key=_natural)
    ys = sorted(frame[y].unique().drop_nulls().to_list(), key=_natural)
    xi = {v: i for i, v in enumerate(xs)}
    yi = {v: i for i, v in enumerate(ys)}
    grid: list[list[Any]] = [[None] * len(xs) for _ in ys]
    tgrid: list[list[Any]] = [[""] * len(xs) for _ in ys]
    tvals = frame[text].to_list() if text else [None] * frame.height
    for xv, yv, zv, tv in zip(frame[x].to_list(), frame[y].to_list(), frame[z].to_list(), tvals):
        if xv is None or yv is None:
            continue
        grid[yi[yv]][xi[xv]] = None if zv is None else float(zv) / scale
        if tv is not None:
            tgrid[yi[yv]][xi[xv]] = str(tv)
    fig = go.Figure(go.Heatmap(
        z=grid, x=[str(v) for v in xs], y=[str(v) for v in ys], colorscale=colorscale,
        colorbar=dict(title=unit), text=tgrid if text else None,
        hovertemplate=f"{y_title or y} %{{y}}<br>{x_title or x} %{{x}}<br>%{{z}} {unit}"
        + ("<br>%{text}" if text else "") + "<extra></extra>",
        xgap=1, ygap=1,
    ))
    fig.update_xaxes(title=x_title or x, type="category")
    fig.update_yaxes(title=y_title or y, type="category", autorange="reversed")
    return _base_layout(fig, title=title, height=max(260, 120 + 28 * len(ys)))


def _natural(v: Any) -> tuple:
    if isinstance(v, (int, float)):
        return (0, v, "")
    s = str(v)
    parts = []
    for chunk in s.replace("_", "/").split("/"):
        parts.append(int(chunk) if chunk.isdigit() else 10**9)
    return (1, tuple(parts), s)


def line_figure(
    frame: pl.DataFrame,
    *,
    x: str,
    y: str,
    color: str | None = None,
    scale: float = 1.0,
    unit: str = "",
    title: str | None = None,
    x_title: str | None = None,
) -> go.Figure:
    """Lines of ``y`` over ``x``, one per value of ``color`` (values divided by ``scale``)."""
    if frame is None or frame.is_empty():
        return empty_figure("nothing to show")
    fig = go.Figure()
    groups = [(None, frame)] if color is None else [
        (k, frame.filter(pl.col(color) == k)) for k in sorted(frame[color].unique().drop_nulls().to_list())
    ]
    for key, part in groups:
        part = part.sort(x)
        fig.add_trace(go.Scatter(x=part[x].to_list(), y=(part[y].cast(pl.Float64) / scale).to_list(),
                                 mode="lines+markers", marker=dict(size=4),
                                 name=f"{color} {key}" if color else y))
    fig.update_xaxes(title=x_title or x)
    fig.update_yaxes(title=unit, rangemode="tozero")
    return _base_layout(fig, title=title, height=340)


def bar_figure(
    frame: pl.DataFrame,
    *,
    x: str,
    y: str,
    scale: float = 1.0,
    unit: str = "",
    title: str | None = None,
    color: str | None = None,
    horizontal: bool = False,
) -> go.Figure:
    """Plain bars of ``y`` per ``x`` (``color`` names a column of CSS colours or a class known to the palette)."""
    if frame is None or frame.is_empty():
        return empty_figure("nothing to show")
    xs = [str(v) for v in frame[x].to_list()]
    ys = (frame[y].cast(pl.Float64) / scale).to_list()
    colors = None
    if color and color in frame.columns:
        colors = [CLASS_COLORS.get(str(c), PART_COLORS.get(str(c), str(c))) for c in frame[color].to_list()]
    if horizontal:
        fig = go.Figure(go.Bar(y=xs, x=ys, orientation="h", marker_color=colors))
        fig.update_xaxes(title=unit)
        fig.update_yaxes(type="category", autorange="reversed")
    else:
        fig = go.Figure(go.Bar(x=xs, y=ys, marker_color=colors))
        fig.update_yaxes(title=unit)
        fig.update_xaxes(type="category")
    return _base_layout(fig, title=title, height=max(300, 60 + 22 * len(xs)) if horizontal else 340)


# ------------------------------------------------------------------------------------- domain-shaped figures


def findings_figure(findings: pl.DataFrame, *, top: int = 15, title: str | None = "Findings by cost") -> go.Figure:
    """Horizontal bars of ``cost_ns`` (ms) for the top findings (``FINDINGS`` rows), coloured by severity."""
    if findings is None or findings.is_empty():
        return empty_figure("no findings")
    f = findings.sort("cost_ns", descending=True, nulls_last=True).head(top)
    sev = {"high": "#D62728", "medium": "#FF7F0E", "low": "#1F77B4", "info": "#7F7F7F"}
    labels = [f"{k} ({i + 1})" for i, k in enumerate(f["kind"].to_list())]
    fig = go.Figure(go.Bar(
        y=labels, x=(f["cost_ns"].fill_null(0) / 1e6).to_list(), orientation="h",
        marker_color=[sev.get(s, "#7F7F7F") for s in f["severity"].to_list()],
        text=[m[:90] for m in f["message"].fill_null("").to_list()], hoverinfo="text+x",
    ))
    fig.update_xaxes(title="cost (ms of step time)")
    fig.update_yaxes(autorange="reversed", type="category")
    return _base_layout(fig, title=title, height=max(240, 80 + 28 * f.height))


def divergence_matrix_figure(compiles: pl.DataFrame, *, title: str | None = "Compile ids per rank") -> go.Figure:
    """A rank × compile-id matrix from ``COMPILES`` rows: 1 where the rank compiled that id (hover: cause, step).

    Ids that only some ranks have are the divergent recompiles; they are labelled in the x axis with a ``*``.
    """
    if compiles is None or compiles.is_empty():
        return empty_figure("no compile events")
    c = compiles.filter(pl.col("compile_id").is_not_null())
    ranks = sorted(c["rank"].unique().to_list())
    per_id = c.group_by("compile_id").agg(pl.col("rank").n_unique().alias("n"))
    partial = set(per_id.filter(pl.col("n") < len(ranks))["compile_id"].to_list())
    cells = c.group_by("rank", "compile_id").agg(
        pl.col("cause").drop_nulls().first().alias("cause"),
        pl.col("step").drop_nulls().first().alias("step"),
        (pl.col("duration_ns").fill_null(0).sum() / 1e6).round(1).alias("ms"),
    ).with_columns(
        pl.lit(1).alias("present"),
        pl.concat_str([pl.lit("cause "), pl.col("cause").fill_null("?"), pl.lit(" · step "),
                       pl.col("step").cast(pl.String).fill_null("?"), pl.lit(" · "),
                       pl.col("ms").cast(pl.String), pl.lit(" ms")]).alias("text"),
        pl.when(pl.col("compile_id").is_in(list(partial)))
        .then(pl.concat_str([pl.col("compile_id"), pl.lit("*")]))
        .otherwise(pl.col("compile_id")).alias("id"),
    )
    # absent cells as 0 so divergence shows as a hole
    ids = cells["id"].unique().to_list()
    full = pl.DataFrame({"rank": ranks}).join(pl.DataFrame({"id": ids}), how="cross")
    cells = full.join(cells.select("rank", "id", "present", "text"), on=["rank", "id"], how="left").with_columns(
        pl.col("present").fill_null(0), pl.col("text").fill_null("not compiled on this rank"))
    fig = heatmap_figure(cells, x="id", y="rank", z="present", text="text", colorscale=[[0, "#FDE0DD"], [1, "#3182BD"]],
                         x_title="compile id (* = not on every rank)", y_title="rank", title=title)
    fig.update_traces(showscale=False)
    return fig


def diff_figure(diff: pl.DataFrame, *, metric: str, before: str, after: str, scale: float = 1.0, unit: str = "",
                title: str | None = None) -> go.Figure:
    """Grouped bars of ``before`` and ``after`` values per ``metric`` row of a diff frame."""
    if diff is None or diff.is_empty():
        return empty_figure("nothing to compare")
    xs = [str(v) for v in diff[metric].to_list()]
    fig = go.Figure([
        go.Bar(x=xs, y=(diff[before].cast(pl.Float64) / scale).to_list(), name="before", marker_color="#9ECAE1"),
        go.Bar(x=xs, y=(diff[after].cast(pl.Float64) / scale).to_list(), name="after", marker_color="#3182BD"),
    ])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=unit)
    fig.update_xaxes(type="category")
    return _base_layout(fig, title=title, height=360)


#: At most this many collective instances (the latest) go into the skew heatmap.
MAX_SKEW_INSTANCES = 400


def skew_cells(matched: pl.DataFrame, *, max_instances: int = MAX_SKEW_INSTANCES) -> pl.DataFrame:
    """Long rank × instance frame of each rank's wait (``wait_ns``) at each complete, non-p2p collective instance.

    ``matched`` is :func:`workbench.analyses.collectives.match_collectives` output; instances are numbered in
    time order (``instance``), the latest ``max_instances`` kept.
    """
    if matched is None or matched.is_empty():
        return pl.DataFrame()
    m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1))
    if m.is_empty():
        return m
    key = ["pg_name", "pg_ranks", "step", "order"]
    inst = (m.group_by(key).agg(pl.col("arrival").min().alias("_first"), pl.col("collective").first().cast(pl.String))
            .sort("_first").tail(max_instances).with_row_index("instance"))
    return m.join(inst.select(*key, "instance", pl.col("collective").alias("_name")), on=key, how="inner",
                  nulls_equal=True).with_columns(
        pl.concat_str([pl.col("_name"), pl.lit(" · step "), pl.col("step").cast(pl.String).fill_null("?"),
                       pl.lit(" · last rank "), pl.col("last_rank").cast(pl.String)]).alias("text"))


def collective_skew_figure(matched: pl.DataFrame, *, title: str | None = "Wait at each collective for the last-arriving rank") -> go.Figure:
    """Rank × collective-instance heatmap of each rank's wait (ms) for the last rank to arrive."""
    cells = skew_cells(matched)
    if cells.is_empty():
        return empty_figure("no collective seen on more than one rank")
    return heatmap_figure(cells, x="instance", y="rank", z="wait_ns", scale=1e6, unit="ms", text="text",
                          x_title="collective instance (in time order)", y_title="rank", title=title)
