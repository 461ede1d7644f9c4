"""Overview: the runs the app serves, the selected run's ranks and steps, and its findings ranked by cost."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import dcc, html

from workbench import figures
from workbench.app import compute
from workbench.app.components import (
    error_panel, fmt_ms, graph, grid, run_problems, safe, section, stats_row,
)
from workbench.app.store import RunStore

PATH = "/"
NAME = "Overview"
KEY = "overview"


def findings_table(f: pl.DataFrame) -> pl.DataFrame:
    """The findings as the page shows them: ranked, cost in ms (3 decimals), lists joined (tests compare this)."""
    f = f.sort("cost_ns", descending=True, nulls_last=True)
    return f.select(
        pl.int_range(1, f.height + 1).alias("#"),
        pl.col("kind"),
        pl.col("severity"),
        pl.col("cost_ns").map_elements(fmt_ms, return_dtype=pl.String).alias("cost_ms"),
        pl.col("ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("ranks"),
        pl.col("steps").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("steps"),
        pl.col("message"),
        pl.col("source"),
    )


def step_stats(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank: steps seen, median / max step time (collector steps when present, else profiler steps)."""
    if steps.is_empty():
        return pl.DataFrame()
    src = steps["source"].cast(pl.String).unique().to_list()
    s = steps.filter(pl.col("source").cast(pl.String) == ("collector" if "collector" in src else "profiler"))
    return s.group_by("rank").agg(
        pl.len().alias("steps"),
        pl.col("step").min().alias("first"),
        pl.col("step").max().alias("last"),
        pl.col("dur").median().alias("median_ns"),
        pl.col("dur").max().alias("max_ns"),
    ).sort("rank").with_columns(
        pl.col("median_ns").map_elements(fmt_ms, return_dtype=pl.String).alias("median_ms"),
        pl.col("max_ns").map_elements(fmt_ms, return_dtype=pl.String).alias("max_ms"),
    ).drop("median_ns", "max_ns")


def runs_section(store: RunStore, current: str | None) -> Any:
    rows = [{"run": e.id, "path": str(e.path), "kind": "run directory" if e.is_run_dir else "traces",
             "status": store.status(e.id), "current": "◀" if e.id == current else ""} for e in store.entries]
    links = html.Div([dcc.Link(e.label, href=f"/?run={e.id}", className="run-link", style={"marginRight": "14px"},
                               id=f"run-link-{e.id}") for e in store.entries])
    return section("Runs", links, grid(pl.DataFrame(rows) if rows else pl.DataFrame({"run": []}), id="runs-grid"))


def layout(pctx) -> Any:
    store, rid = pctx.store, pctx.run_id
    if rid is None:
        return html.Div([runs_section(store, rid),
                         error_panel("No runs", "No runs were found under the paths the app was started with.")])
    run_part = safe("Run", _run_part, store, rid)  # first, so the runs list shows its status
    return html.Div([runs_section(store, rid), run_part])


def _run_part(store: RunStore, rid: str) -> Any:
    run = store.run(rid)
    info = store.cached(rid, "info", run.info)
    stats = stats_row([
        ("world_size", "world size", str(info.get("world_size") or "–")),
        ("ranks", "ranks loaded", str(len(info["ranks"]))),
        ("steps", "steps", str(info["steps"])),
        ("span", "span (ms)", fmt_ms(info["span_ns"], 1)),
        ("kernels", "device activities", f"{run.kernels.height:,}"),
        ("collectives", "collectives", f"{info['collectives']:,}"),
        ("compiles", "compiles", f"{info['compiles']:,}"),
    ])
    ranks = run.ranks.select([c for c in ("rank", "world_size", "host", "device_name", "backend", "torch_version",
                                          "nccl_version", "clock", "events") if c in run.ranks.columns])
    return html.Div([
        html.Div([html.Span("Run "), html.Code(rid), html.Span(f" · {run.path}", className="muted")]),
        run_problems(run),
        stats,
        section("Findings, ranked by the step time they cost", safe("Findings", _findings, store, rid),
                id="findings-section"),
        html.Div([
            section("Ranks", grid(ranks, id="ranks-grid")),
            section("Steps per rank", grid(step_stats(run.steps), id="steps-grid")),
        ], className="two-col"),
    ])


def _findings(store: RunStore, rid: str) -> Any:
    f = compute.findings(store, rid)
    if f.is_empty():
        return html.Div("No findings: nothing the analyses consider a problem.", id="findings-empty")
    table = findings_table(f)
    return html.Div([
        graph(figures.findings_figure(f), id="findings-figure"),
        grid(table, id="findings-grid", columns=[
            {"field": "#", "maxWidth": 60}, {"field": "kind"}, {"field": "severity", "maxWidth": 100},
            {"field": "cost_ms", "headerName": "cost (ms)", "maxWidth": 120}, {"field": "ranks", "maxWidth": 120},
            {"field": "steps", "maxWidth": 140}, {"field": "message", "flex": 3, "wrapText": True, "autoHeight": True},
            {"field": "source", "maxWidth": 140},
        ]),
    ])


def register(app, store: RunStore) -> None:
    """No callbacks: the overview is rebuilt when the run changes."""
