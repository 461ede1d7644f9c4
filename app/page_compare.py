"""Compare: two runs side by side — the diff the analyses compute, and the same figures for both runs."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, dcc, html, no_update

from workbench import figures
from workbench.app import compute
from workbench.app.components import error_panel, fmt_ms, graph, grid, safe, section
from workbench.app.store import RunStore

PATH = "/compare"
NAME = "Compare"
KEY = "compare"


def _fmt_metric(metric: str, v: float | None) -> str:
    if v is None:
        return "–"
    if metric.endswith("_pct"):
        return f"{v:.1f} %"
    if metric.endswith("_ns") or "_ns." in metric:
        return f"{v / 1e6:,.3f} ms"
    return f"{v:,.3f}"


def metrics_table(m: pl.DataFrame) -> pl.DataFrame:
    """The diff grid as shown (tests compare it with :func:`workbench.analyses.diff.diff_summaries`)."""
    rows = []
    for r in m.iter_rows(named=True):
        pct = r["delta_pct"]
        rows.append({
            "scope": r["scope"], "metric": r["metric"],
            "before": _fmt_metric(r["metric"], r["before"]), "after": _fmt_metric(r["metric"], r["after"]),
            "delta": _fmt_metric(r["metric"], r["delta"]),
            "change": "–" if pct is None else f"{pct:+.1f}{' pts' if r['metric'].endswith('_pct') else ' %'}",
            "direction": r["direction"],
        })
    return pl.DataFrame(rows, schema={k: pl.String for k in
                                      ("scope", "metric", "before", "after", "delta", "change", "direction")})


def layout(pctx) -> Any:
    store, rid, q = pctx.store, pctx.run_id, pctx.query
    if len(store.entries) < 2:
        return error_panel("Compare needs two runs", "Start the app with at least two runs.")
    others = [e.id for e in store.entries if e.id != rid]
    other = q.get("other") if q.get("other") in store.ids() else others[0]
    opts = [{"label": e.label, "value": e.id} for e in store.entries]
    return html.Div([
        html.Div([
            html.Div([html.Label("Before"), dcc.Dropdown(id="compare-before", options=opts, value=rid,
                                                         clearable=False)]),
            html.Div([html.Label("After"), dcc.Dropdown(id="compare-after", options=opts, value=other,
                                                        clearable=False)]),
        ], className="controls"),
        html.Div(_body(store, rid, other), id="compare-body"),
    ])


def _body(store: RunStore, before: str, after: str) -> Any:
    return html.Div([
        section(f"Diff: {before} → {after}", safe("Diff", _diff, store, before, after), id="diff-section"),
        html.Div([_side(store, before, "before"), _side(store, after, "after")], className="two-col"),
    ])


def _diff(store: RunStore, before: str, after: str) -> Any:
    d = compute.diff(store, before, after)
    m, f = d["metrics"], d["findings"]
    job = m.filter((pl.col("scope") == "job") & pl.col("metric").str.ends_with("_ns")
                   & pl.col("before").is_not_null() & pl.col("after").is_not_null())
    parts: list[Any] = []
    changed = m.filter(pl.col("direction").is_in(["better", "worse"]))
    headline = ", ".join(f"{r['metric']} {r['direction']} ({r['delta_pct']:+.1f}{' pts' if r['metric'].endswith('_pct') else ' %'})"
                         for r in changed.filter(pl.col("scope") == "job").head(4).iter_rows(named=True)
                         if r["delta_pct"] is not None)
    parts.append(html.Div(headline or "No job-level change above the noise threshold.", id="diff-headline",
                          className="muted"))
    if not job.is_empty():
        parts.append(graph(figures.diff_figure(job, metric="metric", before="before", after="after", scale=1e6,
                                               unit="ms", title="Job-level times, before vs after"),
                           id="diff-figure"))
    shown = m.filter(pl.col("before").is_not_null() | pl.col("after").is_not_null())  # drop metrics neither run has
    parts.append(grid(metrics_table(shown), id="diff-grid", page_size=25))
    if not f.is_empty():
        parts += [html.H4("Findings"), grid(f.with_columns(
            pl.col("before_cost_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("before_ms"),
            pl.col("after_cost_ns").map_elements(fmt_ms, return_dtype=pl.String, skip_nulls=False).alias("after_ms"),
        ).select("kind", "before_ms", "after_ms", "status"), id="diff-findings-grid")]
    return html.Div(parts)


def _side(store: RunStore, rid: str, which: str) -> Any:
    def build():
        run = store.run(rid)
        parts = [graph(figures.step_time_figure(run.steps, title=f"Step time · {rid}"), id=f"compare-steps-{which}")]
        med = run.steps["dur"].median() if run.steps.height else None
        parts.insert(0, html.Div(f"median step {fmt_ms(med)} ms · {run.compiles.height} compiles",
                                 className="muted", id=f"compare-summary-{which}"))
        return html.Div(parts)
    return section(f"{which}: {rid}", safe(rid, build))


def register(app, store: RunStore) -> None:
    @app.callback(Output("compare-body", "children"), Input("compare-before", "value"),
                  Input("compare-after", "value"), prevent_initial_call=True)
    def change(before, after):
        if not before or not after:
            return no_update
        return _body(store, before, after)

