"""Breakdown & overlap: where device time goes per rank and per step, and how much communication is hidden."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, State, dcc, html

from workbench import figures
from workbench.app import compute
from workbench.app.components import error_panel, fmt_ms, fmt_pct, graph, grid, safe, section
from workbench.app.store import RunStore

PATH = "/breakdown"
NAME = "Breakdown & overlap"
KEY = "breakdown"
#: Parts that add up to the window (``compute + exposed comm + exposed memory + idle = window``).
PARTS = ["compute_ns", "comm_exposed_ns", "memory_exposed_ns", "idle_ns"]


def rank_table(br: pl.DataFrame) -> pl.DataFrame:
    """What the per-rank grid shows (tests compare it with the analyses' ``breakdown_by_rank``)."""
    return br.select(
        "rank",
        pl.col("steps"),
        pl.col("window_ns").map_elements(fmt_ms, return_dtype=pl.String).alias("window_ms"),
        *[pl.col(c).map_elements(fmt_pct, return_dtype=pl.String, skip_nulls=False).alias(c) for c in
          ("compute_pct", "comm_exposed_pct", "memory_exposed_pct", "idle_pct", "comm_overlap_pct",
           "comm_overlap_of_max_pct")],
    )


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Breakdown", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    br = compute.breakdown_ranks(store, rid)
    if br.is_empty():
        run = store.run(rid)
        why = ("this run has no device (GPU) activity: a CPU-only run has no kernels to break down; see Drift and "
               "the Timeline for its steps and collectives" if run.kernels.is_empty() else
               "no device activity in the analysed window (complete profiler steps)")
        return html.Div(f"Nothing to break down: {why}.", className="panel panel-unavailable", id="no-breakdown")
    ranks = br["rank"].to_list()
    return html.Div([
        section("Per rank (steady-state window: complete profiler steps)",
                graph(figures.stacked_bar_figure(br, x="rank", parts=PARTS, scale=1e6, unit="ms",
                                                 x_title="rank", title="Device time per rank"),
                      id="breakdown-rank-figure"),
                grid(rank_table(br), id="breakdown-grid")),
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
    parts = [graph(figures.stacked_bar_figure(st, x="step", parts=PARTS, scale=1e6, unit="ms",
                                              title=f"Device time per step, rank {rank}"), id="breakdown-step-figure")]
    ov = safe_frame(lambda: compute.overlap(store, rid, "step"))
    if ov is not None and not ov.is_empty():
        o = ov.filter(pl.col("rank") == rank)
        parts.append(graph(figures.line_figure(o, x="step", y="overlap_pct", unit="% of communication overlapped",
                                               title=f"Comm–compute overlap per step, rank {rank}"),
                           id="overlap-step-figure"))
    return parts


def _idle(store: RunStore, rid: str) -> Any:
    ic = compute.table(store, rid, "idle_by_stream")
    if ic.is_empty():
        return html.Div("No idle gaps.", className="muted")
    show = ic.select(
        "rank", "stream",
        *[pl.col(f"{c}_ns").map_elements(fmt_ms, return_dtype=pl.String).alias(f"{c}_ms")
          for c in ("host_wait", "kernel_wait", "other", "idle")],
        "gaps",
    )
    return grid(show, id="idle-grid")


def register(app, store: RunStore) -> None:
    @app.callback(Output("breakdown-steps", "children"), Input("breakdown-rank", "value"),
                  State("breakdown-run", "data"), prevent_initial_call=True)
    def per_step(rank, rid):
        return safe("Per step", _per_step, store, rid, int(rank))
