"""The one place the app calls analyses: thin, cached adapters from a run id to analysis frames.

Every adapter caches its result in the :class:`~workbench.app.store.RunStore` (per run and key), so a page and its
callbacks never compute twice. An analysis that is not installed (yet) raises :class:`NotAvailable`, which the
pages show as a grey "not available" panel instead of failing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import polars as pl

from workbench.app.store import RunStore


class NotAvailable(Exception):
    """An analysis (module or function) that is not there, or that has nothing to work on."""


def analysis_fn(module: str, name: str) -> Callable[..., Any]:
    """``workbench.analyses.<module>.<name>``, or :class:`NotAvailable` naming what is missing."""
    full = f"workbench.analyses.{module}"
    try:
        mod = importlib.import_module(full)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == full or full.startswith(exc.name)):
            raise NotAvailable(f"{full} is not available in this installation") from exc
        raise
    fn = getattr(mod, name, None)
    if fn is None:
        raise NotAvailable(f"{full}.{name} is not available in this installation")
    return fn


def has(module: str, name: str) -> bool:
    try:
        analysis_fn(module, name)
    except NotAvailable:
        return False
    return True


def _cached(store: RunStore, rid: str, key: str, compute: Callable[[], Any]) -> Any:
    return store.cached(rid, key, compute)


# ------------------------------------------------------------------------------------------------ breakdown


def breakdown_steps(store: RunStore, rid: str, window: str = "steady") -> pl.DataFrame:
    """Per rank and step: :func:`workbench.analyses.breakdown.time_breakdown`."""
    def go():
        run = store.run(rid)
        return analysis_fn("breakdown", "time_breakdown")(run.kernels, run.steps, window)
    return _cached(store, rid, f"breakdown_steps:{window}", go)


def breakdown_ranks(store: RunStore, rid: str, window: str = "steady") -> pl.DataFrame:
    """Per rank: :func:`workbench.analyses.breakdown.breakdown_by_rank` of :func:`breakdown_steps`."""
    return _cached(store, rid, f"breakdown_ranks:{window}",
                   lambda: analysis_fn("breakdown", "breakdown_by_rank")(breakdown_steps(store, rid, window)))


def overlap(store: RunStore, rid: str, per: str = "rank", window: str = "steady") -> pl.DataFrame:
    """:func:`workbench.analyses.overlap.comm_compute_overlap` per rank (``per="rank"``) or per step."""
    def go():
        src = breakdown_ranks(store, rid, window) if per == "rank" else breakdown_steps(store, rid, window)
        return analysis_fn("overlap", "comm_compute_overlap")(src)
    return _cached(store, rid, f"overlap:{per}:{window}", go)


def idle_causes(store: RunStore, rid: str, window: str = "steady") -> pl.DataFrame:
    """Idle time per rank and stream by cause (:func:`workbench.analyses.breakdown.idle_causes`)."""
    def go():
        run = store.run(rid)
        gaps = analysis_fn("breakdown", "idle_gaps")(run.kernels, run.steps, window)
        return analysis_fn("breakdown", "idle_causes")(gaps)
    return _cached(store, rid, f"idle_causes:{window}", go)


# ---------------------------------------------------------------------------------------------- collectives


def matched_collectives(store: RunStore, rid: str) -> pl.DataFrame:
    def go():
        run = store.run(rid)
        return analysis_fn("collectives", "match_collectives")(run.collectives, run.ranks)
    return _cached(store, rid, "matched_collectives", go)


def collective_instances(store: RunStore, rid: str) -> pl.DataFrame:
    return _cached(store, rid, "collective_instances",
                   lambda: analysis_fn("collectives", "collective_instances")(matched_collectives(store, rid)))


def collective_wait(store: RunStore, rid: str) -> pl.DataFrame:
    return _cached(store, rid, "collective_wait",
                   lambda: analysis_fn("collectives", "collective_wait_by_rank")(matched_collectives(store, rid)))


def collective_drift(store: RunStore, rid: str) -> pl.DataFrame:
    return _cached(store, rid, "collective_drift",
                   lambda: analysis_fn("collectives", "collective_drift")(matched_collectives(store, rid)))


# ------------------------------------------------------------------------------------------ summary / drift


def summary(store: RunStore, rid: str) -> Any:
    """:func:`workbench.analyses.summary.analyze` on the run (its full result, whatever its shape)."""
    return _cached(store, rid, "summary", lambda: analysis_fn("summary", "analyze")(store.run(rid)))


def step_times(store: RunStore, rid: str) -> pl.DataFrame:
    """:func:`workbench.analyses.stragglers.step_times`: step time per rank over steps, against the median."""
    return _cached(store, rid, "step_times",
                   lambda: analysis_fn("stragglers", "step_times")(store.run(rid).steps))


def stragglers(store: RunStore, rid: str) -> pl.DataFrame:
    """:func:`workbench.analyses.stragglers.straggler_ranks` from steps and matched collectives."""
    def go():
        run = store.run(rid)
        try:
            matched = matched_collectives(store, rid)
        except NotAvailable:
            matched = None
        return analysis_fn("stragglers", "straggler_ranks")(run.steps, matched)
    return _cached(store, rid, "stragglers", go)


def straggler_findings(store: RunStore, rid: str) -> pl.DataFrame:
    return _cached(store, rid, "straggler_findings",
                   lambda: analysis_fn("stragglers", "straggler_findings")(stragglers(store, rid)))


def findings(store: RunStore, rid: str) -> pl.DataFrame:
    """Every finding of the run, ranked by cost (FINDINGS rows).

    From :func:`workbench.analyses.summary.analyze` when it is there (what ``workbench analyze`` prints), else the
    findings of each analysis stacked by :func:`workbench.analyses.findings.rank_findings`.
    """
    def go():
        if has("summary", "analyze"):
            f = _get(summary(store, rid), "findings")
            if f is not None:
                return f
        rank = analysis_fn("findings", "rank_findings")
        parts = []
        for fn in (straggler_findings, recompile_findings):
            try:
                parts.append(fn(store, rid))
            except NotAvailable:
                pass
        return rank(parts)
    return _cached(store, rid, "findings", go)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


# ---------------------------------------------------------------------------------------------- recompiles


def compiles(store: RunStore, rid: str) -> pl.DataFrame:
    """COMPILES rows with ``cause``, ``cause_detail``, ``cause_source`` (:func:`~workbench.analyses.recompiles.classify_compiles`)."""
    return _cached(store, rid, "compiles",
                   lambda: analysis_fn("recompiles", "classify_compiles")(store.run(rid).compiles))


def divergent(store: RunStore, rid: str) -> pl.DataFrame:
    """Divergent compile ids with the wait each caused on the other ranks (``divergent_compiles`` + ``divergence_cost``)."""
    def go():
        run = store.run(rid)
        c = compiles(store, rid)
        div = analysis_fn("recompiles", "divergent_compiles")(c)
        if div.is_empty():
            return div
        return analysis_fn("recompiles", "divergence_cost")(div, c, run.steps, run.collectives)
    return _cached(store, rid, "divergent", go)


def recompile_findings(store: RunStore, rid: str) -> pl.DataFrame:
    def go():
        run = store.run(rid)
        return analysis_fn("recompiles", "recompile_findings")(
            run.compiles, steps=run.steps, collectives=run.collectives, fingerprints=run.fingerprints)
    return _cached(store, rid, "recompile_findings", go)


def recommendations(store: RunStore, rid: str) -> Any:
    """:func:`workbench.analyses.recommendations.recommend` on the run's findings."""
    return _cached(store, rid, "recommendations",
                   lambda: analysis_fn("recommendations", "recommend")(findings(store, rid)))


# ------------------------------------------------------------------------------------------------- compare


def diff(store: RunStore, before: str, after: str) -> Any:
    """:func:`workbench.analyses.diff.diff` of two runs (cached under the first run's id)."""
    return _cached(store, before, f"diff:{after}",
                   lambda: analysis_fn("diff", "diff")(store.run(before), store.run(after)))
