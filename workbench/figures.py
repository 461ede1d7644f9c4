"""Plotly chart builders shared by the Dash app, the batch HTML report and notebooks.

Every function takes polars frames (tables from :mod:`workbench.schema` or analysis results) and returns a
``plotly.graph_objects.Figure``; none of them reads files, prints or computes a metric (those come from
:mod:`workbench.analyses`; the timeline's reduction from :mod:`workbench.timeline`). The app's callbacks and
:mod:`workbench.report` call the same functions, so the UI and the report cannot drift apart. Labels format
numbers with :mod:`workbench.format`.

The timeline figure draws :func:`workbench.timeline.timeline_view`'s spans as line segments of one SVG path per
kernel class, so a figure stays small (<100 kB) whatever the size of the run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from workbench import timeline as tl
from workbench.analyses import bubbles as bubbles_analysis
from workbench.analyses import metrics
from workbench.analyses.collectives import arrival_offsets, skew_cells
from workbench.analyses.recompiles import classify_compiles
from workbench.analyses.summary import findings_costs
from workbench.format import axis_ms, duration, percent
from workbench.schema import KERNEL_CLASSES

#: Colour of each kernel class; the app, the report and the notebooks all use these.
CLASS_COLORS: dict[str, str] = {
    "compute": "#4C78A8",
    "communication": "#F58518",
    "memcpy": "#54A24B",
    "memset": "#B279A2",
    "sync": "#9D755D",
    "collective": "#E3B505",
    "compile": "#D62728",
    "step": "#BAB0AC",
}
#: Breakdown parts: colour and label of each (exposed communication and exposed memory traffic differ).
PARTS: dict[str, tuple[str, str]] = {
    "compute_ns": ("#4C78A8", "compute"),
    "comm_exposed_ns": ("#F58518", "exposed communication"),
    "memory_exposed_ns": ("#54A24B", "exposed memory copies/sets"),
    "idle_ns": ("#BAB0AC", "idle"),
    "comm_overlapped_ns": ("#FFBF79", "communication hidden behind compute"),
    "bubble_ns": ("#E45756", "bubble"),
    "work_ns": ("#4C78A8", "work"),
}
#: Colours of the rest of the palette (severities, before/after).
SEVERITY_COLORS = {"high": "#B91C1C", "medium": "#D97706", "low": "#2563EB", "info": "#6B7280"}



def severity_color(severity: str | None) -> str:
    """The colour of a severity (:data:`SEVERITY_COLORS`; grey when unknown)."""
    return SEVERITY_COLORS.get(severity or "", "#7F7F7F")


_AXIS = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", ticks="", title=dict(standoff=15), zerolinecolor="#EBF0F8",
             automargin=True, zerolinewidth=2)
#: The look of every figure: plotly_white's layout essentials. Plotly's own named templates cost ~90 ms of
#: validation per figure (0.7 s for the first) and ~10 kB of JSON each; this one costs nothing measurable.
TEMPLATE = go.layout.Template(
    layout=dict(autotypenumbers="strict", font=dict(color="#2a3f5f"), hovermode="closest",
                hoverlabel=dict(align="left"), paper_bgcolor="white", plot_bgcolor="white", xaxis=_AXIS, yaxis=_AXIS,
                colorway=["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880"]),
    data=dict(bar=[go.Bar(marker=dict(line=dict(color="white", width=0.5)))]),
)


def _figure(data: Any = None) -> go.Figure:
    """A new figure with :data:`TEMPLATE` (given at construction, so plotly's default template is never loaded)."""
    return go.Figure(data=data, layout=dict(template=TEMPLATE))


def _base_layout(fig: go.Figure, *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Title, height, legend and margins. The margins leave room for the tick labels and axis titles these
    figures have, so plotly's automargin (on, as a safety net) has nothing to add: when it must grow a margin it
    draws the figure twice (measured in chromium: ~40 % of a figure's drawing time)."""
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=100, r=20, t=70 if title else 40, b=60),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        title_x=0, title_y=0.98, title_yanchor="top",
    )
    return fig


def empty_figure(message: str, *, height: int = 240) -> go.Figure:
    """A blank figure that says ``message`` (nothing to show, or an analysis that is not available)."""
    fig = _figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _base_layout(fig, height=height)


# --------------------------------------------------------------------------------------------------- timeline


def _segments(frame: pl.DataFrame, lane: pl.Expr, origin: int, text: pl.Expr,
              window: tuple[int, int] | None = None) -> tuple[np.ndarray, list, np.ndarray]:
    """x/y/text arrays drawing each row as a horizontal segment (NaN x separates segments).

    x is in ms since ``origin``, clipped to ``window`` (a span that starts before the window is drawn from its
    edge); y holds lane labels (mapped to numbers by the caller); the hover text sits on the first point of each
    segment only. numpy arrays keep plotly's validation and the JSON (base64) cheap.
    """
    if frame.is_empty():
        return np.empty(0), [], np.empty(0, dtype=str)
    s, e = pl.col("start"), pl.col("end")
    if window is not None:
        s, e = s.clip(window[0], window[1]), e.clip(window[0], window[1])
    d = frame.select(
        ((s - origin) / 1e6).alias("x0"),
        ((e - origin) / 1e6).alias("x1"),
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


def _dur(e: pl.Expr | str) -> pl.Expr:
    """A duration in ns as text (hover texts), as :func:`workbench.format.duration` writes it."""
    return (pl.col(e) if isinstance(e, str) else e).map_elements(duration, return_dtype=pl.String)


#: Colours of the micro-batch phases.
PHASE_COLORS = {"forward": "#0E7490", "backward": "#7C3AED", "idle": "#E5E7EB"}


def timeline_figure(
    view: tl.TimelineView,
    *,
    origin: int,
    collectives: pl.DataFrame | None = None,
    compiles: pl.DataFrame | None = None,
    steps: pl.DataFrame | None = None,
    microbatches: pl.DataFrame | None = None,
    waits: pl.DataFrame | None = None,
    lanes: list[str] | None = None,
    uirevision: str = "timeline",
    title: str | None = None,
) -> go.Figure:
    """A per-rank, per-stream timeline of the reduced spans of ``view``, in ms since ``origin``.

    Steps (``STEPS`` rows, numbered when few enough are visible), micro-batches (:func:`microbatch_ranges`,
    labelled ``F3``/``B3``), collectives (``COLLECTIVES`` rows) and compiles (``COMPILES`` rows) get a lane per
    rank; everything overlapping the window is drawn, clipped to its edges. ``waits`` (``rank``, ``start``,
    ``end``, ``text``) are drawn as labelled boxes over the waiting rank's collective lane ("rank 0 waits here for
    rank 1's compile"). ``lanes`` (:func:`tl.timeline_lanes`) fixes the lanes shown, so they do not change with the
    zoom. ``uirevision`` keeps the user's zoom across updates.
    """
    lo, hi = view.start, view.end
    win = (lo, hi)
    fig = _figure()
    seen: set[str] = set()

    def in_window(f: pl.DataFrame | None, s: str = "start", e: str = "end") -> pl.DataFrame:
        if f is None or f.is_empty():
            return pl.DataFrame()
        return f.filter((pl.col(e) >= lo) & (pl.col(s) <= hi))

    # steps first: they sit at the top of each rank's group of lanes
    st = in_window(tl.drawn_steps(steps))
    if not st.is_empty():
        st = st.sort("rank", "start").head(20_000)
        label = _lane_label(pl.col("rank"), "steps")
        for parity, color in ((0, "#D6D1CC"), (1, "#B3ABA5")):  # alternate shades show step edges
            part = st.filter(pl.col("step").fill_null(0) % 2 == parity)
            if part.is_empty():
                continue
            x, y, t = _segments(part, label, origin, pl.concat_str(
                [pl.lit("step "), pl.col("step").cast(pl.String), pl.lit(" · "), _dur("dur")]), win)
            seen.update(v for v in y[0::3])
            fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name="steps", hoverinfo="text",
                                     legendgroup="steps", showlegend=parity == 0, line=dict(color=color, width=12)))
        if st.height <= 60 * max(1, st["rank"].n_unique()):
            mid = st.select(
                ((pl.max_horizontal(pl.col("start"), pl.lit(lo)) + pl.min_horizontal(pl.col("end"), pl.lit(hi))) / 2
                 - origin) / 1e6, label.alias("lane"), pl.col("step").cast(pl.String))
            fig.add_trace(go.Scatter(x=mid["start"].to_numpy(), y=mid["lane"].to_list(), text=mid["step"].to_list(),
                                     mode="text", textfont=dict(size=10, color="#1f2937"), hoverinfo="skip",
                                     showlegend=False, name="step numbers"))

    sp = view.spans
    if not sp.is_empty():
        lane = _lane_label(pl.col("rank"), pl.concat_str([pl.lit("stream "), pl.col("stream").cast(pl.String)]))
        text = pl.when(pl.col("exact")).then(
            pl.concat_str([pl.col("name").str.slice(0, 60), pl.lit(" · "), _dur("busy_ns")])
        ).otherwise(
            pl.concat_str([pl.col("kernel_class").fill_null("other"), pl.lit(" · "), pl.col("count").cast(pl.String),
                           pl.lit(" kernels · "), _dur("busy_ns"), pl.lit(" busy")])
        )
        for cls in [*KERNEL_CLASSES, None]:
            part = sp.filter(pl.col("kernel_class").is_null()) if cls is None else sp.filter(pl.col("kernel_class") == cls)
            if part.is_empty():
                continue
            x, y, t = _segments(part, lane, origin, text, win)
            seen.update(v for v in y[0::3])
            fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name=cls or "other", hoverinfo="text",
                                     line=dict(color=CLASS_COLORS.get(cls or "", "#888"), width=14)))

    mb = in_window(microbatches)
    if not mb.is_empty():
        label = _lane_label(pl.col("rank"), "micro-batches")
        for phase in ("forward", "backward"):
            part = mb.filter(pl.col("phase") == phase)
            if part.is_empty():
                continue
            tag = pl.concat_str([pl.lit("F" if phase == "forward" else "B"), pl.col("mb").cast(pl.String)])
            x, y, t = _segments(part, label, origin, pl.concat_str(
                [pl.lit(f"{phase} micro-batch "), pl.col("mb").cast(pl.String), pl.lit(" · "),
                 _dur(pl.col("end") - pl.col("start"))]), win)
            seen.update(v for v in y[0::3])
            fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name=phase, hoverinfo="text",
                                     line=dict(color=PHASE_COLORS[phase], width=14)))
            # a label only where the range is wide enough to hold it (~22 px of a ~1,100 px plot)
            wide = part.filter((pl.min_horizontal("end", pl.lit(hi)) - pl.max_horizontal("start", pl.lit(lo)))
                               >= (hi - lo) * 22 / 1100)
            if 0 < wide.height <= 400:
                mid = wide.select(((pl.max_horizontal("start", pl.lit(lo)) + pl.min_horizontal("end", pl.lit(hi))) / 2
                                   - origin) / 1e6, label.alias("lane"), tag.alias("tag"))
                fig.add_trace(go.Scatter(x=mid["start"].to_numpy(), y=mid["lane"].to_list(), text=mid["tag"].to_list(),
                                         mode="text", textfont=dict(size=9, color="#ffffff"), hoverinfo="skip",
                                         showlegend=False))

    co = pl.DataFrame()
    if collectives is not None and not collectives.is_empty():
        co = collectives.with_columns(
            pl.coalesce("kernel_start", "start").alias("_s"), pl.max_horizontal("kernel_end", "end").alias("_e")
        ).filter((pl.col("_e") >= lo) & (pl.col("_s") <= hi))
    if not co.is_empty():
        co = co.select("rank", pl.col("_s").alias("start"), pl.col("_e").alias("end"),
                       pl.col("collective").cast(pl.String), "pg_name", "seq", "bytes")
        if co.height > tl.EXACT_LIMIT:
            merged = tl.reduce_timeline(
                co.with_columns(pl.lit(0, pl.Int64).alias("stream"), pl.col("collective").alias("name"),
                                pl.lit("communication").alias("kernel_class"),
                                (pl.col("end") - pl.col("start")).alias("dur")),
                start=lo, end=hi, exact_limit=0,
            )
            text = pl.concat_str([pl.col("count").cast(pl.String), pl.lit(" collectives")])
            x, y, t = _segments(merged, _lane_label(pl.col("rank"), "collectives"), origin, text, win)
        else:
            text = pl.concat_str([
                pl.col("collective"), pl.lit(" #"), pl.col("seq").cast(pl.String), pl.lit(" pg "),
                pl.col("pg_name").fill_null("?"), pl.lit(" · "), (pl.col("bytes").fill_null(0) / 1e6).round(2)
                .cast(pl.String), pl.lit(" MB · "), _dur(pl.col("end") - pl.col("start")),
            ])
            x, y, t = _segments(co, _lane_label(pl.col("rank"), "collectives"), origin, text, win)
        seen.update(v for v in y[0::3])
        fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name="collectives", hoverinfo="text",
                                 line=dict(color=CLASS_COLORS["collective"], width=10)))

    cp = pl.DataFrame()
    if compiles is not None and not compiles.is_empty():
        cp = compiles.filter(pl.col("start").is_not_null()).with_columns(pl.coalesce("end", "start").alias("end"))
        cp = in_window(cp)
    if not cp.is_empty():
        label = _lane_label(pl.col("rank"), "compile")
        hover = pl.concat_str([
            pl.lit("compile "), pl.col("compile_id").fill_null("?"), pl.lit(" · "),
            pl.col("cause").fill_null("?"), pl.lit(" · "),
            _dur("duration_ns").fill_null("unknown time"),
            pl.when(pl.col("step").is_not_null()).then(
                pl.concat_str([pl.lit(" · step "), pl.col("step").cast(pl.String)])).otherwise(pl.lit("")),
        ])
        x, y, t = _segments(cp, label, origin, hover, win)
        seen.update(v for v in y[0::3])
        fig.add_trace(go.Scatter(x=x, y=y, text=t, mode="lines", name="compiling", hoverinfo="text",
                                 line=dict(color=CLASS_COLORS["compile"], width=8)))

    order = lanes if lanes else sorted(seen, key=tl.lane_sort_key)
    order = order + sorted(seen - set(order), key=tl.lane_sort_key)
    index = {label: i for i, label in enumerate(order)}
    for tr in fig.data:  # lane labels → numbers (short JSON); the axis shows the labels
        if tr.y is not None:
            tr.y = np.array([np.nan if v is None else index[v] for v in tr.y], dtype=np.float32)

    w = in_window(waits)
    for row in (w.sort("start").head(12).iter_rows(named=True) if not w.is_empty() else []):
        lane_name = f"rank {row['rank']} · collectives"
        if lane_name not in index:
            lane_name = f"rank {row['rank']} · steps"
        if lane_name not in index:
            continue
        y0 = index[lane_name]
        x0 = (max(row["start"], lo) - origin) / 1e6
        x1 = (min(row["end"], hi) - origin) / 1e6
        fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0 - 0.45, y1=y0 + 0.45, line=dict(color="#B91C1C", width=1.5),
                      fillcolor="rgba(220, 38, 38, 0.12)", layer="above")
        # the label runs into the plot from the box's nearer edge, so one near the window's right end is not cut
        right = (x0 + x1) / 2 > ((lo + hi) / 2 - origin) / 1e6
        fig.add_annotation(x=x1 if right else x0, y=y0 - 0.45, text=row["text"], showarrow=False,
                           xanchor="right" if right else "left", yanchor="bottom",
                           font=dict(size=11, color="#991B1B"), bgcolor="rgba(255,255,255,0.85)",
                           bordercolor="#B91C1C", borderwidth=1, borderpad=2)

    fig.update_yaxes(tickvals=list(range(len(order))), ticktext=order, range=[len(order) - 0.5, -0.5],
                     fixedrange=True, showgrid=False, zeroline=False)
    fig.update_xaxes(title="time since the run's first recorded activity", range=[(lo - origin) / 1e6, (hi - origin) / 1e6],
                     showgrid=True, ticksuffix=" ms", exponentformat="none", separatethousands=True)
    _base_layout(fig, title=title, height=max(240, 110 + 26 * len(order)))
    fig.update_layout(margin=dict(l=170, r=40, t=70 if title else 50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0))
    fig.update_layout(uirevision=uirevision, hovermode="closest", dragmode="zoom",
                      meta={"exact": view.exact, "visible_kernels": view.visible_kernels, "spans": view.spans.height,
                            "lanes": order})
    return fig


def run_timeline(run: Any, *, start: int | None = None, end: int | None = None, ranks: list[int] | None = None,
                 width_px: int = tl.DEFAULT_WIDTH_PX, step: int | None = None) -> go.Figure:
    """The app's Timeline figure for a :class:`workbench.Run` in one call (notebooks, reports).

    ``start``/``end`` are absolute ns, or ``step`` picks one step (``None``: where the run's activity is); x is in
    ms since the run's first recorded activity.
    """
    sel = (lambda f: f.filter(pl.col("rank").is_in(ranks))) if ranks else (lambda f: f)
    steps, colls = sel(run.steps), sel(run.collectives)
    if step is not None and start is None and end is None:
        b = tl.time_bounds(tl.drawn_steps(steps).filter(pl.col("step") == step))
        if b:
            start, end = b
    if start is None and end is None:
        b = tl.activity_bounds(sel(run.kernels), steps, colls)
        if b:
            start, end = b
    index = tl.TimelineIndex(run.kernels)
    view = tl.timeline_view(index, start=start, end=end, ranks=ranks, width_px=width_px)
    origin = (tl.activity_bounds(run.kernels, run.steps, run.collectives) or (0, 0))[0]
    mb = sel(tl.run_microbatches(run))
    compiles = classify_compiles(sel(run.compiles))   # each compile's cause, for its hover
    lanes = tl.timeline_lanes(index, ranks=ranks, steps=tl.drawn_steps(steps), collectives=colls,
                              compiles=compiles, microbatches=mb)
    return timeline_figure(view, origin=origin, collectives=colls, compiles=compiles, steps=steps,
                           microbatches=mb, lanes=lanes, title=view.describe())


# ------------------------------------------------------------------------------------------------ step time


def _nice_log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick values 1-2-5 × 10^k between ``lo`` and ``hi`` (ms) with labels that carry the unit
    (``"5 ms"``, ``"1 s"``): log axes never read "5 2 1000 5 2"."""
    lo, hi = max(lo, 1e-6), max(hi, lo * 1.01)
    vals: list[float] = []
    k = int(np.floor(np.log10(lo))) - 1
    while 10.0 ** k <= hi * 10:
        for m in (1, 2, 5):
            v = m * 10.0 ** k
            if lo / 1.5 <= v <= hi * 1.5:
                vals.append(v)
        k += 1
    if len(vals) > 9:  # too dense: powers of ten only
        vals = [v for v in vals if abs(np.log10(v) - round(np.log10(v))) < 1e-9] or vals
    return vals, [axis_ms(v) for v in vals]


def step_time_figure(steps: pl.DataFrame, *, title: str | None = "Step period per rank (data loading included)"
                     ) -> go.Figure:
    """Per rank, the time from each step's start to the next (ms, one line per rank): what a step really takes,
    data loading wait included, so a rank that waits for its data shows. Log scale (ticks 1-2-5 with units) when a
    compile step would flatten the rest."""
    per = metrics.step_periods(steps)
    if per.is_empty():
        return empty_figure("no steps recorded")
    fig = _figure()
    for rank in sorted(per["rank"].unique().to_list()):
        r = per.filter(pl.col("rank") == rank).sort("step")
        hover = [f"rank {rank} · step {st}<br>period {duration(p)}<br>step body {duration(b)}"
                 + (f"<br>data wait before the next step {duration(w)}" if w is not None else "")
                 for st, p, b, w in zip(r["step"].to_list(), r["period_ns"].to_list(), r["dur_ns"].to_list(),
                                        r["data_wait_ns"].to_list())]
        fig.add_trace(go.Scatter(x=r["step"].to_list(), y=(r["period_ns"] / 1e6).to_list(), mode="lines+markers",
                                 name=f"rank {rank}", marker=dict(size=5), text=hover, hoverinfo="text"))
    fig.update_xaxes(title="step", dtick=1 if per["step"].n_unique() <= 30 else None, tickformat="d")
    vals = (per["period_ns"] / 1e6).drop_nulls()
    med = vals.median()
    if med and vals.max() > 20 * med:  # compile-time first steps would flatten the rest
        tv, tt = _nice_log_ticks(float(vals.min()), float(vals.max()))
        fig.update_yaxes(title="step period (log scale)", type="log", tickvals=tv, ticktext=tt)
    else:
        fig.update_yaxes(title="step period", rangemode="tozero", ticksuffix=" ms")
    return _base_layout(fig, title=title, height=380)


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
    fig = _figure()
    xs = [str(v) for v in frame[x].to_list()]
    for p in parts:
        if p not in frame.columns:
            continue
        vals = (frame[p].cast(pl.Float64) / scale).to_list()
        color, label = PARTS.get(p, (None, p.replace("_ns", "").replace("_pct", " %").replace("_", " ")))
        hover = f"{label}: %{{{'x' if horizontal else 'y'}:,.2f}} {unit}<extra>{x_title or x} %{{{'y' if horizontal else 'x'}}}</extra>"
        if horizontal:
            fig.add_trace(go.Bar(y=xs, x=vals, name=label, orientation="h", marker_color=color, hovertemplate=hover))
        else:
            fig.add_trace(go.Bar(x=xs, y=vals, name=label, marker_color=color, hovertemplate=hover))
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    axis = dict(title=unit, ticksuffix=f" {unit}" if unit in ("ms", "s", "%") else None)
    if horizontal:
        fig.update_xaxes(**axis)
        fig.update_yaxes(title=x_title or x, type="category")
    else:
        fig.update_yaxes(**axis)
        fig.update_xaxes(title=x_title or x, type="category")
    return _base_layout(fig, title=title, height=380)


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
    log_color: bool = False,
) -> go.Figure:
    """A ``y`` × ``x`` heatmap of ``z`` from a long frame (one row per cell); missing cells stay empty.

    ``log_color``: colour by log10 of the value (ticks on the colour bar in the value's unit, 1-2-5), so a 30 ms
    cell stays visible next to a 2.5 s one; values at or below 1/1000 of the largest share the lowest colour.
    """
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
    colorbar: dict[str, Any] = dict(title=unit)
    zplot: list[list[Any]] = grid
    hover_z = "%{z:,.2f}"
    if log_color:
        flat = [v for row in grid for v in row if v is not None and v > 0]
        top = max(flat) if flat else 1.0
        floor = top / 1000.0
        zplot = [[None if v is None else float(np.log10(max(v, floor))) for v in row] for row in grid]
        tv, tt = _nice_log_ticks(floor, top)
        colorbar.update(tickvals=[float(np.log10(v)) for v in tv], ticktext=tt,
                        title=f"{unit} (log scale)" if unit else "log scale")
        hover_z = "%{customdata:,.2f}"
    fig = _figure(go.Heatmap(
        z=zplot, x=[str(v) for v in xs], y=[str(v) for v in ys], colorscale=colorscale,
        colorbar=colorbar, text=tgrid if text else None, customdata=grid if log_color else None,
        hovertemplate=f"{y_title or y} %{{y}}<br>{x_title or x} %{{x}}<br>{hover_z} {unit}"
        + ("<br>%{text}" if text else "") + "<extra></extra>",
        xgap=1, ygap=1,
    ))
    fig.update_xaxes(title=x_title or x, type="category")
    fig.update_yaxes(title=y_title or y, type="category", autorange="reversed")
    _base_layout(fig, title=title, height=max(260, 120 + 28 * len(ys)))
    return fig.update_layout(margin=dict(r=150))  # the colour bar and its title


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
    y_title: str | None = None,
    percent: bool = False,
) -> go.Figure:
    """Lines of ``y`` over ``x``, one per value of ``color`` (values divided by ``scale``). ``percent``: ``y`` is
    a percentage (0–100) and the axis runs 0–100 % whatever the values."""
    if frame is None or frame.is_empty():
        return empty_figure("nothing to show")
    fig = _figure()
    groups = [(None, frame)] if color is None else [
        (k, frame.filter(pl.col(color) == k)) for k in sorted(frame[color].unique().drop_nulls().to_list())
    ]
    for key, part in groups:
        part = part.sort(x)
        fig.add_trace(go.Scatter(x=part[x].to_list(), y=(part[y].cast(pl.Float64) / scale).to_list(),
                                 mode="lines+markers", marker=dict(size=5),
                                 name=f"{color} {key}" if color else (y_title or y)))
    xs = frame[x]
    integer_x = xs.dtype.is_integer()
    fig.update_xaxes(title=x_title or x, dtick=1 if integer_x and xs.n_unique() <= 30 else None,
                     tickformat="d" if integer_x else None)
    if percent:
        fig.update_yaxes(title=y_title or unit, range=[0, 100], ticksuffix=" %")
    else:
        fig.update_yaxes(title=y_title or unit, rangemode="tozero",
                         ticksuffix=f" {unit}" if unit in ("ms", "s") else None)
    return _base_layout(fig, title=title, height=340)


# ------------------------------------------------------------------------------------- domain-shaped figures


def findings_figure(findings: pl.DataFrame, *, top: int = 15, title: str | None = "Root causes by the time they cost"
                    ) -> go.Figure:
    """Horizontal bars of ``cost_ns`` for the top findings (``FINDINGS`` rows, e.g. the root causes), coloured by
    severity, each labelled with its cost and whether it was measured or estimated (the message on hover):
    :func:`workbench.analyses.summary.findings_costs` drawn by plotly."""
    bars = findings_costs(findings, top=top)
    if bars.is_empty():
        return empty_figure("no findings")
    costs = bars["cost_ns"].to_list()
    hover = ["<br>".join(_wrap(m, 90)) for m in bars["message"].to_list()]
    fig = _figure(go.Bar(
        y=bars["label"].to_list(), x=[c / 1e6 for c in costs], orientation="h", text=bars["text"].to_list(),
        textposition="outside", cliponaxis=False, marker_color=[severity_color(s) for s in bars["severity"].to_list()],
        customdata=hover, hovertemplate="%{customdata}<extra>%{y}</extra>",
    ))
    top_ms = max(costs) / 1e6 if costs else 1
    fig.update_xaxes(title="cost (ms of step time)", range=[0, max(top_ms * 1.3, 1e-3)], ticksuffix=" ms",
                     separatethousands=True)
    fig.update_yaxes(autorange="reversed", type="category", automargin=True)
    return _base_layout(fig, title=title, height=max(220, 90 + 34 * bars.height))


def _wrap(text: str, width: int) -> list[str]:
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    return lines + ([cur] if cur else [])


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
        pl.col("duration_ns").fill_null(0).sum().alias("ns"),
    ).with_columns(
        pl.lit(1).alias("present"),
        pl.concat_str([pl.lit("cause "), pl.col("cause").fill_null("?"), pl.lit(" · step "),
                       pl.col("step").cast(pl.String).fill_null("?"), pl.lit(" · "),
                       _dur("ns")]).alias("text"),
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
    return fig.update_layout(margin=dict(r=20))  # no colour bar


def diff_figure(diff: pl.DataFrame, *, metric: str, before: str, after: str, scale: float = 1.0, unit: str = "",
                title: str | None = None) -> go.Figure:
    """Grouped bars of ``before`` and ``after`` values per ``metric`` row of a diff frame."""
    if diff is None or diff.is_empty():
        return empty_figure("nothing to compare")
    xs = [str(v) for v in diff[metric].to_list()]
    fig = _figure([
        go.Bar(x=xs, y=(diff[before].cast(pl.Float64) / scale).to_list(), name="before", marker_color="#9ECAE1"),
        go.Bar(x=xs, y=(diff[after].cast(pl.Float64) / scale).to_list(), name="after", marker_color="#3182BD"),
    ])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=unit)
    fig.update_xaxes(type="category")
    _base_layout(fig, title=title, height=360)
    widest = max((len(x) for x in xs), default=0)  # long category labels wrap or tilt: room for them
    return fig.update_layout(margin=dict(r=40, b=120 if widest > 12 else 60))


def collective_skew_figure(matched: pl.DataFrame, *,
                           title: str | None = "Each rank's wait for the last rank at each collective") -> go.Figure:
    """Rank × collective-instance heatmap of each rank's wait (ms) for the last rank to arrive, on a log colour
    scale so the typical 30 ms waits show next to a 2.5 s stall."""
    cells = skew_cells(matched)
    if cells.is_empty():
        return empty_figure("no collective seen on more than one rank")
    return heatmap_figure(cells, x="instance", y="rank", z="wait_ns", scale=1e6, unit="ms", text="text",
                          x_title="collective instance (in time order)", y_title="rank", title=title,
                          log_color=True, colorscale="YlOrRd")


def arrival_offset_figure(matched: pl.DataFrame, *, title: str | None = "When each rank reaches each collective, "
                          "relative to the others") -> go.Figure:
    """Each rank's arrival offset at every collective over the run (ms; positive = later than the median rank),
    on a symmetric log-like scale: the mirror image of two ranks shows who waits for whom."""
    off = arrival_offsets(matched)
    if off.is_empty():
        return empty_figure("no collective seen on more than one rank")
    fig = _figure()
    for rank in sorted(off["rank"].unique().to_list()):
        r = off.filter(pl.col("rank") == rank)
        fig.add_trace(go.Scatter(
            x=r["t_s"].to_list(), y=(r["offset_ns"] / 1e6).to_list(), mode="lines+markers", name=f"rank {rank}",
            marker=dict(size=6), customdata=[f"step {s} · {c}" for s, c in zip(r["step"].to_list(), r["collective"].to_list())],
            hovertemplate=f"rank {rank}<br>%{{customdata}}<br>%{{y:,.2f}} ms vs the median rank<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="#9CA3AF", width=1))
    fig.update_xaxes(title="time since the first collective", ticksuffix=" s")
    fig.update_yaxes(title="arrival offset (+ later, − earlier than the median rank)", ticksuffix=" ms",
                     zeroline=False, separatethousands=True)
    return _base_layout(fig, title=title, height=380)


# ------------------------------------------------------------------------------------------------- pipeline


def bubble_figure(bubbles: pl.DataFrame, *, theory_pct: float | None = None,
                  title: str | None = "Pipeline bubble per stage") -> go.Figure:
    """Per stage (rank): the median share of the step spent in neither forward nor backward work (%), with the
    GPipe theory ``(S-1)/(M+S-1)`` as a line when given."""
    if bubbles is None or bubbles.is_empty():
        return empty_figure("no pipeline micro-batches found")
    per = bubbles_analysis.stage_summary(bubbles)
    xs = [f"stage {r} (rank {r})" for r in per["rank"].to_list()]
    fig = _figure(go.Bar(
        x=xs, y=per["bubble_pct"].to_list(), marker_color=PARTS["bubble_ns"][0],
        text=[f"{percent(p)} · {duration(b)} a step" for p, b in
              zip(per["bubble_pct"].to_list(), per["bubble_ns"].to_list())],
        textposition="outside", cliponaxis=False, name="measured bubble",
        hovertemplate="%{x}<br>bubble %{y:.1f} % of the analysed step<extra></extra>"))
    if theory_pct is not None:
        fig.add_hline(y=theory_pct, line=dict(color="#111827", dash="dash"),
                      annotation_text=f"GPipe theory {percent(theory_pct)}", annotation_position="top left")
    top = max([*per["bubble_pct"].drop_nulls().to_list(), theory_pct or 0, 1])
    fig.update_yaxes(title="bubble (median over steps)", ticksuffix=" %", range=[0, min(100, top * 1.35)])
    fig.update_xaxes(type="category")
    return _base_layout(fig, title=title, height=340)
