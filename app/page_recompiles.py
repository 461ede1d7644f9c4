"""Recompiles: compiles per rank and their causes, the rank × compile-id divergence matrix, and for each
divergent recompile its step and the wait it caused on the other ranks (linked to the timeline)."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, State, dcc, html, no_update

from workbench import figures
from workbench.analyses.findings import ranks_text
from workbench.app import compute
from workbench.app.components import (
    col, duration_column, error_panel, graph, grid, run_problems, safe, section, stats_row,
)
from workbench.app.store import RunStore
from workbench.format import duration

PATH = "/recompiles"
NAME = "Recompiles"
KEY = "recompiles"
#: The layout depends only on the run and the URL query: built once, then served from the run's cache.
CACHE = True


def _join_frames(frame: pl.DataFrame, frames: pl.DataFrame, rank_col: str = "rank") -> pl.DataFrame:
    """``frame`` with ``user_frame`` (the user's line being compiled) joined on rank and compile id."""
    if frames.is_empty():
        return frame.with_columns(pl.lit(None, pl.String).alias("user_frame"))
    if rank_col == "rank":
        return frame.join(frames, on=["rank", "compile_id"], how="left")
    first = frames.group_by("compile_id").agg(pl.col("user_frame").drop_nulls().first())
    return frame.join(first, on="compile_id", how="left")


def divergent_table(div: pl.DataFrame, frames: pl.DataFrame | None = None) -> pl.DataFrame:
    """The divergent-recompile grid as shown (tests compare it with the analysis): waits in ms, the user's line."""
    d = _join_frames(div, frames if frames is not None else pl.DataFrame(), rank_col="any")
    out = d.select(
        "compile_id",
        pl.col("ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("ranks"),
        pl.col("missing_ranks").list.eval(pl.element().cast(pl.String)).list.join(", ").alias("waiting_ranks"),
        "step",
        "cause",
        "cause_source",
        pl.col("duration_ns").alias("compile_ns"),
        (pl.col("wait_ns") if "wait_ns" in d.columns else pl.lit(None, pl.Int64)).alias("wait_ns"),
        (pl.col("cost_method") if "cost_method" in d.columns else pl.lit(None, pl.String)).alias("wait_from"),
        pl.coalesce("user_frame", "location").alias("user_line"),
    )
    return out


DIVERGENT_COLUMNS = [
    col("compile_id", "Compile id"), col("ranks", "Compiled on"), col("waiting_ranks", "Waiting ranks"),
    col("step", "Step"), col("cause", "Cause"), col("cause_source", "What changed", wrapText=True),
    duration_column("compile_ns", "Compile time"), duration_column("wait_ns", "Others waited"),
    col("wait_from", "Wait measured from", wrapText=True),
    col("user_line", "Your code being compiled", wrapText=True),
]


def per_rank_table(c: pl.DataFrame) -> pl.DataFrame:
    """Per rank: compiles, recompiles (compile ids other than ``N/0``), graph breaks, total compile time (ms)."""
    frame_compile = pl.col("compile_id").str.extract(r"^\d+/(\d+)", 1).cast(pl.Int32, strict=False)
    out = c.group_by("rank").agg(
        pl.len().alias("compiles"),
        (frame_compile > 0).sum().alias("recompiles"),
        (pl.col("cause") == "graph_break").sum().alias("graph_breaks"),
        pl.col("duration_ns").sum().alias("compile_ns"),
    ).sort("rank")
    return out


PER_RANK_COLUMNS = [col("rank", "Rank"), col("compiles", "Compiles"), col("recompiles", "Recompiles"),
                    col("graph_breaks", "Graph breaks"), duration_column("compile_ns", "Compile time")]


def causes_table(c: pl.DataFrame) -> pl.DataFrame:
    """Compiles per rank and cause, one column per cause (what the old heatmap showed, readable at any width)."""
    t = c.with_columns(pl.col("cause").fill_null("unknown")).group_by("rank", "cause", maintain_order=True).len()
    return t.pivot(on="cause", index="rank", values="len").fill_null(0).sort("rank")


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
    frames = compute.user_frames(store, rid)
    causes = causes_table(c)
    every = _join_frames(c, frames).sort("rank", "start", nulls_last=True).select(
        "rank", "compile_id", "co_name", "cause",
        *[x for x in ("cause_detail",) if x in c.columns], "cause_source", "step", "status",
        pl.col("duration_ns").alias("compile_ns"),
        pl.col("recompile_reasons").list.join(" | ").alias("reasons"),
        pl.coalesce("user_frame", pl.col("co_name")).alias("user_line"),
    )
    return html.Div([
        run_problems(run),
        stats_row([
            ("compiles", "compile events", f"{c.height:,}"),
            ("compile_ranks", "ranks with compiles", str(c["rank"].n_unique())),
            ("compile_time", "compile time, all ranks", duration(c["duration_ns"].sum())),
        ]),
        section("Divergent recompiles: compile ids on some ranks only",
                safe("Divergence", _divergent, store, rid, frames), id="divergent-section"),
        section("Rank × compile id",
                html.Div("Click a cell to see that rank around that compile on the timeline.", className="muted"),
                graph(figures.divergence_matrix_figure(c), id="divergence-matrix"),
                dcc.Store(id="recompiles-run", data=rid)),
        section("Per rank", grid(per_rank_table(c), id="compiles-rank-grid", columns=PER_RANK_COLUMNS)),
        section("Causes per rank (compiles)", grid(causes, id="causes-grid",
                                                   columns=[col("rank", "Rank")] + [
                                                       col(k, k.replace("_", " ")) for k in causes.columns
                                                       if k != "rank"])),
        section("Every compile", grid(every, id="compiles-grid", columns=[
            col("rank", "Rank"), col("compile_id", "Compile id"),
            col("co_name", "Function"), col("cause", "Cause"), col("cause_detail", "Detail"),
            col("cause_source", "What changed", wrapText=True),
            col("step", "Step"), col("status", "Status"),
            duration_column("compile_ns", "Compile time"), col("reasons", "Guard failures", wrapText=True),
            col("user_line", "Your code being compiled", wrapText=True),
        ])),
    ])


def _divergent(store: RunStore, rid: str, frames: pl.DataFrame) -> Any:
    div = compute.divergent(store, rid)
    if div.is_empty():
        return html.Div("Every rank compiled the same compile ids.", className="muted", id="no-divergence")
    links = []
    first_frames = frames.group_by("compile_id").agg(pl.col("user_frame").drop_nulls().first()) \
        if not frames.is_empty() else pl.DataFrame(schema={"compile_id": pl.String, "user_frame": pl.String})
    where = dict(zip(first_frames["compile_id"].to_list(), first_frames["user_frame"].to_list()))
    for d in div.iter_rows(named=True):
        q = f"?run={rid}" + (f"&step={d['step']}" if d["step"] is not None else "")
        waiting = d["missing_ranks"] or []
        verb = "waits" if len(waiting) == 1 else "wait"
        wait = d.get("wait_ns")
        line = where.get(d["compile_id"]) or d.get("location")
        links.append(html.Div([
            html.Strong(f"compile {d['compile_id']}"),
            html.Span(f" on {ranks_text(d['ranks'])} only"
                      f"{' at step ' + str(d['step']) if d['step'] is not None else ''}"
                      f" ({d['cause'] or 'cause unknown'}{': ' + d['cause_source'] if d.get('cause_source') else ''})"
                      f"; {ranks_text(waiting)} {verb} "
                      f"{duration(wait) if wait is not None else 'an unmeasured time'} for it. "),
            html.Div(["Your code: ", html.Code(line)], className="user-line") if line else None,
            dcc.Link("Show on the timeline", href="/timeline" + q, className="divergent-link"),
        ], className="rec divergent-item"))
    return html.Div([*links, grid(divergent_table(div, frames), id="divergent-grid", columns=DIVERGENT_COLUMNS)])


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
