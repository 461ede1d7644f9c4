"""Overview: the runs the app serves (each with its top root cause), then the selected run's story — its root
causes most costly first, each with the symptoms it explains folded under it — and its ranks and steps."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Input, Output, dcc, html

from workbench import figures
from workbench.analyses import metrics
from workbench.analyses.findings import kind_spec, ranks_text
from workbench.analyses.summary import findings_costs, findings_table
from workbench.app import compute, page_breakdown, page_drift, page_hangs, page_pipeline, page_recompiles
from workbench.app.components import (
    bar_list, col, duration_column, error_panel, grid, run_problems, safe, section, stats_row,
)
from workbench.app.store import RunStore
from workbench.format import count, duration, kind_title, percent

PATH = "/"
NAME = "Overview"
KEY = "overview"

#: The pages a finding can link to, by their KEY (``KindSpec.page``).
_PAGES = {p.KEY: (p.PATH, p.NAME) for p in (page_breakdown, page_drift, page_hangs, page_pipeline, page_recompiles)}


def kind_page(kind: str) -> tuple[str, str]:
    """(path, name) of the page that explains ``kind`` best (its ``KindSpec.page``)."""
    return _PAGES[kind_spec(kind).page]


def cost_label(cost_ns: Any, basis: str | None, method: str | None = None) -> str:
    """``"2.57 s measured (collective wait in the same step)"``; the basis is left out when unknown."""
    text = duration(cost_ns)
    if basis:
        text += f" {basis}"
    if method:
        text += f" ({method})"
    return text


FINDING_COLUMNS = [
    col("n", "#"), col("kind", "Finding"), col("role", "Role", wrapText=True),
    col("severity", "Severity"), duration_column("cost_ns", "Cost"),
    col("cost_basis", "Cost basis"), col("ranks", "Ranks"), col("steps", "Steps"),
    col("message", "What was seen", wrapText=True),
]


def step_stats(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank: steps seen, first and last, the median step time, the longest step after the first and the median
    data wait (:func:`workbench.analyses.metrics.step_summary`: what ``workbench analyze`` prints)."""
    return metrics.step_summary(steps)


STEP_COLUMNS = [col("rank", "Rank"), col("steps", "Steps"), col("first_step", "First step"),
                col("last_step", "Last step"), duration_column("median_ns", "Median step time"),
                duration_column("max_ns", "Longest step after the first"),
                duration_column("data_wait_median_ns", "Median data wait"), col("source", "Steps from")]


# ------------------------------------------------------------------------------------------------ run list


def _run_row(store: RunStore, entry, current: str | None) -> html.Tr:
    h = store.headline_ready(entry.id)
    link = dcc.Link(entry.label, href=f"/?run={entry.id}", className="run-link", id=f"run-link-{entry.id}")
    if h is None:
        what, cause, cost = "…", html.Span("analysing…", className="muted"), ""
    elif h.error:
        what, cause, cost = "–", html.Span(h.error, className="run-error-text"), ""
    else:
        what = ("GPU" if h.gpu else "CPU") + (f" · {duration(h.wall_ns)}" if h.wall_ns else "")
        if h.kind is None:
            cause, cost = html.Span("nothing found", className="muted"), ""
        else:
            cause = html.Span(kind_title(h.kind), title=h.message or "")
            pct = 100 * h.cost_ns / h.wall_ns if h.wall_ns and h.cost_ns else None
            share = f" · {percent(pct, 0)} of the run's span" if pct is not None and pct <= 100 else ""
            cost = cost_label(h.cost_ns, h.cost_basis) + share
    return html.Tr([html.Td(link), html.Td(what), html.Td(cause, className="run-cause"),
                    html.Td(cost, className="run-cost"), html.Td("◀ shown below" if entry.id == current else "",
                                                                 className="muted")],
                   className="run-row current" if entry.id == current else "run-row", id=f"run-row-{entry.id}")


def runs_table(store: RunStore, current: str | None) -> html.Table:
    head = html.Thead(html.Tr([html.Th("Run"), html.Th("Device · span"), html.Th("Top root cause"),
                               html.Th("What it costs"), html.Th("")]))
    return html.Table([head, html.Tbody([_run_row(store, e, current) for e in store.entries])],
                      className="runs-table", id="runs-table")


def _all_ready(store: RunStore) -> bool:
    return all(store.headline_ready(e.id) is not None for e in store.entries)


def runs_section(store: RunStore, current: str | None) -> Any:
    return section(
        "Runs: which one is worth looking at",
        html.Div(runs_table(store, current), id="runs-list"),
        html.Div("Each run's most costly root cause; click a run to read its story.", className="muted"),
        dcc.Interval(id="runs-poll", interval=1500, disabled=_all_ready(store), max_intervals=400),
        dcc.Store(id="runs-current", data=current),
        id="runs-section",
    )


# --------------------------------------------------------------------------------------------- the story


def layout(pctx) -> Any:
    store, rid = pctx.store, pctx.run_id
    if rid is None:
        return html.Div([runs_section(store, rid),
                         error_panel("No runs", "No runs were found under the paths the app was started with.")])
    run_part = store.cached(rid, "page:overview:story", lambda: safe("Run", _run_part, store, rid)) \
        if store.entry(rid) is not None else safe("Run", _run_part, store, rid)
    return html.Div([runs_section(store, rid), run_part])


def _run_part(store: RunStore, rid: str) -> Any:
    run = store.run(rid)
    info = store.cached(rid, "info", run.info)
    stats = stats_row([
        ("world_size", "world size", str(info.get("world_size") or "–")),
        ("ranks", "ranks loaded", str(len(info["ranks"]))),
        ("steps", "steps", str(info["steps"])),
        ("span", "span", duration(info["span_ns"])),
        ("kernels", "device activities", f"{run.count('kernels'):,}"),
        ("collectives", "collectives", f"{info['collectives']:,}"),
        ("compiles", "compiles", f"{info['compiles']:,}"),
    ])
    ranks = run.ranks.select([c for c in ("rank", "host", "device_name", "backend", "torch_version", "nccl_version")
                              if c in run.ranks.columns and (c == "rank" or run.ranks[c].null_count() < run.ranks.height)])
    rank_cols = [col(c, h) for c, h in (("rank", "Rank"), ("host", "Host"), ("device_name", "Device"),
                                        ("backend", "Backend"), ("torch_version", "torch"),
                                        ("nccl_version", "NCCL")) if c in ranks.columns]
    return html.Div([
        html.Div([html.Span("Run "), html.Code(rid), html.Span(f" · {run.path}", className="muted")],
                 className="run-title"),
        run_problems(run),
        stats,
        section("What is wrong: root causes, most costly first", safe("Findings", _root_causes, store, rid),
                id="findings-section"),
        section("Every finding", safe("Findings", _findings_grid, store, rid), id="all-findings-section"),
        section("Ranks", grid(ranks, id="ranks-grid", columns=rank_cols)),
        section("Steps per rank", grid(step_stats(run.steps), id="steps-grid", columns=STEP_COLUMNS)),
    ])


def timeline_href(rid: str, row: dict[str, Any]) -> str:
    """The Timeline around a finding: its first step, every rank (the waiting ones are what the story is about)."""
    q: dict[str, str] = {"run": rid}
    if row.get("steps"):
        q["step"] = str(row["steps"][0])
    return "/timeline?" + urlencode(q)


def _root_item(rid: str, i: int, row: dict[str, Any], symptoms: pl.DataFrame) -> html.Div:
    page, page_name = kind_page(row["kind"])
    where = [ranks_text(row["ranks"]) if row["ranks"] else "no rank"]
    if row.get("steps"):
        where.append(("step " if len(row["steps"]) == 1 else "steps ") + ", ".join(map(str, row["steps"][:12])))
    parts: list[Any] = [
        html.Div([html.Span(f"{i}. ", className="root-n"), html.Strong(kind_title(row["kind"]), className="root-kind"),
                  html.Span(f" · {row['severity']}", className=f"sev sev-{row['severity']}")], className="root-head"),
        html.Div(cost_label(row["cost_ns"], row.get("cost_basis"), row.get("cost_method")), className="root-cost"),
        html.Div(row["message"], className="root-message"),
        html.Div([html.Span(" · ".join(where), className="muted"), " ",
                  dcc.Link("Show on the timeline", href=timeline_href(rid, row), className="root-timeline-link"),
                  " · ", dcc.Link(f"Why: {page_name}", href=f"{page}?run={rid}", className="root-page-link"),
                  " · ", dcc.Link("What to do: Recommendations", href=f"/recommendations?run={rid}")],
                 className="root-links"),
    ]
    if symptoms.height:
        parts.append(html.Details([
            html.Summary(f"{count(symptoms.height, 'symptom')} this explains (their time is inside this cost, "
                         "not counted again)"),
            html.Ul([html.Li([html.Strong(kind_title(s["kind"])), f" · {duration(s['cost_ns'])} · ",
                              html.Span(s["message"])], className="symptom")
                     for s in symptoms.iter_rows(named=True)]),
        ], className="symptoms"))
    return html.Div(parts, className="rec root-cause", id=f"root-{i}")


def _root_causes(store: RunStore, rid: str) -> Any:
    f = compute.findings(store, rid)
    if f.is_empty():
        return html.Div("No findings: nothing the analyses consider a problem.", id="findings-empty")
    roots = f.filter(pl.col("is_root"))
    items = [_root_item(rid, i, r, compute.symptoms_of(f, r["id"]))
             for i, r in enumerate(roots.iter_rows(named=True), 1)]
    bars = findings_costs(roots).with_columns(color=pl.col("severity").map_elements(figures.severity_color,
                                                                                 return_dtype=pl.String))
    return html.Div([*items, bar_list(bars, id="findings-figure",
                                      title="Root causes by the time they cost")])


def _findings_grid(store: RunStore, rid: str) -> Any:
    f = compute.findings(store, rid)
    if f.is_empty():
        return html.Div("None.", className="muted")
    return grid(findings_table(f), id="findings-grid", columns=FINDING_COLUMNS)


def register(app, store: RunStore) -> None:
    """The run list refreshes while the runs are being analysed in the background."""

    @app.callback(Output("runs-list", "children"), Output("runs-poll", "disabled"), Input("runs-poll", "n_intervals"),
                  Input("runs-current", "data"), prevent_initial_call=True)
    def poll(_n, current):
        return runs_table(store, current), _all_ready(store)
