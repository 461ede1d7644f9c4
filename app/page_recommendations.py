"""Recommendations: fixes for the run's findings with evidence and expected effect, a preview of the
compile-config TOML, and "Apply", which writes that file inside the run directory.

Safety: the only file the app ever writes is ``<run>/compile_config.toml`` (:data:`workbench.rundir.COMPILE_CONFIG_FILE`)
of a run it was started with; the browser sends the run id only, never a path.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import polars as pl
from dash import Input, Output, State, html, no_update

from workbench import rundir
from workbench.app import compute
from workbench.app.components import error_panel, info_panel, safe, section
from workbench.app.store import RunStore

PATH = "/recommendations"
NAME = "Recommendations"
KEY = "recommendations"


def config_path(store: RunStore, rid: str) -> Path | None:
    """Where Apply writes: inside the run directory; ``None`` for anything else (a lone trace file, a plain
    folder of traces), so the app never drops a file among someone's traces."""
    entry = store.entry(rid)
    if entry is None or not entry.is_run_dir:
        return None
    return entry.path / rundir.COMPILE_CONFIG_FILE


def config_header(path: Path | None) -> str:
    """The comment at the top of the TOML the app writes (the same text in the preview and the file)."""
    where = path if path is not None else rundir.COMPILE_CONFIG_FILE
    return (f"Compile config written by the workbench app (Recommendations → Apply) as {where}: "
            f"apply with Collector(..., compile_config=\"{where}\") or WORKBENCH_COMPILE_CONFIG={where}")


def how_to_use(path: Path) -> html.Div:
    return html.Div([
        html.Div("The next run picks it up in either of two ways:"),
        html.Pre(f'collector = Collector("runs/next", compile_config="{path}")', className="toml usage-collector"),
        html.Pre(f"WORKBENCH_COMPILE_CONFIG={path} torchrun ... train.py", className="toml usage-env"),
        html.Div(["Then compare the two runs: ", html.Code("workbench diff BEFORE AFTER"),
                  " or the Compare page."], className="muted"),
    ])


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Recommendations", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    recs = compute.recommendations(store, rid)
    table = compute.recommendation_rows(recs)
    target = config_path(store, rid)
    toml_text = compute.recommendation_toml(recs, header=config_header(target))
    existing = target if target is not None and target.is_file() else None
    if table.height:
        # per finding: the fix that goes into the TOML (or the first one) in full, the alternatives folded
        main, alt = [], []
        seen: set = set()
        for r in table.sort("rank").iter_rows(named=True):
            key = (r.get("finding_kind"), r.get("finding_index"))
            if r.get("apply") or key not in seen:
                main.append(_rec_item(r))
            else:
                alt.append(_rec_item(r))
            seen.add(key)
        items = main + ([html.Details([html.Summary(f"{len(alt)} alternative fix(es)"), *alt], id="rec-alternatives")]
                        if alt else [])
    else:
        items = [html.Div("No recommendations: the analyses found nothing a fix would address.", className="muted",
                          id="no-recommendations")]
    apply_part: list[Any] = []
    if not toml_text.strip() or not any(l.strip() and not l.lstrip().startswith("#") for l in toml_text.splitlines()):
        apply_part.append(html.Div("No configuration change to apply (the fixes above need code changes).",
                                   className="muted", id="apply-none"))
    elif target is None:
        apply_part.append(html.Div("This run is a single trace file, not a folder: Apply needs a run directory.",
                                   className="muted"))
    else:
        apply_part += [
            html.Button("Apply", id="apply-config", n_clicks=0, className="primary"),
            html.Span(f"  writes {target}", className="muted"),
        ]
    return html.Div([
        section("Fixes, ranked", *items, id="recs-section"),
        section("Compile config (TOML)", html.Pre(toml_text or "# nothing to configure", id="toml-preview",
                                                  className="toml"),
                *apply_part,
                html.Div(info_panel([html.Div(f"A config is already in place: {existing}"), how_to_use(existing)])
                         if existing else None, id="apply-result")),
    ])


def _rec_item(r: dict[str, Any]) -> html.Div:
    def row(label: str, key: str, code: bool = False):
        v = r.get(key)
        if v in (None, "", []):
            return None
        return html.Div([html.Strong(label + ": "), html.Code(str(v)) if code else html.Span(str(v))])

    tag = "applied in the TOML" if r.get("apply") else ("code change" if r.get("code_advice") and not r.get("config")
                                                         else "alternative")
    return html.Div([
        html.Div([html.Strong(f"{r['rank']}. {r.get('title')}"), html.Span(f"  [{tag}]", className="muted")]),
        row("Answers", "finding_kind"), row("Evidence", "evidence"), row("Expected effect", "expected_effect"),
        row("Config", "config", True), row("Code", "code_advice"), row("Where", "location", True),
    ], className="rec rec-item", id=f"rec-{r['rank']}")


def apply(store: RunStore, rid: str) -> tuple[Path, str]:
    """Write the recommended compile config into the run directory; returns the path and the text written.

    The text is parsed and validated (:mod:`workbench.compile_config`) before it is written atomically.
    """
    from workbench.compile_config import CompileConfig

    target = config_path(store, rid)
    if target is None:
        raise ValueError("this run is not a run directory (a lone trace or a folder of traces); nothing written")
    text = compute.recommendation_toml(compute.recommendations(store, rid), header=config_header(target))
    CompileConfig.from_dict(tomllib.loads(text), validate="auto")
    rundir.write_atomic(target, text.encode())
    return target, text


def register(app, store: RunStore) -> None:
    @app.callback(Output("apply-result", "children"), Input("apply-config", "n_clicks"), State("url", "search"),
                  prevent_initial_call=True)
    def on_apply(n, search):
        from workbench.app.main import parse_query

        if not n:
            return no_update
        rid = parse_query(search).get("run") or store.default_id()
        try:
            path, _ = apply(store, rid)
        except Exception as exc:  # noqa: BLE001 - shown, never raised into Dash
            return error_panel("Could not write the compile config", f"{type(exc).__name__}: {exc}",
                               id="apply-error")
        return info_panel([html.Div(["Written: ", html.Code(str(path), id="applied-path")]), how_to_use(path)],
                          id="apply-ok")


__all__ = ["apply", "config_path", "layout", "register", "pl"]
