"""Downloads: the HTML report of a run (``workbench report``'s page), its compile-config TOML and its Perfetto trace.

``GET /export/report?run=ID``, ``GET /export/config?run=ID`` and ``GET /export/perfetto?run=ID&ranks=0,1&steps=5``
(``workbench export``'s protobuf of those ranks and steps): the run is named by its id (never a path) and
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
    """Add the download routes to the Flask ``server``."""
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


    @server.route("/export/perfetto")
    def export_perfetto():
        rid = request.args.get("run", "")
        if store.entry(rid) is None:
            return refused(f"no run {rid!r}")
        ranks, steps = request.args.get("ranks") or None, request.args.get("steps") or None
        if not all(_SELECTION.fullmatch(v) for v in (ranks, steps) if v):
            return refused("ranks and steps are numbers and ranges (0,2-3)")
        from workbench.export import export_bytes

        try:
            data = export_bytes(store.run(rid), fmt="perfetto", ranks=ranks, steps=steps)
        except RunUnavailable as exc:
            return refused(str(exc))
        except ValueError as exc:
            return refused(str(exc))
        return Response(data, mimetype="application/octet-stream", headers={
            "Content-Disposition": f'attachment; filename="{_filename(rid, ".pftrace")}"'})


_SELECTION = re.compile(r"\d{1,7}(-\d{1,7})?(,\d{1,7}(-\d{1,7})?){0,1023}")


def _report(store: RunStore, rid: str) -> str:
    from workbench.report import build_report, render_html

    return render_html(build_report(store.run(rid)), plotlyjs="inline")
