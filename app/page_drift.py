"""Drift: each rank's step period over the run (data loading included), who holds the others back (stragglers),
each rank's wait at every collective (rank × instance, log colour scale), and how each rank's arrival at the
collectives moves relative to the others — with the sign of every offset spelled out."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import html

from workbench import figures
from workbench.analyses.collectives import skew_cells
from workbench.app import compute
from workbench.app.components import (
    col, duration_column, error_panel, graph, grid, lazy_graph, pct_column, run_problems, safe, section,
)
from workbench.app.store import RunStore

PATH = "/drift"
NAME = "Drift"
KEY = "drift"
#: The layout depends only on the run and the URL query: built once, then served from the run's cache.
CACHE = True

SIGNALS = {"collector_steps": "collector steps", "profiler_steps": "profiler steps",
           "collectives": "collective arrivals"}


def straggler_table(s: pl.DataFrame) -> pl.DataFrame:
    """The stragglers grid as shown (tests compare it with :func:`workbench.analyses.stragglers.straggler_ranks`)."""
    out = s.sort(["held_back_ns", "rank", "signal"], descending=[True, False, False]).select(
        "rank",
        pl.col("signal").cast(pl.String).replace(SIGNALS).alias("signal"),
        "events", "held_count", "held_pct", "held_back_ns", "held_share_pct", "first_step", "trend",
        *[c for c in ("median_data_wait_ns",) if c in s.columns],
    )
    return out


STRAGGLER_COLUMNS = [
    col("rank", "Rank"), col("signal", "Signal"), col("events", "Steps or collectives seen"),
    col("held_count", "Times it held the others back"), pct_column("held_pct", "Share of those it held back"),
    duration_column("held_back_ns", "Time it held the others back"), pct_column("held_share_pct", "Share of step time"),
    col("first_step", "First step it held back"), col("trend", "Trend"),
    duration_column("median_data_wait_ns", "Median data wait per step"),
]


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Drift", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    run = store.run(rid)
    return html.Div([
        run_problems(run),
        section("Step period per rank", graph(figures.step_time_figure(run.steps), id="step-time-figure"),
                html.Div("The period is from a step's start to the next step's start: the step itself plus the wait "
                         "for the next batch, so a rank that waits for its data loader shows here. Hover a point "
                         "for the split.", className="muted")),
        section("Stragglers: who holds the others back", safe("Stragglers", _stragglers, store, rid),
                id="stragglers-section"),
        section("Collective waits: each rank's wait for the last rank to arrive",
                safe("Collective skew", _skew, store, rid)),
        section("Arrival drift: when each rank reaches the collectives, relative to the others",
                safe("Collective drift", _drift, store, rid)),
    ])


def _stragglers(store: RunStore, rid: str) -> Any:
    s = compute.table(store, rid, "stragglers")
    f = compute.straggler_findings(store, rid)
    msgs = [html.Div(m, className="rec straggler-finding") for m in f["message"].to_list()] if not f.is_empty() else [
        html.Div("No rank holds the others back enough to be called a straggler.", className="muted")]
    if s.is_empty():
        return html.Div(msgs)
    return html.Div([*msgs, grid(straggler_table(s), id="stragglers-grid", columns=STRAGGLER_COLUMNS)])


SKEW_COLUMNS = [
    col("step", "Step"), col("order", "Collective # in step"),
    col("collective", "Collective"), col("pg_name", "Process group"),
    col("last_rank", "Last rank to arrive"), duration_column("skew_ns", "Arrival skew (first to last)"),
    duration_column("held_back_ns", "Time the last rank held the others"), col("consistent", "Same op on every rank"),
]


def _skew(store: RunStore, rid: str) -> Any:
    matched = compute.table(store, rid, "collectives")
    if skew_cells(matched).is_empty():
        only_p2p = not matched.is_empty() and bool(matched["p2p"].all())
        return html.Div("Only point-to-point sends and receives (a pipeline): no collective that every rank joins; "
                        "see the Pipeline page." if only_p2p else "No collective seen on more than one rank.",
                        className="muted")
    fig = figures.collective_skew_figure(matched)
    inst = compute.table(store, rid, "collective_instances")
    top = inst.filter(pl.col("skew_ns").is_not_null()).sort("skew_ns", descending=True).head(20).select(
        "step", "order", pl.col("collective").cast(pl.String), "pg_name", "last_rank", "skew_ns", "held_back_ns",
        "consistent")
    return html.Div([
        lazy_graph(fig, id="skew-heatmap"),
        html.Div("Log colour scale: a 30 ms wait and a 2.5 s stall both show. Hover a cell for the collective, its "
                 "step and the rank everyone waited for.", className="muted"),
        html.H4("Largest arrival skews"), grid(top, id="skew-grid", columns=SKEW_COLUMNS),
    ])


DRIFT_COLUMNS = [
    col("rank", "Rank"), col("instances", "Collectives"),
    duration_column("mean_offset_ns", "Mean arrival offset (+ later)"),
    duration_column("first_offset_ns", "First offset"), duration_column("last_offset_ns", "Last offset"),
    duration_column("drift_ns", "Drift: last third − first third (+ falling behind)"),
    duration_column("slope_ns_per_s", "Trend per second of run (+ falling behind)"),
]
CLOCK_COLUMNS = [
    col("rank", "Rank"), col("host", "Host"), duration_column("offset_ns", "Clock offset vs the lowest rank"),
    duration_column("spread_ns", "Spread of the estimate"), col("samples", "Collectives used"),
]


def _drift(store: RunStore, rid: str) -> Any:
    matched = compute.table(store, rid, "collectives")
    d = compute.table(store, rid, "collective_drift")
    if d.is_empty():
        return html.Div("No matched collectives.", className="muted")
    drift = d.select("rank", "instances", *[c for c in ("mean_offset_ns", "first_offset_ns", "last_offset_ns",
                                                        "drift_ns", "slope_ns_per_s") if c in d.columns])
    parts: list[Any] = [
        lazy_graph(figures.arrival_offset_figure(matched), id="arrival-offset-figure"),
        html.Div("Offset = this rank's arrival at a collective minus the median rank's arrival at the same "
                 "collective. Positive: it arrives later and the others wait for it; negative: it arrives earlier "
                 "and waits. Drift and trend say how the offset moves over the run, measured against the same "
                 "clock for every rank (each collective's median arrival): positive = falling further behind. "
                 "With two ranks every column mirrors (±): the rank above zero is the one being waited for.", className="muted", id="offset-sign"),
        grid(drift, id="drift-grid", columns=DRIFT_COLUMNS),
    ]
    clocks = compute.table(store, rid, "clock_offsets")
    if not clocks.is_empty():
        parts += [
            html.H4("Clock offsets"),
            html.Div("Estimated from when each collective ends on every rank (it ends at the same instant "
                     "everywhere): this rank's clock minus the lowest rank's clock. Positive: its clock runs ahead; "
                     "subtract the offset to put its events on the lowest rank's clock. Ranks on one host share a "
                     "clock, so their offsets are about 0.", className="muted", id="clock-sign"),
            grid(clocks, id="clock-grid", columns=CLOCK_COLUMNS),
        ]
    return html.Div(parts)


def register(app, store: RunStore) -> None:
    """No callbacks."""
