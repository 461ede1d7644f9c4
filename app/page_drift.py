"""Drift: step time per rank over time, collective arrival skew (rank × instance), stragglers."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import html

from workbench import figures
from workbench.app import compute
from workbench.app.components import error_panel, fmt_ms, fmt_pct, graph, grid, run_problems, safe, section
from workbench.app.store import RunStore

PATH = "/drift"
NAME = "Drift"
KEY = "drift"


def straggler_table(s: pl.DataFrame) -> pl.DataFrame:
    """The stragglers grid as shown (tests compare it with :func:`workbench.analyses.stragglers.straggler_ranks`)."""
    return s.sort(["held_back_ns", "rank", "signal"], descending=[True, False, False]).select(
        "rank", "signal", "events", "held_count",
        pl.col("held_pct").map_elements(fmt_pct, return_dtype=pl.String, skip_nulls=False).alias("held_pct"),
        pl.col("held_back_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("held_back_ms"),
        pl.col("held_share_pct").map_elements(fmt_pct, return_dtype=pl.String, skip_nulls=False).alias("held_share_pct"),
        pl.col("first_step"),
        pl.col("trend"),
    )


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Drift", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    run = store.run(rid)
    return html.Div([
        run_problems(run),
        section("Step time per rank", graph(figures.step_time_figure(run.steps), id="step-time-figure")),
        section("Stragglers: who holds the others back", safe("Stragglers", _stragglers, store, rid),
                id="stragglers-section"),
        section("Collective arrival skew (each rank's wait for the last rank, ms)",
                safe("Collective skew", _skew, store, rid)),
        section("Drift of collective arrival across ranks", safe("Collective drift", _drift, store, rid)),
    ])


def _stragglers(store: RunStore, rid: str) -> Any:
    s = compute.table(store, rid, "stragglers")
    f = compute.straggler_findings(store, rid)
    msgs = [html.Div(m, className="rec straggler-finding") for m in f["message"].to_list()] if not f.is_empty() else [
        html.Div("No rank holds the others back enough to be called a straggler.", className="muted")]
    if s.is_empty():
        return html.Div(msgs)
    return html.Div([*msgs, grid(straggler_table(s), id="stragglers-grid")])


def _skew(store: RunStore, rid: str) -> Any:
    matched = compute.table(store, rid, "collectives")
    if figures.skew_cells(matched).is_empty():
        return html.Div("No collective seen on more than one rank.", className="muted")
    fig = figures.collective_skew_figure(matched)
    inst = compute.table(store, rid, "collective_instances")
    top = inst.filter(pl.col("skew_ns").is_not_null()).sort("skew_ns", descending=True).head(20).select(
        "pg_name", "step", "order", "collective", "last_rank",
        pl.col("skew_ns").map_elements(fmt_ms, return_dtype=pl.String).alias("skew_ms"),
        pl.col("held_back_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("held_back_ms"),
        "consistent",
    )
    return html.Div([graph(fig, id="skew-heatmap"), html.H4("Largest arrival skews"), grid(top, id="skew-grid")])


def _drift(store: RunStore, rid: str) -> Any:
    d = compute.table(store, rid, "collective_drift")
    if d.is_empty():
        return html.Div("No matched collectives.", className="muted")
    return grid(d.select(
        "rank", "instances",
        *[pl.col(c).map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias(c.replace("_ns", "_ms"))
          for c in ("mean_offset_ns", "first_offset_ns", "last_offset_ns", "drift_ns") if c in d.columns],
        pl.col("slope_ns_per_s").round(1) if "slope_ns_per_s" in d.columns else pl.lit(None).alias("slope_ns_per_s"),
    ), id="drift-grid")


def register(app, store: RunStore) -> None:
    """No callbacks."""
