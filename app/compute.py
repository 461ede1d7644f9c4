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


# --------------------------------------------------------------------------------------- the analysis tables


def tables(store: RunStore, rid: str) -> dict[str, pl.DataFrame]:
    """Every analysis frame of the run: :func:`workbench.analyses.summary.analysis_tables` (cached).

    The pages read these frames, so what they show is exactly what ``workbench analyze`` computes.
    """
    return _cached(store, rid, "tables", lambda: analysis_fn("summary", "analysis_tables")(store.run(rid)))


def table(store: RunStore, rid: str, key: str) -> pl.DataFrame:
    t = tables(store, rid)
    if key not in t:
        raise NotAvailable(f"analysis_tables() has no {key!r} table")
    return t[key]


def summary(store: RunStore, rid: str) -> dict[str, Any]:
    """:func:`workbench.analyses.summary.summarize_tables` of :func:`tables` (what ``analyze --json`` prints)."""
    def go():
        run = store.run(rid)
        fn = analysis_fn("summary", "summarize_tables")
        return fn(tables(store, rid), run.ranks["rank"].to_list(), "steady")
    return _cached(store, rid, "summary", go)


def breakdown_steps(store: RunStore, rid: str) -> pl.DataFrame:
    """Per rank and step: :func:`workbench.analyses.breakdown.time_breakdown`."""
    return table(store, rid, "breakdown")


def breakdown_ranks(store: RunStore, rid: str) -> pl.DataFrame:
    """Per rank: :func:`workbench.analyses.breakdown.breakdown_by_rank`."""
    return table(store, rid, "breakdown_by_rank")


def overlap(store: RunStore, rid: str, per: str = "rank") -> pl.DataFrame:
    """:func:`workbench.analyses.overlap.comm_compute_overlap` per rank (``per="rank"``) or per step."""
    if per != "rank":
        return table(store, rid, "overlap")
    return _cached(store, rid, "overlap:rank",
                   lambda: analysis_fn("overlap", "comm_compute_overlap")(breakdown_ranks(store, rid)))


def straggler_findings(store: RunStore, rid: str) -> pl.DataFrame:
    """The straggler rows of the run's findings (kind contains ``straggler``)."""
    f = findings(store, rid)
    return f.filter(pl.col("kind").str.contains("straggler"))


def findings(store: RunStore, rid: str) -> pl.DataFrame:
    """Every finding of the run ranked by cost (FINDINGS rows), as ``analysis_tables()["findings"]``."""
    return table(store, rid, "findings")


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


def recommendation_findings(store: RunStore, rid: str) -> pl.DataFrame:
    """The findings recommendations answer: every finding of the run, the same rows as ``workbench recommend``
    (:func:`workbench.commands.recommend.run_findings`), from the cached :func:`tables`."""
    return findings(store, rid)


def prefetch(store: RunStore, rid: str) -> None:
    """Open the run and compute what the pages need (call in a background thread); errors stay cached."""
    for fn in (store.run, lambda r: tables(store, r), lambda r: recommendations(store, r)):
        try:
            fn(rid)
        except Exception:  # noqa: BLE001 - the page shows it when it is visited
            return


def recommendations(store: RunStore, rid: str) -> pl.DataFrame:
    """:func:`workbench.analyses.recommendations.recommend` (RECOMMENDATIONS rows), as ``workbench recommend``."""
    return _cached(store, rid, "recommendations",
                   lambda: analysis_fn("recommendations", "recommend")(recommendation_findings(store, rid),
                                                                      store.run(rid).compiles))


def recommendation_rows(recs: pl.DataFrame) -> pl.DataFrame:
    return recs


def recommendation_toml(recs: pl.DataFrame, header: str | None = None) -> str:
    """The compile-config TOML of the applied fixes (:func:`~workbench.analyses.recommendations.to_compile_config`)."""
    return analysis_fn("recommendations", "to_compile_config")(recs, header=header)


# ------------------------------------------------------------------------------------------------- compare


def diff(store: RunStore, before: str, after: str) -> dict[str, pl.DataFrame]:
    """``{"metrics": diff_summaries(...), "findings": diff_findings(...)}`` of two runs' summaries."""
    def go():
        a, b = summary(store, before), summary(store, after)
        return {"metrics": analysis_fn("diff", "diff_summaries")(a, b),
                "findings": analysis_fn("diff", "diff_findings")(a, b)}
    return _cached(store, before, f"diff:{after}", go)
