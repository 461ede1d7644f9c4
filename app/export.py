"""Downloads: the HTML report of a run (``workbench report``'s page) and its compile-config TOML.

``GET /export/report?run=ID`` and ``GET /export/config?run=ID``: the run is named by its id (never a path) and
opened from the store, so the same roots and link rules apply; the answer is an attachment. Tables are exported as
CSV in the browser (``assets/tables.js``), from the rows the page shows.
"""

from __future__ import annotations

import re

from workbench.app import compute
from workbench.app.store import RunStore, RunUnavailable


def _filename(rid: str, suffix: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", rid) + suffix


def install(server, store: RunStore) -> None:
    """Add the two download routes to the Flask ``server``."""
    from flask import Response, request

    def refused(why: str) -> Response:
        return Response(why + "\n", status=404, mimetype="text/plain")

    @server.route("/export/report")
    def export_report():
        rid = request.args.get("run", "")
        if store.entry(rid) is None:
            return refused(f"no run {rid!r}")
        try:
            text = store.cached(rid, "export:report", lambda: _report(store, rid))
        except RunUnavailable as exc:
            return refused(str(exc))
        return Response(text, mimetype="text/html", headers={
            "Content-Disposition": f'attachment; filename="{_filename(rid, "-report.html")}"'})

    @server.route("/export/config")
    def export_config():
        rid = request.args.get("run", "")
        if store.entry(rid) is None:
            return refused(f"no run {rid!r}")
        try:
            text = compute.compile_config_toml(store, rid, header=f"Compile config of run {rid} (workbench app)")
        except RunUnavailable as exc:
            return refused(str(exc))
        return Response(text, mimetype="application/toml", headers={
            "Content-Disposition": 'attachment; filename="compile_config.toml"'})


def _report(store: RunStore, rid: str) -> str:
    from workbench.report import build_report, render_html

    return render_html(build_report(store.run(rid)), plotlyjs="inline")
