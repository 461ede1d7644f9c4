"""The schedule of one pipeline step, drawn from what the bubble table measured (the app's Pipeline page and the
HTML report draw this one figure).

Each stage's row spans the step as the bubble analysis counts it (``bubbles.start``/``end``: on a GPU the rank's
device segment of the step), and the work drawn is the work it counted: on a GPU the union of the compute kernels
in that segment (each piece labelled with the micro-batch whose host range launched its first kernel), on a CPU
the forward/backward ranges. ``microbatches`` is :func:`workbench.timeline.run_microbatches` (each range with
its host ``host_start``/``host_end``). So the grey (idle) share of a row is that stage's bubble in the table.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from workbench import figures
from workbench.analyses.intervals import merge_intervals
from workbench.format import duration, percent

#: A micro-batch label is written in a piece at least this share of the step wide (narrower ones: hover only).
LABEL_SHARE = 0.025


def schedule_spans(bubbles: pl.DataFrame, microbatches: pl.DataFrame, kernels: pl.DataFrame | None,
                   step: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(rows, work)`` of ``step``: ``rows`` per stage (``rank``, ``start``, ``end``, ``bubble_pct``) and ``work``
    (``rank``, ``start``, ``end``, ``phase``, ``mb``): the pieces of work drawn, clipped to the row."""
    rows = bubbles.filter(pl.col("step") == step).select("rank", "start", "end", "timeline", "bubble_pct").sort("rank")
    cols = {"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "phase": pl.String, "mb": pl.Int32}
    pieces: list[pl.DataFrame] = []
    mb = microbatches.sort("start") if not microbatches.is_empty() else microbatches
    for r in rows.iter_rows(named=True):
        lo, hi = int(r["start"]), int(r["end"])
        if r["timeline"] == "gpu" and kernels is not None and not kernels.is_empty():
            k = kernels.filter((pl.col("rank") == r["rank"]) & (pl.col("kernel_class").cast(pl.String) == "compute")
                               & (pl.col("end") > lo) & (pl.col("start") < hi))
            if k.is_empty():
                continue
            k = k.with_columns(pl.col("start").clip(lo, hi), pl.col("end").clip(lo, hi))
            merged = merge_intervals(k, ["rank"]).collect()
            first = k.sort("start").select("start", pl.col("launch_start").alias("t"))
            merged = merged.sort("start").join_asof(first, on="start", strategy="forward")
        else:
            part = mb.filter((pl.col("rank") == r["rank"]) & (pl.col("end") > lo) & (pl.col("start") < hi)) \
                if not mb.is_empty() else mb
            if part.is_empty():
                continue
            merged = part.select("rank", pl.col("start").clip(lo, hi), pl.col("end").clip(lo, hi),
                                 pl.col("host_start").alias("t"))
        host = mb.filter(pl.col("rank") == r["rank"]).select(
            pl.col("host_start").alias("t"), pl.col("host_end").alias("h_end"), "phase", "mb") \
            if not mb.is_empty() else None
        if host is not None and not host.is_empty():
            merged = merged.sort("t").join_asof(host.sort("t"), on="t", strategy="backward").with_columns(
                phase=pl.when(pl.col("t") <= pl.col("h_end")).then(pl.col("phase")),
                mb=pl.when(pl.col("t") <= pl.col("h_end")).then(pl.col("mb")))
        else:
            merged = merged.with_columns(phase=pl.lit(None, pl.String), mb=pl.lit(None, pl.Int32))
        pieces.append(merged.select(*[pl.col(c).cast(t) for c, t in cols.items()]))
    work = pl.concat(pieces).sort("rank", "start") if pieces else pl.DataFrame(schema=cols)
    return rows, work


def drawn_idle_pct(rows: pl.DataFrame, work: pl.DataFrame) -> dict[int, float]:
    """Per stage: the share of its row not covered by work (what the figure shows grey), in %."""
    out = {}
    for r in rows.iter_rows(named=True):
        w = work.filter(pl.col("rank") == r["rank"])
        busy = int((w["end"] - w["start"]).sum()) if w.height else 0
        span = int(r["end"] - r["start"])
        out[int(r["rank"])] = 100.0 * (span - busy) / span if span > 0 else 0.0
    return out


def schedule_figure(rows: pl.DataFrame, work: pl.DataFrame, step: int) -> go.Figure:
    """Stages × time of one step: each stage's analysed step (grey: idle, its bubble) and its work coloured by
    phase (forward, backward; work no micro-batch range launched: "other work"), labelled F3/B3 where wide enough.
    x is ms since the earliest stage's step start; stage 0 at the top."""
    if rows.is_empty():
        return figures.empty_figure(f"step {step} is not in the analysed window")
    lo = int(rows["start"].min())
    ylab = {int(r): f"stage {r} · rank {r}" for r in rows["rank"].to_list()}
    idle = drawn_idle_pct(rows, work)
    fig = go.Figure(layout=dict(template=figures.TEMPLATE))
    for i, r in enumerate(rows.iter_rows(named=True)):
        fig.add_trace(go.Bar(y=[ylab[r["rank"]]], x=[(r["end"] - r["start"]) / 1e6], base=[(r["start"] - lo) / 1e6],
                             orientation="h", marker_color=figures.PHASE_COLORS["idle"], name="idle (bubble)",
                             showlegend=i == 0, width=0.8, legendgroup="idle",
                             hovertemplate=f"stage {r['rank']}, step {step}: {duration(r['end'] - r['start'])}, "
                                           f"idle {percent(idle[int(r['rank'])])}<extra></extra>"))
    width = max(1, int(rows["end"].max()) - lo)
    colors = {**figures.PHASE_COLORS, "other work": "#64748B"}
    w = work.with_columns(phase=pl.col("phase").fill_null("other work"))
    for phase in ("forward", "backward", "other work"):
        part = w.filter(pl.col("phase") == phase)
        if part.is_empty():
            continue
        fig.add_trace(go.Bar(
            y=[ylab.get(r, f"rank {r}") for r in part["rank"].to_list()],
            x=((part["end"] - part["start"]) / 1e6).to_list(), base=((part["start"] - lo) / 1e6).to_list(),
            orientation="h", marker_color=colors[phase], marker_line_width=0, name=phase, width=0.6,
            customdata=[f"{phase} micro-batch {m}" if m is not None else phase for m in part["mb"].to_list()],
            hovertemplate="%{customdata}<br>from %{base:,.2f} ms, %{x:,.3f} ms long<extra>%{y}</extra>"))
    # one label per micro-batch (F3 / B3), in the middle of its work, where it is wide enough to read
    tags = (w.filter(pl.col("mb").is_not_null() & (pl.col("phase") != "other work"))
            .group_by("rank", "phase", "mb").agg(pl.col("start").min(), pl.col("end").max())
            .filter((pl.col("end") - pl.col("start")) >= LABEL_SHARE * width).sort("rank", "start"))
    if tags.height:
        fig.add_trace(go.Scatter(
            x=(((tags["start"] + tags["end"]) / 2 - lo) / 1e6).to_list(),
            y=[ylab.get(r, f"rank {r}") for r in tags["rank"].to_list()],
            text=[("F" if p == "forward" else "B") + str(m) for p, m in zip(tags["phase"].to_list(),
                                                                           tags["mb"].to_list())],
            mode="text", textfont=dict(color="white", size=12), hoverinfo="skip", showlegend=False,
            name="micro-batch labels"))
    fig.update_layout(barmode="overlay",
                      meta={"idle_pct": {str(k): v for k, v in idle.items()}})
    fig.update_xaxes(title=f"ms since step {step} started on the earliest stage", ticksuffix=" ms",
                     range=[0, width / 1e6])
    fig.update_yaxes(autorange="reversed", type="category", automargin=True,
                     categoryorder="array", categoryarray=list(ylab.values()))
    fig.update_layout(title=f"Schedule of step {step}: work and idle per stage (idle = the bubble in the table)",
                      height=max(220, 120 + 60 * len(ylab)), margin=dict(l=100, r=20, t=70, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      title_x=0, title_y=0.98, title_yanchor="top")
    return fig


def schedule(bubbles: pl.DataFrame, microbatches: pl.DataFrame, kernels: pl.DataFrame | None, step: int) -> Any:
    """:func:`schedule_figure` of :func:`schedule_spans`."""
    rows, work = schedule_spans(bubbles, microbatches, kernels, step)
    return schedule_figure(rows, work, step)
