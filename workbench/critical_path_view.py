"""Figures of the critical path across ranks (docs/critical-path.md), for the HTML report, the app and notebooks.

* :func:`critical_path_figure` — the timeline: one row per rank over a span of steps; each rank's steps, its waits
  at the collectives coloured by the rank it waited for (labelled ``waits for r<C>``; grey: a wait in noise), the
  late ranks' own time before the arrivals they were late at (coloured by what they were doing), and the critical
  path itself: a line that runs through, at every collective, the rank that arrived last.
* :func:`who_held_whom_figure` — per step (columns) and late rank (rows): the time it held the others back (the
  longest wait of any other rank for it); hovering a cell lists every other rank's wait.
* :func:`wait_matrix_figure` — victim × culprit over the chosen steps: who waited how long for whom.

Each takes a :class:`workbench.analyses.critical_path.CriticalPath` and returns a plotly ``Figure``.

Example:
    >>> from workbench.analyses.critical_path import critical_path_of         # doctest: +SKIP
    >>> critical_path_figure(critical_path_of(run), steps=(3, 6)).show()     # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

#: Colour of each rank waited for (cycled); noise waits are grey.
RANK_COLORS = ("#E45756", "#4C78A8", "#F58518", "#54A24B", "#B279A2", "#72B7B2", "#EECA3B", "#9D755D")
NOISE_COLOR = "#C7C7C7"
STEP_COLOR = "#EEEEEE"
PATH_COLOR = "#111111"
#: Colour of each activity category of a late rank's time.
CATEGORY_COLORS = {"compile": "#D62728", "data": "#8C564B", "sync": "#9467BD", "optimizer": "#17BECF",
                   "collective": "#E3B505", "gc": "#7F7F7F", "range": "#BCBD22", "cpu_op": "#1F77B4",
                   "python": "#2CA02C", "profiler": "#AEC7E8", "outside_step": "#FF9896", "untraced": "#FFBB78"}
#: At most this many steps are drawn on the timeline (the rest is in the matrix).
MAX_TIMELINE_STEPS = 12
#: At most this many waits are labelled with the rank they waited for (the longest).
MAX_MARKS = 60


def _color(rank: int | None) -> str:
    return NOISE_COLOR if rank is None else RANK_COLORS[int(rank) % len(RANK_COLORS)]


def _fmt(ns: float) -> str:
    from workbench.analyses.findings import format_ns

    return format_ns(ns)


def _empty(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(template="plotly_white", height=200, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def _bars(fig: go.Figure, rows: list[tuple[float, float, int, str]], color: str, name: str, width: float,
          origin: int, legend: bool = True) -> None:
    """Horizontal bars (start ns, end ns, rank, hover text) as one trace of line segments per colour."""
    if not rows:
        return
    xs: list[Any] = []
    ys: list[Any] = []
    texts: list[Any] = []
    for a, b, r, text in rows:
        xs += [(a - origin) / 1e6, (b - origin) / 1e6, None]
        ys += [r, r, None]
        texts += [text, text, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"color": color, "width": width}, name=name,
                             hovertext=texts, hoverinfo="text", showlegend=legend))


def critical_path_figure(cp: Any, *, steps: tuple[int, int] | None = None, steps_frame: pl.DataFrame | None = None,
                         title: str | None = "The critical path across ranks") -> go.Figure:
    """The timeline of ``steps`` (first, last; default: the steps with the most waiting for a late rank, at most
    :data:`MAX_TIMELINE_STEPS`) (module docstring). ``steps_frame``: the run's steps, drawn under each rank."""
    inst = cp.instances
    if inst.is_empty():
        return _empty("no collectives recorded: no critical path")
    if steps is None:
        steps = _busiest_steps(cp)
    lo, hi = steps
    mine = inst.filter(pl.col("step").is_between(lo, hi))
    if mine.is_empty():
        return _empty(f"no collective in steps {lo}-{hi}")
    origin = int(mine["exit_prev"].drop_nulls().min() or mine["eff_arrival"].min())
    fig = go.Figure()
    if steps_frame is not None and not steps_frame.is_empty():
        st = steps_frame.filter(pl.col("step").is_between(lo, hi))
        if "source" in st.columns:
            st = st.filter(pl.col("source").cast(pl.String) == "collector")
        _bars(fig, [(a, b, r, f"rank {r} step {s}") for r, s, a, b in st.select("rank", "step", "start", "end")
                    .iter_rows() if a is not None and b is not None], STEP_COLOR, "step", 26, origin)
    # the late ranks' own time before the arrival they were late at, by what they were doing
    lay = cp.layers.filter(pl.col("step").is_between(lo, hi))
    if not lay.is_empty():
        key = ["pg_name", "key_step", "seq"]
        own = lay.join(inst.select(*key, culprit="rank", exit_prev="exit_prev", eff="eff_arrival"),
                       on=[*key, "culprit"], how="left")
        top = (cp.attribution.group_by(["pg_name", "seq", "culprit", "category"]).agg(pl.col("ns").sum())
               .sort("ns", descending=True).unique(["pg_name", "seq", "culprit"], keep="first"))
        own = own.join(top.select("pg_name", "seq", "culprit", "category"), on=["pg_name", "seq", "culprit"],
                       how="left")
        by_cat: dict[str, list[tuple[float, float, int, str]]] = {}
        for r in own.iter_rows(named=True):   # drawn over the layer: the time the others waited for it
            cat = r["category"] or "untraced"
            by_cat.setdefault(cat, []).append((r["layer_start"], r["layer_end"], r["culprit"],
                                               f"rank {r['culprit']} late by {_fmt(r['lateness_ns'])} at "
                                               f"{r['op']} #{r['seq']} (step {r['step']}): {cat}"))
        for cat, rows in by_cat.items():
            _bars(fig, rows, CATEGORY_COLORS.get(cat, "#999999"), f"late rank: {cat}", 10, origin)
    # every wait, by whom it was for
    w = cp.waits.filter(pl.col("step").is_between(lo, hi) & (pl.col("ns") > 0))
    for (culprit,), g in w.group_by(["culprit"], maintain_order=True):
        rows = [(a, b, v, f"rank {v} waits {_fmt(n)} for " + (f"rank {culprit}" if culprit is not None else
                                                              "nobody in particular (noise)") + f" (step {s})")
                for v, a, b, n, s in g.select("victim", "start", "end", "ns", "step").iter_rows()]
        _bars(fig, rows, _color(culprit), f"waits for r{culprit}" if culprit is not None else "wait in noise", 14,
              origin)
    # the critical path: through the last arrival of every instance
    path_x: list[float] = []
    path_y: list[int] = []
    for _, g in mine.sort("eff_arrival").group_by(["pg_name", "key_step", "seq"], maintain_order=True):
        last = g.sort("eff_arrival").row(-1, named=True)
        start = last["exit_prev"] if last["exit_prev"] is not None else last["eff_arrival"]
        path_x += [(start - origin) / 1e6, (last["eff_arrival"] - origin) / 1e6]
        path_y += [last["rank"], last["rank"]]
    order = sorted(range(len(path_x)), key=lambda i: path_x[i])
    fig.add_trace(go.Scatter(x=[path_x[i] for i in order], y=[path_y[i] for i in order], mode="lines",
                             line={"color": PATH_COLOR, "width": 2, "dash": "dot"}, name="critical path",
                             hoverinfo="skip"))
    marks = w.filter(pl.col("culprit").is_not_null()).sort("ns", descending=True).head(MAX_MARKS)
    for v, c, a, b in marks.select("victim", "culprit", "start", "end").iter_rows():   # each wait says for whom
        fig.add_annotation(x=((a + b) / 2 - origin) / 1e6, y=v, text=f"waits for r{c}", showarrow=False,
                           font={"size": 9, "color": "white"})
    ranks = sorted(mine["rank"].unique().to_list())
    fig.update_layout(template="plotly_white", title=title, height=160 + 48 * len(ranks),
                      xaxis={"title": f"ms from the start of step {lo}"},
                      yaxis={"title": "rank", "tickmode": "array", "tickvals": ranks,
                             "ticktext": [f"rank {r}" for r in ranks], "autorange": "reversed"},
                      legend={"orientation": "h", "y": -0.25}, margin={"l": 60, "r": 20, "t": 50, "b": 40})
    return fig


def _busiest_steps(cp: Any) -> tuple[int, int]:
    """The span of at most :data:`MAX_TIMELINE_STEPS` steps around the step with the most waiting for a late
    rank (else the first steps), the warm-up step left out where there are others (its first compiles would
    stretch the axis over the steps that show who held whom)."""
    st = sorted(cp.instances["step"].drop_nulls().unique().to_list())
    if not st:
        return 0, 0
    st = st[1:] if len(st) > 1 else st
    w = cp.waits.filter(pl.col("culprit").is_not_null() & pl.col("step").is_in(st))
    if w.is_empty():
        return st[0], st[min(len(st), MAX_TIMELINE_STEPS) - 1]
    top = int(w.group_by("step").agg(pl.col("ns").sum()).sort("ns", descending=True)["step"][0])
    half = MAX_TIMELINE_STEPS // 2
    lo = max(st[0], min(top - half, st[-1] - MAX_TIMELINE_STEPS + 1))
    return lo, min(st[-1], lo + MAX_TIMELINE_STEPS - 1)


def who_held_whom(cp: Any) -> pl.DataFrame:
    """Per step and late rank: ``held_ns`` (the longest wait of any other rank for it in that step) and ``waits``
    (every other rank's wait, as text). Columns: ``step``, ``culprit``, ``held_ns``, ``waits``."""
    w = cp.waits.filter(pl.col("culprit").is_not_null())
    if w.is_empty():
        return pl.DataFrame(schema={"step": pl.Int32, "culprit": pl.Int32, "held_ns": pl.Int64, "waits": pl.String})
    per = w.group_by("step", "culprit", "victim").agg(pl.col("ns").sum())
    return per.sort("victim").group_by("step", "culprit").agg(
        held_ns=pl.col("ns").max(),
        waits=pl.concat_str([pl.lit("rank "), pl.col("victim").cast(pl.String), pl.lit(" "),
                             (pl.col("ns") / 1e6).round(1).cast(pl.String), pl.lit(" ms")]).str.join(", "),
    ).sort("step", "culprit")


def who_held_whom_figure(cp: Any, *, title: str | None = "Who held whom back, per step") -> go.Figure:
    """The per-step matrix (module docstring)."""
    m = who_held_whom(cp)
    if m.is_empty():
        return _empty("no rank held the others back beyond the run's noise")
    steps = sorted(m["step"].unique().to_list())
    culprits = sorted(m["culprit"].unique().to_list())
    z = [[None] * len(steps) for _ in culprits]
    text = [[""] * len(steps) for _ in culprits]
    for s, c, held, waits in m.iter_rows():
        i, j = culprits.index(c), steps.index(s)
        z[i][j] = held / 1e6
        text[i][j] = f"step {s}: rank {c} held the others back {held / 1e6:.1f} ms<br>waits: {waits}"
    fig = go.Figure(go.Heatmap(z=z, x=[str(s) for s in steps], y=[f"rank {c}" for c in culprits],
                               hovertext=text, hoverinfo="text", colorscale="Reds", colorbar={"title": "ms"}))
    fig.update_layout(template="plotly_white", title=title, height=140 + 34 * len(culprits),
                      xaxis={"title": "step", "type": "category"}, yaxis={"title": "held back by"},
                      margin={"l": 80, "r": 20, "t": 50, "b": 40})
    return fig


def wait_matrix_figure(cp: Any, *, steps: tuple[int, int] | None = None,
                       title: str | None = "Who waited for whom (ms)") -> go.Figure:
    """Victim (rows) × the rank it waited for (columns), summed over ``steps`` (default: all); the last column is
    the wait in noise (nobody's)."""
    w = cp.waits
    if steps is not None:
        w = w.filter(pl.col("step").is_between(*steps))
    if w.is_empty():
        return _empty("no waits recorded")
    m = w.group_by("victim", "culprit").agg(pl.col("ns").sum())
    victims = sorted(m["victim"].unique().to_list())
    culprits = sorted(c for c in m["culprit"].unique().to_list() if c is not None)
    cols = [*culprits, None]
    z = [[0.0] * len(cols) for _ in victims]
    for v, c, n in m.iter_rows():
        z[victims.index(v)][cols.index(c)] = round(n / 1e6, 1)
    fig = go.Figure(go.Heatmap(z=z, x=[f"r{c}" if c is not None else "noise" for c in cols],
                               y=[f"rank {v}" for v in victims], text=z, texttemplate="%{text}",
                               colorscale="Blues", colorbar={"title": "ms"}))
    fig.update_layout(template="plotly_white", title=title, height=140 + 34 * len(victims),
                      xaxis={"title": "waited for"}, yaxis={"title": "rank"},
                      margin={"l": 80, "r": 20, "t": 50, "b": 40})
    return fig


__all__ = ["critical_path_figure", "wait_matrix_figure", "who_held_whom", "who_held_whom_figure"]
