"""Recompiles: compiles per rank and their causes, the rank × compile-id divergence matrix, and for each
divergent recompile its step and the wait it caused on the other ranks (linked to the timeline)."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, State, dcc, html, no_update

from workbench import figures
from workbench.app import compute
from workbench.app.components import error_panel, fmt_ms, graph, grid, run_problems, safe, section, stats_row
from workbench.app.store import RunStore

PATH = "/recompiles"
NAME = "Recompiles"
KEY = "recompiles"


def divergent_table(div: pl.DataFrame) -> pl.DataFrame:
    """The divergent-recompile grid as shown (tests compare it with the analysis)."""
    return div.select(
        "compile_id",
        pl.col("ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("ranks"),
        pl.col("missing_ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("waiting_ranks"),
        "step",
        "cause",
        "cause_source",
        pl.col("duration_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("compile_ms"),
        (pl.col("wait_ns") if "wait_ns" in div.columns else pl.lit(None, pl.Int64))
        .map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("wait_ms"),
        (pl.col("cost_method") if "cost_method" in div.columns else pl.lit(None, pl.String)).alias("wait_from"),
        "location",
    )


def per_rank_table(c: pl.DataFrame) -> pl.DataFrame:
    """Per rank: compiles, recompiles (compile ids other than ``N/0``), graph breaks, total compile time."""
    frame_compile = pl.col("compile_id").str.extract(r"^\d+/(\d+)", 1).cast(pl.Int32, strict=False)
    return c.group_by("rank").agg(
        pl.len().alias("compiles"),
        (frame_compile > 0).sum().alias("recompiles"),
        (pl.col("cause") == "graph_break").sum().alias("graph_breaks"),
        pl.col("duration_ns").sum().alias("_t"),
    ).sort("rank").with_columns(
        pl.col("_t").map_elements(fmt_ms, return_dtype=pl.String).alias("compile_ms")).drop("_t")


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Recompiles", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    run = store.run(rid)
    if run.compiles.is_empty():
        return html.Div([run_problems(run), html.Div(
            "This run has no torch.compile events (no TORCH_TRACE logs or collector compile capture).",
            className="panel panel-unavailable", id="no-compiles")])
    c = compute.compiles(store, rid)
    causes = c.group_by("rank", "cause").len().sort("rank", "cause")
    return html.Div([
        run_problems(run),
        stats_row([
            ("compiles", "compile events", f"{c.height:,}"),
            ("compile_ranks", "ranks with compiles", str(c["rank"].n_unique())),
            ("compile_time", "compile time, all ranks (ms)", fmt_ms(c["duration_ns"].sum(), 1)),
        ]),
        section("Divergent recompiles: compile ids on some ranks only", safe("Divergence", _divergent, store, rid, c),
                id="divergent-section"),
        section("Rank × compile id",
                html.Div("Click a cell to see that rank around that compile on the timeline.", className="muted"),
                graph(figures.divergence_matrix_figure(c), id="divergence-matrix"),
                dcc.Store(id="recompiles-run", data=rid)),
        html.Div([
            section("Per rank", grid(per_rank_table(c), id="compiles-rank-grid")),
            section("Causes per rank", graph(figures.heatmap_figure(
                causes, x="cause", y="rank", z="len", colorscale="Blues", unit="compiles",
                title="Compiles by cause"), id="causes-figure")),
        ], className="two-col"),
        section("Every compile", grid(c.sort("rank", "start", nulls_last=True).select(
            "rank", "compile_id", "co_name", "cause",
            *[x for x in ("cause_detail",) if x in c.columns], "cause_source", "step", "status",
            pl.col("duration_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("compile_ms"),
            pl.col("recompile_reasons").list.join(" | ").alias("reasons"),
        ), id="compiles-grid", page_size=50)),
    ])


def _divergent(store: RunStore, rid: str, c: pl.DataFrame) -> Any:
    div = compute.divergent(store, rid)
    if div.is_empty():
        return html.Div("Every rank compiled the same compile ids.", className="muted", id="no-divergence")
    links = []
    for d in div.iter_rows(named=True):
        q = f"?run={rid}" + (f"&step={d['step']}" if d["step"] is not None else "")
        wait = fmt_ms(d.get("wait_ns"))
        links.append(html.Div([
            html.Strong(f"compile {d['compile_id']}"),
            html.Span(f" on rank(s) {', '.join(map(str, d['ranks']))} only"
                      f"{' at step ' + str(d['step']) if d['step'] is not None else ''}"
                      f" ({d['cause'] or '?'}{': ' + d['cause_source'] if d.get('cause_source') else ''}); "
                      f"ranks {', '.join(map(str, d['missing_ranks']))} waited {wait} ms. "),
            dcc.Link("Show on the timeline", href="/timeline" + q, className="divergent-link"),
        ], className="rec divergent-item"))
    return html.Div([*links, grid(divergent_table(div), id="divergent-grid")])


def cell_link(store: RunStore, rid: str, point: dict) -> str | None:
    """Timeline URL for a clicked matrix cell: that rank, around the compile's step (or its time)."""
    try:
        rank = int(point["y"])
    except (KeyError, TypeError, ValueError):
        return None
    cid = str(point.get("x", "")).rstrip("*")
    c = compute.compiles(store, rid).filter(pl.col("compile_id") == cid)
    mine = c.filter(pl.col("rank") == rank)
    row = (mine if mine.height else c).head(1)
    if row.is_empty():
        return None
    step = row["step"][0]
    q = {"run": rid, "rank": ",".join(map(str, sorted(compute.compiles(store, rid)["rank"].unique().to_list())))}
    if step is not None:
        q["step"] = str(step)
    from urllib.parse import urlencode
    return "/timeline?" + urlencode(q)


def register(app, store: RunStore) -> None:
    @app.callback(Output("url", "href", allow_duplicate=True), Input("divergence-matrix", "clickData"),
                  State("recompiles-run", "data"), prevent_initial_call=True)
    def open_cell(click, rid):
        if not click or not click.get("points"):
            return no_update
        target = cell_link(store, rid, click["points"][0])
        return target or no_update
