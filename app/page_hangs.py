"""Hangs: how each rank ended, the step it reached and its last collective (Flight Recorder, steps.jsonl, the
collector's exit records), with the desync / hang / rank_died finding that explains why the job stopped (or the
compiled_desync that will stop it) and the fixes recommended for it."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import html

from workbench.analyses.kinds import Kind, kinds_where
from workbench.analyses.rank_end import rank_last_rows
from workbench.app import compute
from workbench.app.components import col, error_panel, grid, safe, section, stats_row
from workbench.app.store import RunStore
from workbench.format import duration

PATH = "/hangs"
NAME = "Hangs"
KEY = "hangs"

#: The kinds this page explains: those that end the job, and a compiled graph's desync (it will).
HANG_KINDS: tuple[Kind, ...] = (*kinds_where(ends_job=True), Kind.COMPILED_DESYNC)

RANK_COLUMNS = [
    col("rank", "Rank"), col("state", "How it ended"), col("last_step", "Last step written"),
    col("step_reached", "Step reached"), col("last_collective", "Last collective (group, sequence, op, size, line)"),
    col("compile", "Last compile"),
]

#: What the states mean (shown under the table).
STATES = ("finished: closed normally · timeout: a collective timed out · peer_lost: a peer closed the connection · "
          "aborted: a fatal signal (gloo aborts on a size mismatch) · gone: no exit recorded (killed) · "
          "stalled: a step ran past the stall limit, or a dump shows a collective still running")


def _last_rows(run: Any) -> list[dict[str, Any]]:
    return rank_last_rows(run.hangs, run.steps, run.compiles, run.world_size)


def rank_rows(store: RunStore, rid: str) -> list[dict[str, Any]]:
    """Each rank's end state, last step and last collective (cached per run)."""
    return store.cached(rid, "hang_ranks", lambda: _last_rows(store.run(rid)))


def fixes_by_finding(store: RunStore, rid: str) -> dict[str, list[Any]]:
    """Per hang finding id: its recommended fixes (as ``workbench recommend`` ranks them), one line each."""
    out: dict[str, list[Any]] = {}
    for rec in compute.ranked_fixes(store, rid):
        if rec.finding.kind not in HANG_KINDS:
            continue
        fx = rec.fix
        out.setdefault(rec.finding.id, []).append(html.Div([
            html.Strong("Fix: "), html.Span(fx.title),
            html.Span(f": {fx.code}" if fx.code else ""),
            html.Span(f" ({fx.location})" if fx.location else "", className="muted"),
        ], className="hang-fix"))
    return out


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Hangs", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    rows = rank_rows(store, rid)
    frame = pl.DataFrame(rows, schema={"rank": pl.Int32, "state": pl.String, "last_step": pl.Int32,
                                       "step_reached": pl.Int32, "last_collective": pl.String,
                                       "compile": pl.String}) if rows else pl.DataFrame()
    f = compute.findings(store, rid)
    f = f.filter(pl.col("kind").is_in([k.value for k in HANG_KINDS])) if not f.is_empty() else f
    fixes = fixes_by_finding(store, rid) if f.height else {}
    msgs = [html.Div([html.Strong(f"{r['kind']}: "), html.Span(r["message"]),
                      html.Span(f" ({duration(r['cost_ns'])} {r['cost_basis'] or ''})".rstrip(), className="muted"),
                      *fixes.get(r["id"], [])],
                     className="rec hang-finding") for r in f.iter_rows(named=True)]
    if not msgs:
        msgs = [html.Div("No hang, desync or dead rank: every rank that left hang files ended normally, and the "
                         "compiled graphs issue the same collectives on every rank.", className="muted",
                         id="no-hang")]
    states = frame["state"].value_counts().sort("state") if frame.height else pl.DataFrame()
    summary = ", ".join(f"{n} {s}" for s, n in states.iter_rows()) if states.height else "–"
    return html.Div([
        stats_row([("ranks", "ranks", str(frame.height)), ("states", "how they ended", summary)]),
        section("Why the job stopped", *msgs, id="hang-findings"),
        section("Each rank's last step and last collective",
                grid(frame, id="hang-ranks-grid", columns=RANK_COLUMNS) if frame.height else
                html.Div("No steps, Flight Recorder dumps or hang files in this run.", className="muted"),
                html.Div(STATES, className="muted"),
                html.Div("Read from rank<R>/steps.jsonl, rank<R>/hang/ (Flight Recorder dumps, exit records, "
                         "heartbeat, fatal tracebacks) and the compile logs: docs/hangs.md.", className="muted")),
    ])


def register(app, store: RunStore) -> None:
    """No callbacks: the page is drawn from the run alone."""
