"""Small layout pieces every page uses: panels for errors and missing analyses, stat cards, tables, figures."""

from __future__ import annotations

import json
import logging
from typing import Any

import polars as pl
from dash import dcc, html

from workbench.errors import one_line
from workbench.format import cell, column_name, count, duration, percent


def error_panel(title: str, detail: str, *, id: str | None = None) -> html.Div:
    """A red panel: something could not be shown (a broken run, a failed analysis); the rest of the page works."""
    kw = {"id": id} if id else {}
    return html.Div([html.Strong(title), html.Pre(detail, className="panel-detail")],
                    className="panel panel-error", **kw)


def info_panel(children: Any, *, id: str | None = None) -> html.Div:
    kw = {"id": id} if id else {}
    return html.Div(children, className="panel panel-info", **kw)


def pct_column(field: str, header: str, *, digits: int = 1) -> dict[str, Any]:
    """A table column of a percentage (0–100), shown as ``"12.3 %"`` (:func:`workbench.format.percent`)."""
    return {"field": field, "headerName": header, "format": lambda v: percent(v, digits), "numeric": True}


def duration_column(field: str, header: str) -> dict[str, Any]:
    """A table column of a duration in ns (the row holds the integer), shown with the unit that reads best
    (``"307 ns"``, ``"12 µs"``, ``"1.3 ms"``, ``"2.57 s"``: :func:`workbench.format.duration`)."""
    return {"field": field, "headerName": header, "format": duration, "numeric": True}


def col(field: str, header: str, *, wrapText: bool = False) -> dict[str, Any]:
    """A plain table column with a full header (``wrapText=True``: long text that may break anywhere)."""
    return {"field": field, "headerName": header, "wrapText": wrapText}


def stat_card(label: str, value: str, *, key: str) -> html.Div:
    """A labelled number; ``data-stat`` carries ``key`` so tests can find it."""
    return html.Div([html.Div(value, className="stat-value", id=f"stat-{key}"), html.Div(label, className="stat-label")],
                    className="stat-card")


def stats_row(items: list[tuple[str, str, str]]) -> html.Div:
    return html.Div([stat_card(label, value, key=key) for key, label, value in items], className="stats-row")


#: A table shows at most this many rows (a note says how many there are).
MAX_TABLE_ROWS = 500


def grid(frame: pl.DataFrame, *, id: str, columns: list[dict] | None = None, max_rows: int = MAX_TABLE_ROWS
         ) -> html.Div:
    """A plain HTML table of ``frame``: a full header per column, cells formatted here (durations and
    percentages by their column's formatter), numbers right-aligned; every cell carries its column's field in
    ``data-col``. More than ~25 rows scroll inside the table's box; above ``max_rows`` only the first are shown,
    and a line says so. Its CSV link writes the rows shown with the fields' own names as headers (``cost_ns``,
    ``idle_pct``: the unit in the name) and the numbers raw (:func:`csv_raw`), not as displayed.

    The table travels as one component: its cells are JSON text in ``data-table``, drawn into the box by
    ``assets/tables.js`` (as text, never as HTML). A Dash component per cell cost the browser ~2.5 ms each
    (0.8 s for Compare's 335 cells)."""
    numeric = {c for c, t in frame.schema.items() if t.is_numeric()}
    cols = columns or [{"field": c, "headerName": column_name(c)} for c in frame.columns]
    cols = [c for c in cols if c["field"] in frame.columns]
    shown = frame.head(max_rows)
    classes = []
    for c in cols:
        cls = "num" if c.get("numeric") or (c["field"] in numeric and "format" not in c) else ""
        classes.append((cls + " wrap").strip() if c.get("wrapText") else cls)
    cells = [[c["format"](v) if "format" in c else cell(v, c["field"]) for v in shown[c["field"]].to_list()]
             for c in cols]
    spec = {"columns": [{"field": c["field"], "header": c["headerName"], "cls": k} for c, k in zip(cols, classes)],
            "rows": [list(r) for r in zip(*cells)] if cells else [],
            "raw": csv_raw(shown, [c["field"] for c in cols]),
            "note": f"The first {shown.height:,} of {frame.height:,} rows." if frame.height > shown.height else ""}
    return html.Div(id=id, className="table-box", **{"data-table": json.dumps(spec, ensure_ascii=False)})


def csv_raw(frame: pl.DataFrame, fields: list[str]) -> dict[str, list[Any]]:
    """For the CSV link: per numeric column (by its position in ``fields``) the values as numbers (ns, %, counts),
    an unknown or NaN value as null; the other columns are written as shown."""
    out: dict[str, list[Any]] = {}
    for i, f in enumerate(fields):
        if frame.schema[f].is_numeric():
            out[str(i)] = [None if v is None or (isinstance(v, float) and v != v) else v for v in frame[f].to_list()]
    return out


def bar_list(bars: pl.DataFrame, *, id: str, title: str) -> html.Div:
    """Horizontal bars drawn in HTML (no plotly): ``bars`` as :func:`workbench.analyses.summary.findings_costs`
    returns them, with a ``color``; each bar's length is its ``cost_ns`` relative to the longest, its ``text`` beside it, the ``message`` on
    hover."""
    top = max(bars["cost_ns"].to_list(), default=0) or 1
    rows = [html.Div([html.Span(r["label"], className="hbar-label", title=r["message"]),
                      html.Div(html.Div(className="hbar-fill", style={"width": f"{100 * r['cost_ns'] / top:.1f}%",
                                                                       "background": r["color"]}),
                               className="hbar-track", title=r["message"]),
                      html.Span(r["text"], className="hbar-text")], className="hbar")
            for r in bars.iter_rows(named=True)]
    return html.Div([html.Div(title, className="hbar-title"), html.Div(rows, className="hbars")], id=id)


def graph(figure: Any, *, id: str, **kw: Any) -> dcc.Graph:
    return dcc.Graph(id=id, figure=figure, config={"displaylogo": False, "responsive": True}, **kw)


def lazy_graph(figure: Any, *, id: str) -> html.Div:
    """A figure below the fold: drawn by ``assets/lazy_figures.js`` (plotly.js, as ``dcc.Graph`` draws it) when it
    comes near the screen, so a page's first paint does not wait for it. For figures no callback reads; the box
    keeps the figure's height so nothing moves when it is drawn. ``#id .js-plotly-plot`` is the drawn plot."""
    import plotly.io as pio

    height = getattr(getattr(figure, "layout", None), "height", None) or 450
    return html.Div(html.Div(className="lazy-figure", **{"data-figure": pio.to_json(figure, validate=False)}),
                    id=id, className="lazy-graph", style={"minHeight": f"{height}px"})


def section(title: str, *children: Any, id: str | None = None) -> html.Section:
    kw = {"id": id} if id else {}
    return html.Section([html.H3(title), *children], className="section", **kw)


def safe(what: str, build, *args, **kw):
    """``build(*args, **kw)``, or a panel saying why it could not be shown (never raises).

    A broken run (:class:`~workbench.app.store.RunUnavailable`) or any other error → red panel.
    """
    from workbench.app.store import RunUnavailable

    try:
        return build(*args, **kw)
    except RunUnavailable as exc:
        return error_panel("This run could not be opened", str(exc), id="run-error")
    except Exception as exc:  # noqa: BLE001 - one broken part must not take the page down
        logging.getLogger("workbench.app").exception("%s failed", what)   # the traceback for the server's log
        return error_panel(f"{what}: failed", one_line(str(exc)) or "an internal error (see the server's log)")


def run_problems(run) -> html.Div | None:
    """A warning panel listing the bad files of a run opened with ``on_error="skip"``."""
    if not getattr(run, "problems", None):
        return None
    nothing = getattr(run, "ranks", None) is not None and run.ranks.height == 0
    title = ("Nothing could be read from this run" if nothing
             else f"{count(len(run.problems), 'problem')} while reading this run; the rest is shown")
    return html.Div([html.Strong(title), html.Pre("\n".join(run.problems), className="panel-detail")],
                    className="panel " + ("panel-error" if nothing else "panel-unavailable"), id="run-problems")
