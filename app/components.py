"""Small layout pieces every page uses: panels for errors and missing analyses, stat cards, grids, figures."""

from __future__ import annotations

import math
from typing import Any

import dash_ag_grid as dag
import polars as pl
from dash import dcc, html

from workbench.figures import fmt_duration


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


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))


def fmt_time(ns: Any) -> str:
    """ns → a duration with its unit at a precision a person reads: ``"2.57 s"``, ``"277 ms"``, ``"6.1 ms"``,
    ``"905 µs"`` (:func:`workbench.figures.fmt_duration`: the CLI's format, the figures' own labels)."""
    return "–" if _missing(ns) else fmt_duration(ns)


def fmt_ms(ns: Any) -> str:
    """ns → what a grid cell of :func:`ms_column` or :func:`duration_column` shows: :func:`fmt_time` (one format
    for every duration)."""
    return fmt_time(ns)


def fmt_pct(v: Any, digits: int = 1) -> str:
    """A percentage (0–100) → ``"12.3 %"``: what grid cells of :func:`pct_column` show."""
    if _missing(v):
        return "–"
    return f"{v:,.{digits}f} %"


def plural(n: int, one: str, many: str | None = None) -> str:
    """``"1 rank"``, ``"3 ranks"``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def ranks_phrase(ranks: Any) -> str:
    """``[1]`` → ``"rank 1"``; ``[0, 2, 3]`` → ``"ranks 0, 2 and 3"``; none → ``"no rank"``."""
    rs = [str(r) for r in (ranks or []) if r is not None]
    if not rs:
        return "no rank"
    if len(rs) == 1:
        return f"rank {rs[0]}"
    return f"ranks {', '.join(rs[:-1])} and {rs[-1]}"


def _number_js(digits: int, suffix: str) -> str:
    return (f"params.value == null ? '–' : Number(params.value).toLocaleString('en-US', "
            f"{{minimumFractionDigits: {digits}, maximumFractionDigits: {digits}}}) + '{suffix}'")


def ms_column(field: str, header: str, **kw: Any) -> dict[str, Any]:
    """A grid column of a number of ms (the row holds the float), shown as :func:`fmt_time` shows its ns
    (``"2.57 s"``, ``"312 ms"``, ``"4.1 ms"``), sorted as a number."""
    return {"field": field, "headerName": header, "type": "rightAligned",
            "valueFormatter": {"function": _duration_js("params.value == null ? null : params.value * 1e6")}, **kw}


def pct_column(field: str, header: str, *, digits: int = 1, **kw: Any) -> dict[str, Any]:
    """A grid column of a percentage (0–100), shown as ``"12.3 %"``."""
    return {"field": field, "headerName": header, "type": "rightAligned",
            "valueFormatter": {"function": _number_js(digits, " %")}, **kw}


def _duration_js(value: str) -> str:
    """A grid cell's formatter: the ns ``value`` by ``wbDuration`` (assets/dashAgGridFunctions.js), the rules of
    :func:`workbench.analyses.findings.format_ns`."""
    return f"wbDuration({value})"


def duration_column(field: str, header: str, **kw: Any) -> dict[str, Any]:
    """A grid column of a duration in ns (the row holds the integer), shown with the unit that reads best
    (``"307 ns"``, ``"12 µs"``, ``"1.3 ms"``, ``"2.57 s"``, exactly as :func:`fmt_time`), sorted as a number."""
    return {"field": field, "headerName": header, "type": "rightAligned",
            "valueFormatter": {"function": _duration_js("params.value")}, **kw}


def col(field: str, header: str, **kw: Any) -> dict[str, Any]:
    """A plain grid column with a full header."""
    return {"field": field, "headerName": header, **kw}


def ns_to_ms(frame: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """``frame`` with each ``<x>_ns`` column replaced by ``<x>_ms`` (float ms) for :func:`ms_column`."""
    present = [c for c in cols if c in frame.columns]
    return frame.with_columns([(pl.col(c).cast(pl.Float64) / 1e6).alias(c.removesuffix("_ns") + "_ms")
                               for c in present]).drop(present)


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
        defaultColDef={"sortable": True, "filter": True, "resizable": True, "minWidth": 120,
                       "wrapHeaderText": True, "autoHeaderHeight": True},
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

    A broken run (:class:`~workbench.app.store.RunUnavailable`) or any other error → red panel.
    """
    from workbench.app.store import RunUnavailable

    try:
        return build(*args, **kw)
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
             else f"{plural(len(run.problems), 'problem')} while reading this run; the rest is shown")
    return html.Div([html.Strong(title), html.Pre("\n".join(run.problems), className="panel-detail")],
                    className="panel " + ("panel-error" if nothing else "panel-unavailable"), id="run-problems")
