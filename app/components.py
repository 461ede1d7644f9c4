"""Small layout pieces every page uses: panels for errors and missing analyses, stat cards, grids, figures."""

from __future__ import annotations

import math
from typing import Any

import dash_ag_grid as dag
import polars as pl
from dash import dcc, html


def error_panel(title: str, detail: str, *, id: str | None = None) -> html.Div:
    """A red panel: something could not be shown (a broken run, a failed analysis); the rest of the page works."""
    kw = {"id": id} if id else {}
    return html.Div([html.Strong(title), html.Pre(detail, className="panel-detail")],
                    className="panel panel-error", **kw)


def unavailable_panel(what: str, reason: str) -> html.Div:
    """A grey panel for an analysis that is not there (yet) or has nothing to work on."""
    return html.Div([html.Strong(f"{what}: not available"), html.Div(reason, className="panel-detail")],
                    className="panel panel-unavailable")


def info_panel(children: Any, *, id: str | None = None) -> html.Div:
    kw = {"id": id} if id else {}
    return html.Div(children, className="panel panel-info", **kw)


def fmt_ms(ns: Any, digits: int = 3) -> str:
    """ns → ``"12.345"`` (ms); the one formatting the pages and the tests share."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    return f"{ns / 1e6:,.{digits}f}"


def fmt_pct(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:.{digits}f}"


def stat_card(label: str, value: str, *, key: str) -> html.Div:
    """A labelled number; ``data-stat`` carries ``key`` so tests can find it."""
    return html.Div([html.Div(value, className="stat-value", id=f"stat-{key}"), html.Div(label, className="stat-label")],
                    className="stat-card")


def stats_row(items: list[tuple[str, str, str]]) -> html.Div:
    return html.Div([stat_card(label, value, key=key) for key, label, value in items], className="stats-row")


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    return v


def grid(frame: pl.DataFrame, *, id: str, columns: list[dict] | None = None, height: int | None = None,
         page_size: int | None = None, row_id: str | None = None, **grid_options: Any) -> dag.AgGrid:
    """A dash-ag-grid table of ``frame`` (lists become comma-joined strings; NaN becomes empty)."""
    rows = [{k: _jsonable(v) for k, v in r.items()} for r in frame.iter_rows(named=True)]
    cols = columns or [{"field": c} for c in frame.columns]
    n = len(rows)
    options: dict[str, Any] = {"suppressCellFocus": False, "enableCellTextSelection": True}
    if page_size and n > page_size:
        options.update(pagination=True, paginationPageSize=page_size, domLayout="autoHeight")
        style = {"width": "100%"}
    elif height is None and n <= 60:
        options["domLayout"] = "autoHeight"  # every row rendered: small tables show in full
        style = {"width": "100%"}
    else:
        style = {"height": f"{height or 480}px", "width": "100%"}
    if row_id:
        options["getRowId"] = f"params.data.{row_id}"
    options.update(grid_options)
    return dag.AgGrid(
        id=id,
        rowData=rows,
        columnDefs=cols,
        defaultColDef={"sortable": True, "filter": True, "resizable": True, "minWidth": 80},
        columnSize="responsiveSizeToFit",
        dashGridOptions=options,
        style=style,
        className="ag-theme-alpine",
    )


def graph(figure: Any, *, id: str, **kw: Any) -> dcc.Graph:
    return dcc.Graph(id=id, figure=figure, config={"displaylogo": False, "responsive": True}, **kw)


def section(title: str, *children: Any, id: str | None = None) -> html.Section:
    kw = {"id": id} if id else {}
    return html.Section([html.H3(title), *children], className="section", **kw)


def safe(what: str, build, *args, **kw):
    """``build(*args, **kw)``, or a panel saying why it could not be shown (never raises).

    :class:`~workbench.app.compute.NotAvailable` → grey panel; a broken run
    (:class:`~workbench.app.store.RunUnavailable`) or any other error → red panel.
    """
    from workbench.app.compute import NotAvailable
    from workbench.app.store import RunUnavailable

    try:
        return build(*args, **kw)
    except NotAvailable as exc:
        return unavailable_panel(what, str(exc))
    except RunUnavailable as exc:
        return error_panel("This run could not be opened", str(exc), id="run-error")
    except Exception as exc:  # noqa: BLE001 - one broken part must not take the page down
        return error_panel(f"{what}: failed", f"{type(exc).__name__}: {exc}")


def run_problems(run) -> html.Div | None:
    """A warning panel listing the bad files of a run opened with ``on_error="skip"``."""
    if not getattr(run, "problems", None):
        return None
    nothing = getattr(run, "ranks", None) is not None and run.ranks.height == 0
    title = ("Nothing could be read from this run" if nothing
             else f"{len(run.problems)} problem(s) while reading this run; the rest is shown")
    return html.Div([html.Strong(title), html.Pre("\n".join(run.problems), className="panel-detail")],
                    className="panel " + ("panel-error" if nothing else "panel-unavailable"), id="run-problems")
