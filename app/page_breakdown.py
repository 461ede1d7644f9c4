"""Breakdown & overlap: where device time goes per rank and per step, and how much communication is hidden."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, State, dcc, html

from workbench import figures
from workbench.app import compute
from workbench.app.components import (
    col, duration_column, error_panel, graph, grid, lazy_graph, pct_column, safe, section,
)
from workbench.app.store import RunStore

PATH = "/breakdown"
NAME = "Breakdown & overlap"
KEY = "breakdown"
#: The layout depends only on the run and the URL query: built once, then served from the run's cache.
CACHE = True
#: Parts that add up to the window (``compute + exposed comm + exposed memory + idle = window``).
PARTS = ["compute_ns", "comm_exposed_ns", "memory_exposed_ns", "idle_ns"]


def rank_table(br: pl.DataFrame) -> pl.DataFrame:
    """What the per-rank grid holds (tests compare it with the analyses' ``breakdown_by_rank``): the window in ms,
    the parts in percent of it."""
    return br.select(
        "rank", "steps", "window_ns",
        *[pl.col(c) for c in ("compute_pct", "comm_exposed_pct", "memory_exposed_pct", "idle_pct", "comm_overlap_pct",
                              "comm_overlap_of_max_pct")],
    )


RANK_COLUMNS = [
    col("rank", "Rank"), col("steps", "Steps analysed"), duration_column("window_ns", "Window"),
    pct_column("compute_pct", "Compute"), pct_column("comm_exposed_pct", "Exposed communication"),
    pct_column("memory_exposed_pct", "Exposed memory copies/sets"), pct_column("idle_pct", "Idle"),
    pct_column("comm_overlap_pct", "Communication hidden behind compute"),
    pct_column("comm_overlap_of_max_pct", "Hidden, of what could be hidden"),
]
IDLE_COLUMNS = [
    col("rank", "Rank"), col("stream", "Stream"),
    duration_column("host_wait_ns", "Waiting for the host to launch"), duration_column("kernel_wait_ns", "Waiting for a kernel/event"),
    duration_column("other_ns", "Other"), duration_column("idle_ns", "Idle in all"), col("gaps", "Gaps"),
]


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Breakdown", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    br = compute.breakdown_ranks(store, rid)
    if br.is_empty():
        run = store.run(rid)
        why = ("this run has no device (GPU) activity: a CPU-only run has no kernels to break down; see Drift and "
               "the Timeline for its steps and collectives" if run.count("kernels") == 0 else
               "no device activity in the analysed window (complete profiler steps)")
        return html.Div(f"Nothing to break down: {why}.", className="panel panel-unavailable", id="no-breakdown")
    ranks = br["rank"].to_list()
    return html.Div([
        section("Per rank (steady-state window: complete profiler steps)",
                graph(figures.stacked_bar_figure(br, x="rank", parts=PARTS, scale=1e6, unit="ms",
                                                 x_title="rank", title="Device time per rank"),
                      id="breakdown-rank-figure"),
                grid(rank_table(br), id="breakdown-grid", columns=RANK_COLUMNS),
                html.Div("Compute + exposed communication + exposed memory copies/sets + idle = the window (complete "
                         "profiler steps). Exposed means no compute kernel ran at the same time.", className="muted")),
        section("Per step",
                html.Div([html.Label("Rank"), dcc.Dropdown(id="breakdown-rank", options=ranks, value=ranks[0],
                                                           clearable=False)], className="controls"),
                html.Div(_per_step(store, rid, ranks[0]), id="breakdown-steps")),
        section("Idle time by cause, per rank and stream", safe("Idle causes", _idle, store, rid)),
        dcc.Store(id="breakdown-run", data=rid),
    ])


def safe_frame(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - the grid then shows blanks
        return None


def _per_step(store: RunStore, rid: str, rank: int) -> Any:
    st = compute.breakdown_steps(store, rid).filter(pl.col("rank") == rank)
    parts = [lazy_graph(figures.stacked_bar_figure(st, x="step", parts=PARTS, scale=1e6, unit="ms",
                                                   title=f"Device time per step, rank {rank}"), id="breakdown-step-figure")]
    ov = safe_frame(lambda: compute.overlap(store, rid))
    if ov is not None and not ov.is_empty():
        o = ov.filter(pl.col("rank") == rank)
        parts.append(lazy_graph(figures.line_figure(o, x="step", y="overlap_pct", percent=True,
                                               y_title="communication hidden behind compute",
                                               title=f"Communication hidden behind compute per step, rank {rank}"),
                           id="overlap-step-figure"))
    return parts


def _idle(store: RunStore, rid: str) -> Any:
    ic = compute.table(store, rid, "idle_by_stream")
    if ic.is_empty():
        return html.Div("No idle gaps.", className="muted")
    show = ic.select("rank", "stream", "host_wait_ns", "kernel_wait_ns", "other_ns", "idle_ns", "gaps")
    return grid(show, id="idle-grid", columns=IDLE_COLUMNS)


def register(app, store: RunStore) -> None:
    @app.callback(Output("breakdown-steps", "children"), Input("breakdown-rank", "value"),
                  State("breakdown-run", "data"), prevent_initial_call=True)
    def per_step(rank, rid):
        return safe("Per step", _per_step, store, rid, int(rank))
