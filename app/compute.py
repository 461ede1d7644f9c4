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


def stragglers(store: RunStore, rid: str) -> pl.DataFrame:
    """Straggler rows from :mod:`workbench.analyses.stragglers`."""
    def go():
        run = store.run(rid)
        fn = analysis_fn("stragglers", "stragglers")
        return fn(run.steps)
    return _cached(store, rid, "stragglers", go)


def findings(store: RunStore, rid: str) -> pl.DataFrame:
    """Every finding of the run, ranked by cost (FINDINGS rows), from the summary analysis."""
    def go():
        res = summary(store, rid)
        f = _get(res, "findings")
        if f is None:
            raise NotAvailable("the summary analysis returned no findings table")
        return f
    return _cached(store, rid, "findings", go)


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


# ---------------------------------------------------------------------------------------------- recompiles


def recompiles(store: RunStore, rid: str) -> Any:
    """:func:`workbench.analyses.recompiles.analyze` on the run."""
    return _cached(store, rid, "recompiles", lambda: analysis_fn("recompiles", "analyze")(store.run(rid)))


def recommendations(store: RunStore, rid: str) -> Any:
    """:func:`workbench.analyses.recommendations.recommend` on the run's findings."""
    return _cached(store, rid, "recommendations",
                   lambda: analysis_fn("recommendations", "recommend")(store.run(rid)))


# ------------------------------------------------------------------------------------------------- compare


def diff(store: RunStore, before: str, after: str) -> Any:
    """:func:`workbench.analyses.diff.diff` of two runs (cached under the first run's id)."""
    return _cached(store, before, f"diff:{after}",
                   lambda: analysis_fn("diff", "diff")(store.run(before), store.run(after)))
