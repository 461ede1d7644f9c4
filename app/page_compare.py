"""Compare: did the change work? The one diff (:func:`workbench.analyses.diff.diff_runs`, as ``workbench diff``):
comparability first, a verdict per finding, step time with its uncertainty, per-step metrics, changed ops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from dash import Input, Output, dcc, html, no_update

from workbench import figures
from workbench.analyses.diff import RunData, RunDiff, comparability, job_step_times, step_stats
from workbench.app import compute
from workbench.app.components import (
    col, duration_column, error_panel, graph, grid, info_panel, lazy_graph, safe, section,
)
from workbench.app.store import RunStore
from workbench.format import duration, kind_title

PATH = "/compare"
NAME = "Compare"
KEY = "compare"
#: The layout depends only on the run and the URL query (the other run): built once, then served from the cache.
CACHE = True
NONE = "__none__"


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "–"
    return f"{v:g}" if unit == "count" else duration(v)


def metrics_table(d: RunDiff) -> pl.DataFrame:
    """The per-step grid as shown (the browser test compares it with :func:`~workbench.analyses.diff.diff_runs`)."""
    rows = [{"metric": m.name, "before": _value(m.before, m.unit), "after": _value(m.after, m.unit),
             "change": "–" if m.change_pct is None else f"{m.change_pct:+.1f} %", "direction": m.direction,
             "basis": m.basis} for m in d.metrics if m.direction != "n/a"]
    return pl.DataFrame(rows, schema={k: pl.String for k in ("metric", "before", "after", "change", "direction",
                                                             "basis")})


METRIC_COLUMNS = [col("metric", "Metric"), col("before", "Before"), col("after", "After"), col("change", "Change"),
                  col("direction", "Direction"), col("basis", "Basis")]
FINDING_COLUMNS = [col("verdict", "Verdict"), col("kind", "Finding"), col("ranks", "Ranks"), col("steps", "Steps"),
                   duration_column("before_cost_ns", "Cost before"), duration_column("after_cost_ns", "Cost after"),
                   col("evidence", "Evidence", wrapText=True), col("caveat", "Caveat", wrapText=True)]
OPS_COLUMNS = [col("kind", "Kind"), col("status", "Status"), col("name", "Name", wrapText=True),
               col("before_count", "Count before (per step)"), col("after_count", "Count after (per step)"),
               duration_column("before_ns", "Time before (per step)"), duration_column("after_ns", "Time after (per step)"),
               duration_column("delta_ns", "Change (per step)")]


def findings_table(d: RunDiff) -> pl.DataFrame:
    """Verdicts on BEFORE's findings, then AFTER's new ones, as shown."""
    f = d.findings_frame()
    return f.with_columns(pl.col("kind").map_elements(kind_title, return_dtype=pl.String, skip_nulls=False)).select(
        "verdict", "kind", "ranks", "steps", "before_cost_ns", "after_cost_ns", "evidence", "caveat")


def _run_json(store: RunStore, rid: str) -> dict[str, Any]:
    from workbench import rundir

    e = store.entry(rid)
    if e is None or not e.is_run_dir:
        return {}
    try:
        return rundir.read_json(Path(e.path) / rundir.RUN_JSON)
    except Exception:  # noqa: BLE001 - no run.json: no cheap identity, no default
        return {}


def identity(store: RunStore, rid: str) -> RunData:
    """What :func:`~workbench.analyses.diff.comparability` reads of a run, without its events: the small tables,
    ``run.json`` and one kernel row (whether it recorded device data) — cached per run."""
    def go():
        run = store.run(rid)
        return RunData.from_run(_Small(run), {}, name=rid)
    return store.cached(rid, "compare:identity", go)


class _Small:
    """A run's small tables, one kernel row and no events: the view :func:`identity` builds from."""

    def __init__(self, run: Any):
        for k in ("steps", "collectives", "compiles", "fingerprints", "ranks"):
            setattr(self, k, getattr(run, k))
        self.kernels = run.scan("kernels").head(1).collect()
        self.events = pl.DataFrame()
        self.meta = dict(getattr(run, "meta", None) or {})


def same_job_default(store: RunStore, rid: str) -> str | None:
    """A run of the same job as ``rid`` in the same environment (same script and world size in ``run.json``, then
    the diff's comparability check finding no difference but the config), newest first; None when there is none."""
    me = _run_json(store, rid)
    if not me.get("argv"):
        return None
    key = (Path(str(me["argv"][0])).name, me.get("world_size"))
    cands = []
    for e in store.entries:
        if e.id == rid:
            continue
        other = _run_json(store, e.id)
        if other.get("argv") and (Path(str(other["argv"][0])).name, other.get("world_size")) == key:
            cands.append((str(other.get("created") or ""), e.id))
    for _, cid in sorted(cands, reverse=True):
        try:  # the comparability check reads the runs' small tables only: no analysis for a rejected candidate
            # only a pair that differs in nothing but its config: a GPU run is never paired with a CPU run (or
            # another backend, device, torch) by default — the user may still choose one, marked with warnings
            if comparability(identity(store, rid), identity(store, cid)).level == "comparable":
                return cid
        except Exception:  # noqa: BLE001 - a broken candidate is no default
            continue
    return None


def layout(pctx) -> Any:
    store, rid, q = pctx.store, pctx.run_id, pctx.query
    if len(store.entries) < 2:
        return error_panel("Compare needs two runs", "Start the app with at least two runs.")
    other = q.get("other") if q.get("other") in store.ids() else store.cached(
        rid, "compare:default", lambda: same_job_default(store, rid))
    opts = [{"label": e.label, "value": e.id} for e in store.entries]
    return html.Div([
        html.Div([
            html.Div([html.Label("Before"), dcc.Dropdown(id="compare-before", options=opts, value=rid,
                                                         clearable=False)]),
            html.Div([html.Label("After"), dcc.Dropdown(
                id="compare-after", options=[{"label": "– choose a run –", "value": NONE}] + opts,
                value=other or NONE, clearable=False)]),
        ], className="controls"),
        html.Div(_body(store, rid, other), id="compare-body"),
        dcc.Store(id="compare-url-sync"),
    ])


def _body(store: RunStore, before: str, after: str | None) -> Any:
    if not after or after == NONE:
        return info_panel(["No run of the same job in the same environment (same script, world size and compiled "
                           "model; same device, backend and torch) was found. Choose the AFTER run above: runs of "
                           "other jobs are marked not comparable, other environments compared with warnings."],
                          id="compare-no-default")
    return html.Div([
        section(f"Diff: {before} → {after}", safe("Diff", _diff, store, before, after), id="diff-section"),
        html.Div([_side(store, before, "before"), _side(store, after, "after")], className="two-col"),
    ])


def comparability_panel(d: RunDiff) -> Any:
    c = d.comparability
    items = [html.Li(f"{x.what}: {x.before} → {x.after} ({x.effect})") for x in c.differences]
    cls = "panel" if c.level != "comparable" else "panel panel-info"  # not an app error: no panel-error
    style = {"not comparable": {"background": "#fdecea", "border": "1px solid #f5c2c0", "color": "#8a1c16"},
             "warnings": {"background": "#fff8e1", "border": "1px solid #f3d37a"}}.get(c.level, {})
    text = {"not comparable": "Not comparable: these are different jobs, so no verdict below is a verdict.",
            "warnings": "Comparable with warnings: the environment differs or a run was read with problems, so "
                        "verdicts may reflect it.",
            "comparable": "Comparable: same job, same environment."}[c.level]
    problems = [html.Li(f"{side}: {p}") for side, ps in (("BEFORE", d.problems_before), ("AFTER", d.problems_after))
                for p in ps[:10]]
    return html.Div([html.Strong(text), html.Ul(items) if items else None,
                     html.Div([html.Div("Read problems:"), html.Ul(problems)], id="compare-read-problems")
                     if problems else None],
                    className=cls, style=style, id="compare-comparability", **{"data-level": c.level})


def _diff(store: RunStore, before: str, after: str) -> Any:
    d = compute.diff(store, before, after)
    st, sb, sa = d.step_time, d.steps_before, d.steps_after
    parts: list[Any] = [
        comparability_panel(d),
        html.Div(d.headline(), id="diff-headline", className="headline"),
        html.H4("Findings of BEFORE: verdicts"),
        grid(findings_table(d), id="diff-findings-grid", columns=FINDING_COLUMNS) if d.findings or d.new_findings
        else html.Div("BEFORE has no findings.", className="muted"),
        html.Div(f"Step time (median): {duration(sb.median_ns)} over {sb.n} {sb.source or '-'} steps → "
                 f"{duration(sa.median_ns)} over {sa.n}: {st.verdict} ({st.reason})", id="diff-step-time",
                 className="muted", **{"data-verdict": st.verdict}),
    ]
    per_step = d.metrics_frame().filter((pl.col("unit") == "ns/step") & pl.col("before").is_not_null()
                                        & pl.col("after").is_not_null() & (pl.col("name") != "worst step"))
    if not per_step.is_empty():
        parts.append(graph(figures.diff_figure(per_step, metric="name", before="before", after="after", scale=1e6,
                                               unit="ms per step", title="Per step, before vs after"),
                           id="diff-figure"))
    parts += [html.H4("Per step"), grid(metrics_table(d), id="diff-grid", columns=METRIC_COLUMNS)]
    ops = d.ops_frame()
    if not ops.is_empty():
        parts += [html.H4("Kernels and CPU ops per step (most changed)"),
                  grid(ops.with_columns([pl.col(c).round(1) for c in ("before_count", "after_count")]),
                       id="diff-ops-grid", columns=OPS_COLUMNS)]
    return html.Div(parts)


def _side(store: RunStore, rid: str, which: str) -> Any:
    def build():
        run = store.run(rid)
        parts = [lazy_graph(figures.step_time_figure(run.steps, title=f"Step time · {rid}"), id=f"compare-steps-{which}")]
        stats = step_stats(*job_step_times(run.steps))  # the diff's own step-time definition
        parts.insert(0, html.Div(f"median step {duration(stats.median_ns)} over {stats.n} {stats.source or '-'} steps · "
                                 f"{run.compiles.height} compiles", className="muted", id=f"compare-summary-{which}"))
        return html.Div(parts)
    return section(f"{which}: {rid}", safe(rid, build))


#: The chosen runs go into the address bar (``?run=BEFORE&other=AFTER``) without reloading the page: a reload or a
#: shared link shows the same pair.
_URL_SYNC_JS = """
function(before, after) {
    const q = new URLSearchParams(window.location.search);
    if (before) { q.set('run', before); }
    if (after && after !== '__none__') { q.set('other', after); } else { q.delete('other'); }
    window.history.replaceState(window.history.state, '', window.location.pathname + '?' + q.toString());
    return window.dash_clientside.no_update;
}
"""


def register(app, store: RunStore) -> None:
    app.clientside_callback(_URL_SYNC_JS, Output("compare-url-sync", "data"), Input("compare-before", "value"),
                            Input("compare-after", "value"), prevent_initial_call=True)
    @app.callback(Output("compare-body", "children"), Input("compare-before", "value"),
                  Input("compare-after", "value"), prevent_initial_call=True)
    def change(before, after):
        if not before or not after:
            return no_update
        return store.cached(before, f"compare:body:{after}", lambda: _body(store, before, after))
