"""Batch report of one run: a self-contained HTML page (or JSON) built from the same figure builders as the app.

Example:
    >>> from workbench.report import build_report, render_html
    >>> rep = build_report(workbench.open("sample_traces/cpu-gloo-4rank"))      # doctest: +SKIP
    >>> Path("report.html").write_text(render_html(rep))                         # doctest: +SKIP
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

from workbench import figures
from workbench.analyses import metrics
from workbench.analyses.bubbles import pipeline_shape
from workbench.analyses.summary import findings_table
from workbench.format import cell, column_name, duration, kind_title, number
from workbench.schedule import schedule
from workbench.timeline import run_microbatches

PlotlyJS = Literal["inline", "cdn"]


@dataclass(slots=True)
class Report:
    """Everything a report shows: the run summary, analysis frames, figures, recommendations and the TOML."""

    title: str
    info: dict[str, Any]
    summary: dict[str, Any] | None
    sections: list[tuple[str, list[Any]]] = field(default_factory=list)  # (heading, [Figure | DataFrame | str])
    recommendations: pl.DataFrame | None = None
    compile_config: str | None = None
    problems: list[str] = field(default_factory=list)
    diff: dict[str, Any] | None = None  # a before/after report: ``RunDiff.to_dict()`` (what ``diff --json`` prints)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: ``run`` (info), ``summary`` (what ``workbench analyze --json`` prints), ``recommendations``,
        ``compile_config`` (TOML text) and ``problems`` (what could not be computed)."""
        return {
            "title": self.title,
            "run": self.info,
            "summary": self.summary,
            "recommendations": self.recommendations.to_dicts() if self.recommendations is not None else [],
            "compile_config": self.compile_config,
            "problems": self.problems,
            **({"diff": self.diff} if self.diff is not None else {}),
        }


def build_report(run: Any, *, title: str | None = None, timeline: bool = True) -> Report:
    """Run every analysis on ``run`` and lay out the report (no file written). Parts that fail are listed in
    ``problems`` and left out; the rest of the report is still built."""
    info = run.info()
    rep = Report(title=title or f"workbench report — {run.name}", info=info, summary=None, problems=list(run.problems))

    def attempt(what: str, fn):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failing analysis must not sink the report
            rep.problems.append(f"{what}: {type(exc).__name__}: {exc}")
            return None

    from workbench.analyses.summary import analysis_tables, summarize_tables

    tables = attempt("analyses", lambda: analysis_tables(run))   # None when they failed: their sections go
    if tables is not None:
        rep.summary = attempt("summary", lambda: summarize_tables(tables, run.ranks["rank"].to_list(), "steady"))

    # overview
    stats = {k: info.get(k) for k in ("ranks", "world_size", "steps", "span_ns", "events", "collectives", "compiles")}
    stats.update({k: number(v) for k, v in stats.items() if k in ("events", "collectives") and isinstance(v, int)})
    over: list[Any] = [f"Path: {info.get('path')}", stats]
    f = tables.findings if tables is not None else None
    if f is not None:
        over.append(figures.findings_figure(f.filter(pl.col("is_root"))))
        over.append(findings_table(f).drop("n"))
    rep.sections.append(("Overview: root causes first, each followed by the symptoms it explains", over))

    # timeline of the whole run (reduced)
    if timeline and (run.count("kernels") or run.collectives.height):
        def tl():  # only the drawn ranks' events are read (Run.subset): a 1024-rank run is never loaded whole
            ranks = sorted(set(run.ranks_with("kernels")) | set(run.steps["rank"].unique().to_list()))
            return figures.run_timeline(run.subset(ranks[:8]), ranks=ranks[:8])
        fig = attempt("timeline", tl)
        if fig is not None:
            rep.sections.append(("Timeline (where the run's activity is, first 8 ranks)", [fig]))

    # the critical path across ranks: who held whom back (docs/critical-path.md)
    cp = tables.critical_path if tables is not None else None
    if cp is not None and not cp.empty:
        def crit():
            from workbench import critical_path_view as cpv

            parts: list[Any] = [cpv.critical_path_figure(cp, steps_frame=run.steps), cpv.who_held_whom_figure(cp),
                                cpv.wait_matrix_figure(cp)]
            late = cp.lateness()
            if not late.is_empty():
                parts.append(late.rename({"culprit": "late rank", "ns": "held_back_ns"}))   # a duration, formatted
            if cp.clock.height > 1:
                parts.append(cp.clock)
            parts += cp.notes
            return parts
        parts = attempt("critical path", crit)
        if parts:
            rep.sections.append(("Critical path across ranks: who held whom back, doing what", parts))

    # breakdown
    br = tables.breakdown_by_rank if tables is not None else None
    if br is not None and not br.is_empty():
        rep.sections.append(("Breakdown & overlap (steady-state window)", [
            figures.stacked_bar_figure(br, x="rank", parts=["compute_ns", "comm_exposed_ns", "memory_exposed_ns",
                                                           "idle_ns"], scale=1e6, unit="ms",
                                       title="Device time per rank"),
            br.select("rank", "steps", *[c for c in ("compute_pct", "comm_exposed_pct", "memory_exposed_pct",
                                                      "idle_pct", "comm_overlap_pct", "comm_overlap_of_max_pct")
                                         if c in br.columns]),
        ]))

    # drift
    drift: list[Any] = [figures.step_time_figure(run.steps)]
    st = tables.stragglers if tables is not None else None
    if st is not None and not st.is_empty():
        drift.append(st.select([c for c in ("rank", "signal", "events", "held_count", "held_pct", "held_back_ns",
                                            "held_share_pct", "first_step", "trend") if c in st.columns]))
    matched = tables.collectives if tables is not None else None
    if matched is not None and not matched.is_empty():
        drift.append(figures.collective_skew_figure(matched))
        drift.append(figures.arrival_offset_figure(matched))
    rep.sections.append(("Drift and stragglers", drift))

    # pipeline
    bub = tables.bubbles if tables is not None else None
    if bub is not None and metrics.is_pipeline(bub):
        def pipe():
            mb = run_microbatches(run)
            _, _, theory = pipeline_shape(bub)
            steps = sorted(bub["step"].unique().to_list())
            step = steps[len(steps) // 2]
            lo, hi = bub.filter(pl.col("step") == step).select(pl.col("start").min(), pl.col("end").max()).row(0)
            kernels = run.scan("kernels").filter((pl.col("end") > lo) & (pl.col("start") < hi)).collect()
            return [figures.bubble_figure(bub, theory_pct=theory), schedule(bub, mb, kernels, step)]
        parts = attempt("pipeline", pipe)
        if parts:
            rep.sections.append(("Pipeline: bubble per stage and the schedule of one step", parts))

    # recompiles
    if run.compiles.height:
        def rc():
            from workbench.analyses.recompiles import classify_compiles

            c = classify_compiles(run.compiles)
            div = tables.divergent if tables is not None else pl.DataFrame()   # the findings' numbers
            parts: list[Any] = [figures.divergence_matrix_figure(c)]
            if div.height:
                parts.append(div.select([x for x in ("compile_id", "ranks", "missing_ranks", "step", "cause",
                                                     "cause_source", "duration_ns", "wait_ns", "cost_method")
                                         if x in div.columns]))
            parts.append(c.group_by("rank", "cause").len(name="compiles").sort("rank", "cause"))
            return parts
        parts = attempt("recompiles", rc)
        if parts:
            rep.sections.append(("Recompiles", parts))

    # recommendations
    def recs():
        from workbench.analyses.recommendations import ranked_fixes_run, recommendations_frame, to_compile_config
        from workbench.analyses.summary import run_findings

        roots = list(tables.roots) if tables is not None else run_findings(run)   # the analyses above
        fixes = ranked_fixes_run(run, roots)
        return recommendations_frame(fixes), to_compile_config(fixes)
    got = attempt("recommendations", recs)
    if got is not None:
        rep.recommendations, rep.compile_config = got
        shown = rep.recommendations.with_columns(
            pl.col("finding_kind").map_elements(kind_title, return_dtype=pl.String),
            pl.col("config").map_elements(config_text, return_dtype=pl.String))
        rep.sections.append(("Recommendations", [
            shown.select("rank", "title", "finding_kind", "expected_effect", "config", "code_advice", "location",
                         "apply"),
            ("toml", rep.compile_config),
        ]))
    return rep


def build_diff_report(before: Any, after: Any, *, title: str | None = None) -> Report:
    """A before/after report: the diff ``workbench diff`` prints (:func:`workbench.analyses.diff.diff_runs`), laid
    out as sections — comparability first, finding verdicts, step time, per-step metrics, changed ops."""
    from workbench.analyses.diff import RunData, diff_runs
    from workbench.analyses.summary import analysis_tables

    rep = Report(title=title or f"workbench diff — {before.name} → {after.name}",
                 info={"before": before.info(), "after": after.info()}, summary=None,
                 problems=[f"{which}: {p}" for which, r in (("before", before), ("after", after)) for p in r.problems])
    d = diff_runs(RunData.from_run(before, analysis_tables(before), name=str(before.path)),
                  RunData.from_run(after, analysis_tables(after), name=str(after.path)))
    rep.diff = d.to_dict()
    comp = d.comparability
    rep.sections.append((f"Comparability: {comp.level}", [d.headline(), pl.DataFrame(
        [{"differs": x.what, "before": x.before, "after": x.after, "effect": x.effect} for x in comp.differences],
        schema={k: pl.String for k in ("differs", "before", "after", "effect")})]))
    rep.sections.append(("Findings of BEFORE: verdicts, then new in AFTER",
                         [d.findings_frame().with_columns(pl.col("kind").map_elements(kind_title,
                                                                                       return_dtype=pl.String))]))
    sb, sa, st = d.steps_before, d.steps_after, d.step_time
    step_fig = go.Figure([go.Box(y=[v / 1e6 for v in vals], name=name, boxpoints="all")
                          for name, vals in (("before", _step_values(before)), ("after", _step_values(after)))])
    step_fig.update_layout(title="Step time per step (ms, log scale)", height=360)
    step_fig.update_yaxes(type="log")
    rep.sections.append(("Step time", [
        f"median {duration(sb.median_ns)} over {sb.n} {sb.source or '-'} steps → "
        f"{duration(sa.median_ns)} over {sa.n}: {st.verdict} ({st.reason})", step_fig]))
    m = d.metrics_frame().filter(pl.col("direction") != "n/a")
    shown = [pl.struct(c, "unit").map_elements(lambda r, c=c: _metric_value(r[c], r["unit"]), return_dtype=pl.String)
             .alias(c) for c in ("before", "after")]
    rep.sections.append(("Per step", [m.with_columns(*shown).drop("unit")]))   # each value carries its unit
    ops = d.ops_frame()
    if not ops.is_empty():   # its "kind" is kernel / cpu_op, not a finding's kind
        rep.sections.append(("Kernels and CPU ops per step (most changed)",
                             [ops.with_columns(pl.col("kind").str.replace_all("_", " ")).rename({"kind": "activity"})]))
    return rep


def config_text(config: str | None) -> str | None:
    """A fix's config (JSON of nested sections) as the settings it makes, one per line:
    ``compiler.dynamic_sources = "L['x']:0"``."""
    if not config:
        return config
    flat: list[str] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), x)
        else:
            flat.append(f"{prefix} = {json.dumps(v)}")

    try:
        walk("", json.loads(config))
    except ValueError:
        return config
    return "\n".join(flat)


def _metric_value(v: float | None, unit: str) -> str:
    """A diff metric as shown: a count as it is, else a duration."""
    return number(v) if unit == "count" else duration(v)


def _step_values(run: Any) -> list[float]:
    from workbench.analyses.diff import job_step_times

    return job_step_times(run.steps)[1]


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;background:#f6f7f9}
section{background:#fff;border:1px solid #e3e6ea;border-radius:6px;padding:12px 16px;margin:14px 0}
h1{font-size:22px} h2{font-size:17px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:12px;margin:8px 0;width:100%}
th,td{border:1px solid #e3e6ea;padding:3px 6px;text-align:left;vertical-align:top;white-space:pre-line} th{background:#f1f3f5}
pre{background:#111827;color:#e5e7eb;padding:12px;border-radius:6px;font-size:12px;overflow:auto}
.problems{background:#fdecea;border:1px solid #f5c2c0} .muted{color:#6b7280;font-size:13px}
"""


def _table_html(frame: pl.DataFrame, max_rows: int = 200) -> str:
    """A table as a person reads it: human column names and every cell through :func:`workbench.format.cell`
    (``*_ns`` columns as durations, ``*_pct`` as percents)."""
    head = "".join(f"<th>{html.escape(column_name(c))}</th>" for c in frame.columns)
    rows = []
    for r in frame.head(max_rows).iter_rows():
        cells = [f"<td>{html.escape(cell(v, c))}</td>" for c, v in zip(frame.columns, r)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p class='muted'>{frame.height - max_rows} more rows not shown</p>" if frame.height > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def render_html(report: Report, *, plotlyjs: PlotlyJS = "inline", perfetto_href: str | None = None) -> str:
    """The report as one HTML page; ``plotlyjs="inline"`` embeds plotly.js (works offline), ``"cdn"`` links it;
    ``perfetto_href``: the run's Perfetto trace beside the page (``workbench report --perfetto``), linked under the
    title."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(report.title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(report.title)}</h1>"
             f"<p class='muted'>generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}</p>"]
    if perfetto_href:
        parts.append(f"<p><a href='{html.escape(perfetto_href, quote=True)}' download id='perfetto'>Download for "
                     f"Perfetto</a> (the whole run; open it in ui.perfetto.dev)</p>")
    first = True
    for heading, items in report.sections:
        parts.append(f"<section><h2>{html.escape(heading)}</h2>")
        for item in items:
            if isinstance(item, go.Figure):
                parts.append(pio.to_html(item, full_html=False, include_plotlyjs=(plotlyjs if first else False),
                                         config={"displaylogo": False}))
                first = False
            elif isinstance(item, pl.DataFrame):
                parts.append(_table_html(item))
            elif isinstance(item, tuple) and item and item[0] == "toml":
                parts.append(f"<pre>{html.escape(item[1] or '')}</pre>")
            elif isinstance(item, dict):
                parts.append(_table_html(pl.DataFrame([{k: json.dumps(v) if isinstance(v, dict) else v
                                                        for k, v in item.items()}])))
            else:
                parts.append(f"<p>{html.escape(str(item))}</p>")
        parts.append("</section>")
    if report.problems:
        parts.append("<section class='problems'><h2>Problems</h2><ul>"
                     + "".join(f"<li>{html.escape(p)}</li>" for p in report.problems) + "</ul></section>")
    parts.append("</body></html>")
    return "".join(parts)
