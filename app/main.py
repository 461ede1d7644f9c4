"""The Dash app: a header (pages, run picker), a router, and one module per page.

Example:
    >>> from workbench.app.main import create_app
    >>> app = create_app(["sample_traces"])          # doctest: +SKIP
    >>> app.run(host="127.0.0.1", port=8050)          # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import dash
from dash import Dash, Input, Output, ctx, dcc, html, no_update

from workbench.app import (
    page_breakdown,
    page_compare,
    page_drift,
    page_hangs,
    page_overview,
    page_pipeline,
    page_recommendations,
    page_recompiles,
    page_timeline,
)
from workbench.app import compute, export
from workbench.app.components import error_panel
from workbench.app.store import RunStore
from workbench.app import security
from workbench.errors import one_line

#: Pages in menu order; each module has ``PATH``, ``NAME``, ``layout(ctx)`` and ``register(app, store)``.
PAGES = (page_overview, page_timeline, page_breakdown, page_drift, page_pipeline, page_recompiles,
         page_recommendations, page_compare, page_hangs)
#: Query keys kept when the user picks another run in the header.
_STICKY = ("other",)


@dataclass(slots=True)
class PageContext:
    """What a page's layout gets: the store, the selected run id and the URL query (strings)."""

    store: RunStore
    run_id: str | None
    query: dict[str, str] = field(default_factory=dict)

    def run(self):
        return self.store.run(self.run_id) if self.run_id else None


def default_roots() -> list[Path]:
    """The bundled ``sample_traces/`` (next to the package in a checkout, else in the working directory)."""
    here = Path(__file__).resolve().parents[1] / "sample_traces"
    return [here if here.is_dir() else Path.cwd() / "sample_traces"]


def parse_query(search: str | None) -> dict[str, str]:
    return dict(parse_qsl((search or "").lstrip("?")))


def href(path: str, query: dict[str, str]) -> str:
    q = {k: v for k, v in query.items() if v not in (None, "")}
    return path + ("?" + urlencode(q) if q else "")


def landing_id(store: RunStore) -> str | None:
    """The run a visit without ``?run=`` shows: the most costly analysed run, else the store's default (a GPU run
    with the most ranks) while none is analysed yet."""
    return compute.most_costly(store) or store.default_id()


def _header(store: RunStore) -> html.Div:
    options = [{"label": e.label, "value": e.id, "title": str(e.path)} for e in store.entries]
    return html.Div(
        [
            html.Span("workbench", className="brand"),
            html.Nav([dcc.Link(p.NAME, href=p.PATH, id=f"nav-{p.KEY}") for p in PAGES]),
            dcc.Dropdown(id="run-select", options=options, value=landing_id(store), clearable=False,
                         className="run-select", placeholder="no runs found"),
        ],
        className="header",
    )


def create_app(paths: Iterable[str | Path] | None = None, *, store: RunStore | None = None,
               bind: str | None = None, allow_hosts: Iterable[str] = (), background: bool = True,
               allow_roots: Iterable[str | Path] = ()) -> Dash:
    """The Dash app over the runs under ``paths`` (default: the bundled ``sample_traces/``); a path typed in the
    app may lead inside those or ``allow_roots``.

    It answers only requests addressed to the localhost names, ``bind`` and ``allow_hosts`` (app/security.py).
    With ``background``, a daemon thread opens and analyses the landing run, then every other run's run-list line.
    """
    store = store or RunStore(list(paths) if paths else default_roots(), allow_roots=allow_roots)
    app = Dash(
        __name__,
        title="workbench",
        suppress_callback_exceptions=True,
        assets_folder=str(Path(__file__).with_name("assets")),
        update_title=None,
    )
    # a function: each page load gets the header of the runs listed now (a refresh finds new ones) and lands on
    # the most costly run analysed so far
    app.layout = lambda: html.Div([dcc.Location(id="url"), _header(store), html.Div(id="page", className="page")])
    first_page = threading.Event()  # set once a page has been served: the background analysis waits for it
    by_path = {p.PATH: p for p in PAGES}

    @app.callback(
        Output("page", "children"),
        Output("url", "search"),
        Output("run-select", "value"),
        *[Output(f"nav-{p.KEY}", "href") for p in PAGES],
        Input("url", "pathname"),
        Input("url", "search"),
        Input("run-select", "value"),
    )
    def route(pathname, search, selected):
        query = parse_query(search)
        if ctx.triggered_id == "run-select" and selected and selected == query.get("run"):
            # the header caught up with the URL's run (set by this callback): the page shown is already its
            return (no_update,) * (3 + len(PAGES))
        new_search = no_update
        if ctx.triggered_id == "run-select" and selected and selected != query.get("run"):
            query = {"run": selected, **{k: query[k] for k in _STICKY if k in query}}
            new_search = "?" + urlencode(query)
        run_id = query.get("run") or selected or landing_id(store)
        if run_id and "run" not in query:
            query["run"] = run_id
        page = by_path.get((pathname or "/").rstrip("/") or "/")
        if page is None:
            body = error_panel("No such page", f"{pathname}: pick a page in the header.")
        else:
            body = render_page(page, PageContext(store, run_id, query))
        nav_q = {"run": run_id} if run_id else {}
        if "other" in query:
            nav_q["other"] = query["other"]
        hrefs = [href(p.PATH, nav_q) for p in PAGES]
        first_page.set()
        return (body, new_search, run_id if run_id != selected else no_update, *hrefs)

    for p in PAGES:
        p.register(app, store)
    security.install(app.server, security.allowed_hosts(bind, allow_hosts))
    export.install(app.server, store)
    app.workbench_store = store  # type: ignore[attr-defined]
    if background and store.entries:
        def warm(rid: str) -> None:  # the landing page's story, built before the browser asks for it
            page_overview.layout(PageContext(store, rid, {"run": rid}))

        threading.Thread(target=compute.prefetch, args=(store, store.default_id(), first_page, warm), daemon=True,
                         name="workbench-prefetch").start()
    return app


def render_page(page, pctx: PageContext):
    """A page's layout, or an error panel when building it fails (the rest of the app keeps working).

    A page that declares ``CACHE = True`` (its layout depends only on the run and the URL query) is built once per
    run and query and kept with the run's other cached results.
    """
    if getattr(page, "CACHE", False) and pctx.run_id and pctx.store.entry(pctx.run_id) is not None:
        q = tuple(sorted((k, v) for k, v in pctx.query.items() if k != "run"))
        return pctx.store.cached(pctx.run_id, f"page:{page.KEY}:{q}", lambda: _render(page, pctx))
    return _render(page, pctx)


def _render(page, pctx: PageContext):
    try:
        body = page.layout(pctx)
    except Exception as exc:  # noqa: BLE001 - one line in the page (no class name), the traceback in the log
        logging.getLogger("workbench.app").exception("page %s failed", page.KEY)
        body = error_panel(f"{page.NAME}: this page failed", one_line(str(exc)) or "an internal error (see the "
                                                                                    "server's log)")
    # keyed by page and run: another run's page is drawn afresh, never patched into the last one's DOM
    return html.Div([html.H2(page.NAME), body], id=f"page-{page.KEY}", key=f"{page.KEY}:{pctx.run_id}",
                    **{"data-run": pctx.run_id or ""})


__all__ = ["PAGES", "PageContext", "create_app", "default_roots", "dash"]
