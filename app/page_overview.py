"""Overview: the runs the app serves (each with its top root cause), then the selected run's story — its root
causes most costly first, each with the symptoms it explains folded under it — and its ranks and steps."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Input, Output, dcc, html

from workbench import figures
from workbench.analyses import metrics
from workbench.analyses.findings import symptom_cost_ns, kind_spec, ranks_text
from workbench.analyses.summary import findings_costs, findings_table
from workbench.app import compute, page_breakdown, page_drift, page_hangs, page_pipeline, page_recompiles
from workbench.app.components import (
    bar_list, col, duration_column, error_panel, grid, pct_column, run_problems, safe, section, stats_row,
)
from workbench.app.store import RunStore, RunUnavailable
from workbench.format import cost, count, duration, kind_title, percent

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

#: The "Every finding" table's columns: a cost of zero (a note's, a hazard's) reads "no time cost", never "0 ns".
EVERY_FINDING_COLUMNS = [
    c if c["field"] != "cost_ns" else {**c, "format": cost}
    for c in FINDING_COLUMNS
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
    cost_attr: dict[str, Any] = {}
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
            cost_attr = {"data-cost-ns": str(h.cost_ns or 0)}
    return html.Tr([html.Td(link), html.Td(what, className="run-span", **({"data-span-ns": str(h.wall_ns)}
                                                                          if h is not None and h.wall_ns else {})),
                    html.Td(cause, className="run-cause"),
                    html.Td(cost, className="run-cost", **cost_attr),
                    html.Td("◀ shown below" if entry.id == current else "", className="muted")],
                   className="run-row current" if entry.id == current else "run-row", id=f"run-row-{entry.id}")


def runs_table(store: RunStore, current: str | None) -> html.Table:
    """Every run, the most costly top root cause first (runs still being analysed at the end)."""
    head = html.Thead(html.Tr([html.Th("Run"), html.Th("Device · span"), html.Th("Top root cause"),
                               html.Th("What it costs"), html.Th("")]))
    by_id = {e.id: e for e in store.entries}
    order = compute.runs_by_cost(store)
    first, rest = order[:RUNS_SHOWN], order[RUNS_SHOWN:]
    body = [html.Tbody([_run_row(store, by_id[r], current) for r in first])]
    table = html.Table([head, *body], className="runs-table", id="runs-table")
    if not rest:
        return table
    return html.Div([table, html.Details([
        html.Summary(f"{len(rest)} more run{'s' if len(rest) != 1 else ''}", id="runs-more-summary"),
        html.Table(html.Tbody([_run_row(store, by_id[r], current) for r in rest]), className="runs-table")],
        id="runs-more")])


#: The run list shows this many runs (the most costly first), the rest folded: the story stays on the first screen.
RUNS_SHOWN = 4


def _all_ready(store: RunStore) -> bool:
    return all(store.headline_ready(e.id) is not None for e in store.entries)


def runs_note(store: RunStore, current: str | None) -> Any:
    """What the run list says above the table: how many runs are analysed, and the most costly one."""
    done = sum(store.headline_ready(e.id) is not None for e in store.entries)
    parts: list[Any] = []
    if done < len(store.entries):
        parts.append(html.Span([html.Span(className="spinner"),
                                f"analysing the runs: {done} of {len(store.entries)} done"],
                               className="muted", id="runs-progress"))
    top = compute.most_costly(store)
    if top is not None and top != current:
        h = store.headline_ready(top)
        parts.append(html.Span([" Most costly: ", dcc.Link(top, href=f"/?run={top}", id="most-costly-link"),
                                f" ({kind_title(h.kind)}, {duration(h.cost_ns)})"], id="most-costly"))
    return html.Div(parts, id="runs-note")


def open_controls() -> html.Div:
    """A path box (checked on the server: inside the app's folders or an --allow-root, no links) and Refresh."""
    return html.Div([
        dcc.Input(id="open-path", type="text", placeholder="open a run: a folder or trace path on this machine",
                  debounce=True, className="open-path", maxLength=4096),
        html.Button("Open", id="open-path-button", n_clicks=0),
        html.Button("Refresh: find new runs", id="refresh-runs", n_clicks=0),
        html.Span(id="open-path-result", className="muted"),
    ], className="controls open-controls")


def runs_section(store: RunStore, current: str | None) -> Any:
    return section(
        "Runs: which one is worth looking at",
        open_controls(),
        html.Div([runs_note(store, current), runs_table(store, current)], id="runs-list"),
        html.Div("Each run's most costly root cause, the most costly run first; click a run to read its story.",
                 className="muted"),
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
        ("span", "span", duration(compute.run_span_ns(store, rid))),
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
        html.Div([html.Span("Run "), html.Code(rid), html.Span(f" · {run.path}", className="muted"),
                  html.Span([" · take it away: ",
                             html.A("HTML report", href=f"/export/report?run={rid}", id="export-report"), " · ",
                             html.A("compile config", href=f"/export/config?run={rid}", id="export-config"),
                             " · every table has a CSV link"], className="muted export-links")],
                 className="run-title"),
        run_problems(run),
        stats,
        section("What is wrong: root causes, most costly first", safe("Findings", _root_causes, store, rid),
                id="findings-section"),
        section("Every finding", safe("Findings", _findings_grid, store, rid), id="all-findings-section"),
        section("Ranks", grid(ranks, id="ranks-grid", columns=rank_cols)),
        section("Per rank, as workbench analyze prints it", safe("Per rank", _analyze_grid, store, rid)),
        section("Steps per rank", grid(step_stats(run.steps), id="steps-grid", columns=STEP_COLUMNS)),
    ])


ANALYZE_COLUMNS = [col("rank", "rank"), duration_column("step_time_ns", "step"),
                   duration_column("data_wait_median_ns", "data wait"), pct_column("compute_pct", "compute"),
                   pct_column("idle_pct", "idle"), pct_column("comm_compute_overlap_pct", "overlap"),
                   pct_column("exposed_comm_pct", "exposed"), duration_column("collective_wait_ns", "coll wait"),
                   col("recompiles", "recomp")]


def _analyze_grid(store: RunStore, rid: str) -> Any:
    """The per-rank table of ``workbench analyze`` (its columns, from the same summary)."""
    ranks = compute.summary(store, rid)["ranks"]
    schema = {"rank": pl.Int64, "step_time_ns": pl.Int64, "data_wait_median_ns": pl.Int64, "compute_pct": pl.Float64,
              "idle_pct": pl.Float64, "comm_compute_overlap_pct": pl.Float64, "exposed_comm_pct": pl.Float64,
              "collective_wait_ns": pl.Int64, "recompiles": pl.Int64}
    rows = [{"rank": int(r), **{k: e.get(k) for k in schema if k != "rank"}} for r, e in ranks.items()]
    return html.Div([grid(pl.DataFrame(rows, schema=schema), id="analyze-grid", columns=ANALYZE_COLUMNS),
                     html.Div("step: median step time (duration + data wait); data wait: median per step; overlap: "
                              "communication under compute; exposed: communication alone, % of the device window.",
                              className="muted")])


def drawn_step_ids(store: RunStore, rid: str) -> set[int]:
    """The steps the Timeline draws (the profiler's where a rank has them: the window with device activity)."""
    from workbench import timeline as tl

    def go():
        s = tl.drawn_steps(store.run(rid).steps)
        return set() if s.is_empty() else set(s["step"].drop_nulls().to_list())
    return store.cached(rid, "overview:drawn_steps", go)


def timeline_target(store: RunStore, rid: str, row: dict[str, Any]) -> tuple[str, str]:
    """The Timeline link of a finding and its text: at its first step the timeline draws; when none of its steps is
    in the recorded window, the whole run, and the text says so (never a silent jump elsewhere)."""
    q: dict[str, str] = {"run": rid}
    steps = list(row.get("steps") or [])
    drawn = drawn_step_ids(store, rid)
    shown = [s for s in steps if s in drawn]
    text = "Show on the timeline"
    if shown:
        q["step"] = str(shown[0])
        if shown[0] != steps[0]:
            text = f"Show step {shown[0]} on the timeline"
    elif not steps:
        text = "Show on the timeline (the whole run)"
    else:
        text = (f"Show the whole run on the timeline (step{'s' if len(steps) > 1 else ''} "
                f"{', '.join(map(str, steps[:4]))} {'are' if len(steps) > 1 else 'is'} outside the recorded window)")
    return "/timeline?" + urlencode(q), text


def timeline_href(rid: str, row: dict[str, Any]) -> str:
    """The Timeline around a finding: its first step, every rank (the waiting ones are what the story is about)."""
    q: dict[str, str] = {"run": rid}
    if row.get("steps"):
        q["step"] = str(row["steps"][0])
    return "/timeline?" + urlencode(q)


def page_has_content(store: RunStore, rid: str, key: str) -> str | None:
    """``None`` when page ``key`` explains something for this run, else why it would be empty (one line)."""
    if key == "breakdown":
        if compute.breakdown_ranks(store, rid).is_empty():
            return "no device activity to break down (a CPU run)"
    elif key == "pipeline":
        if not metrics.is_pipeline(compute.table(store, rid, "bubbles")):
            return "no pipeline stages recorded"
    elif key == "recompiles":
        if store.run(rid).compiles.is_empty():
            return "no compiles recorded"
    return None


def _why_link(store: RunStore, rid: str, kind: str) -> Any:
    page, page_name = kind_page(kind)
    missing = page_has_content(store, rid, kind_spec(kind).page)
    if missing:
        return html.Span(f"Why: {page_name} has {missing}; the message above is the evidence", className="muted")
    return dcc.Link(f"Why: {page_name}", href=f"{page}?run={rid}", className="root-page-link")


def symptom_cost(s_cost: Any, root_cost: Any) -> str:
    """A symptom's time as the part of its root cause's cost it lies in
    (:func:`~workbench.analyses.findings.symptom_cost_ns`: never more than that cost; a symptom measured over a
    slightly wider window says so)."""
    shown = symptom_cost_ns(s_cost, root_cost)
    if shown == s_cost or duration(s_cost) == duration(shown):
        return duration(shown)
    return f"{duration(shown)}: all of it (measured alone over its own window: {duration(s_cost)})"


def _root_item(store: RunStore, rid: str, i: int | None, row: dict[str, Any], symptoms: pl.DataFrame) -> html.Div:
    where = [ranks_text(row["ranks"]) if row["ranks"] else "no rank"]
    if row.get("steps"):
        where.append(("step " if len(row["steps"]) == 1 else "steps ") + ", ".join(map(str, row["steps"][:12])))
    tl_href, tl_text = timeline_target(store, rid, row)
    head = [html.Span(f"{i}. ", className="root-n")] if i is not None else []
    parts: list[Any] = [
        html.Div([*head, html.Strong(kind_title(row["kind"]), className="root-kind"),
                  html.Span(f" · {row['severity']}", className=f"sev sev-{row['severity']}")], className="root-head"),
        html.Div(cost_label(row["cost_ns"], row.get("cost_basis"), row.get("cost_method")), className="root-cost",
                 **{"data-cost-ns": str(row["cost_ns"] if row["cost_ns"] is not None else "")}),
        html.Div(row["message"], className="root-message"),
        html.Div([html.Span(" · ".join(where), className="muted"), " ",
                  dcc.Link(tl_text, href=tl_href, className="root-timeline-link"),
                  " · ", _why_link(store, rid, row["kind"]),
                  " · ", dcc.Link("What to do: Recommendations", href=f"/recommendations?run={rid}")],
                 className="root-links"),
    ]
    if symptoms.height:
        parts.append(html.Details([
            html.Summary(f"{count(symptoms.height, 'symptom')} this explains (their time is inside this cost, "
                         "not counted again)"),
            html.Ul([html.Li([html.Strong(kind_title(s["kind"])), " · ",
                              html.Span(symptom_cost(s["cost_ns"], row["cost_ns"]), className="symptom-cost",
                                        **{"data-cost-ns": str(symptom_cost_ns(s["cost_ns"], row["cost_ns"]))
                                           if s["cost_ns"] is not None else ""}),
                              " · ", html.Span(s["message"])], className="symptom")
                     for s in symptoms.iter_rows(named=True)]),
        ], className="symptoms"))
    rid_attr = {"id": f"root-{i}"} if i is not None else {}
    return html.Div(parts, className="rec root-cause" if i is not None else "rec root-note", **rid_attr)


def _root_causes(store: RunStore, rid: str) -> Any:
    f = compute.findings(store, rid)
    if f.is_empty():
        return html.Div("No findings: nothing the analyses consider a problem.", id="findings-empty")
    all_roots = list(f.filter(pl.col("is_root")).iter_rows(named=True))
    roots = [r for r in all_roots if compute.is_costly(r)]
    notes = [r for r in all_roots if not compute.is_costly(r)]
    items = [_root_item(store, rid, i, r, compute.symptoms_of(f, r["id"])) for i, r in enumerate(roots, 1)]
    out: list[Any] = items or [html.Div("No root cause costs time.", id="findings-empty")]
    if roots:
        costly = f.filter(pl.col("id").is_in([r["id"] for r in roots]))
        bars = findings_costs(costly).with_columns(color=pl.col("severity").map_elements(figures.severity_color,
                                                                                       return_dtype=pl.String))
        out.append(bar_list(bars, id="findings-figure", title="Root causes by the time they cost"))
    if notes:
        out.append(html.Details([html.Summary(f"Also noticed, costing no time ({count(len(notes), 'note')})"),
                                 *[_root_item(store, rid, None, r, compute.symptoms_of(f, r["id"])) for r in notes]],
                                id="root-notes", className="root-notes"))
    return html.Div(out)


def _findings_grid(store: RunStore, rid: str) -> Any:
    f = compute.findings(store, rid)
    if f.is_empty():
        return html.Div("None.", className="muted")
    return grid(findings_table(f), id="findings-grid", columns=EVERY_FINDING_COLUMNS)


def _analyse_new(store: RunStore, ids: list[str]) -> None:
    """Compute the run-list lines of runs added while the app runs, in a background thread."""
    import threading

    def go():
        for rid in ids:
            try:
                with store.in_background():
                    compute.headline(store, rid)
                store.release_if_unused(rid)
            except Exception:  # noqa: BLE001 - the run list shows the error line
                continue
    if ids:
        threading.Thread(target=go, daemon=True, name="workbench-new-runs").start()


def register(app, store: RunStore) -> None:
    """The run list refreshes while the runs are being analysed in the background; Open and Refresh add runs."""
    from dash import State, ctx, no_update

    @app.callback(Output("runs-list", "children"), Output("runs-poll", "disabled"),
                  Output("open-path-result", "children"), Output("run-select", "options"),
                  Input("runs-poll", "n_intervals"), Input("runs-current", "data"),
                  Input("open-path-button", "n_clicks"), Input("open-path", "n_submit"),
                  Input("refresh-runs", "n_clicks"), State("open-path", "value"), prevent_initial_call=True)
    def poll(_n, current, opened, submitted, refreshed, path):
        message: Any = no_update
        options: Any = no_update
        fired = set(ctx.triggered_prop_ids)   # only a click or an Enter acts (not the page drawing these inputs)
        if ("open-path-button.n_clicks" in fired and opened) or ("open-path.n_submit" in fired and submitted):
            try:
                ids = store.open_path(path or "")
            except RunUnavailable as exc:
                message = html.Span(str(exc), className="run-error-text", id="open-path-error")
            else:
                _analyse_new(store, [i for i in ids if store.headline_ready(i) is None])
                message = html.Span(["Opened: ", *[x for i in ids for x in (dcc.Link(i, href=f"/?run={i}"), " ")]],
                                    id="open-path-ok") if ids else "no run found there"
                options = [{"label": e.label, "value": e.id, "title": str(e.path)} for e in store.entries]
        elif "refresh-runs.n_clicks" in fired and refreshed:
            added = store.refresh()
            _analyse_new(store, added)
            message = html.Span(f"{len(added)} new run{'s' if len(added) != 1 else ''} found" +
                                (f": {', '.join(added)}" if added else ""), id="refresh-result")
            options = [{"label": e.label, "value": e.id, "title": str(e.path)} for e in store.entries]
        return [runs_note(store, current), runs_table(store, current)], _all_ready(store), message, options
