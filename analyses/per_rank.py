"""The analyses that read ``events`` / ``kernels``, run on a few ranks at a time so a large run never holds them all.

Breakdown, idle time per cause, pipeline bubbles, launch statistics, kernel class time and the main stream are
per-rank results: computed on the rows of a batch of ranks (``Run.rank_batches``: about 200k events at a time) and
stacked, they equal the whole-table result. The top kernels rank kernels across ranks, so each rank contributes its
per-kernel totals (count, sum, min, max) and the ranking is done once on those. Only these results stay in memory:
a few rows per rank and step, the root-cause intervals packed as int64 arrays (:class:`SpanStore`), and the idle
gaps themselves only up to :data:`IDLE_GAPS_KEPT` rows (beyond that, each rank's longest; the per-cause totals are
always complete).

Example:
    >>> tables = event_tables(workbench.open("runs/exp1"), steps, "steady", KERNEL_WAIT_NS)   # doctest: +SKIP
    >>> tables["breakdown"]                                                                  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import polars as pl

from workbench.analyses.breakdown import idle_causes, idle_gaps, main_streams, time_breakdown
from workbench.analyses.bubbles import pipeline_bubbles
from workbench.analyses.idle_causes import idle_attribution
from workbench.analyses.intervals import SpanStore
from workbench.analyses.kernels import kernel_class_time, launch_stats, top_kernels
from workbench.analyses.rootcause import device_time
from workbench.analyses.window import Window, window_kernels
from workbench.schema import EVENTS, KERNELS, empty

#: What :func:`event_tables` returns: frames, and ``device_time`` (a ``rootcause.DeviceTime`` where that exists).
KEYS = ("breakdown", "idle_gaps", "idle_by_stream", "idle_by_step", "bubbles", "launch_stats", "kernel_class_time",
        "main_streams", "top_kernels", "python_events", "compile_events", "device_time", "idle_attribution")

#: Idle-gap rows kept for the whole run (about 6 MB); a run with more keeps each rank's longest gaps, as many as fit.
IDLE_GAPS_KEPT = 100_000
#: ... but never fewer than this many per rank.
IDLE_GAPS_MIN_PER_RANK = 16


def _is_spans(annotation: Any) -> bool:
    return "Spans" in str(annotation)


def compact_device_time(device: Any) -> Any:
    """``device`` (a ``rootcause.DeviceTime``) with every per-rank interval list packed in a :class:`SpanStore`."""
    if device is None:
        return None
    for f in fields(device):
        if _is_spans(f.type) and not isinstance(getattr(device, f.name), SpanStore):
            setattr(device, f.name, SpanStore(getattr(device, f.name)))
    return device


def rank_tables(kernels: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame, window: Window,
                kernel_wait_ns: int) -> dict[str, pl.DataFrame]:
    """The event-reading analyses on these frames (any ranks); ``kernel_totals`` instead of ``top_kernels``."""
    kw = window_kernels(kernels, steps, window)
    gaps = idle_gaps(kernels, steps, window, kernel_wait_ns)
    return {
        "breakdown": time_breakdown(kernels, steps, window),
        "idle_gaps": gaps,
        "idle_by_stream": idle_causes(gaps, ("rank", "stream")),
        "idle_by_step": idle_causes(gaps, ("rank", "step", "stream")),
        "bubbles": pipeline_bubbles(events, steps, window),
        "launch_stats": launch_stats(kw),
        "kernel_class_time": kernel_class_time(kw),
        "main_streams": main_streams(kw),
        "kernel_totals": kernel_totals(kw),
        # the python_function events (traces recorded with_stack), counted per rank (what the overhead finding reads)
        "python_events": events.filter(pl.col("kind").cast(pl.String) == "python").group_by("rank")
        .agg(events=pl.len()).sort("rank"),
        # torch.compile's own ranges in the trace (rootcause.trace_compile_spans reads them)
        "compile_events": events.filter(pl.col("name").cast(pl.String).str.ends_with("(dynamo_timed)"))
        .select("rank", "name", "start", "end"),
        "device_time": compact_device_time(device_time(kw, events, steps, window)),  # CPU ranks: host_time
        # every host-caused idle gap of the main streams, split over what the launching thread did (idle_causes.py)
        "idle_attribution": idle_attribution(kernels, events, steps, window),
    }


def kernel_totals(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per kernel class and name: ``count`` (rows), ``timed`` (rows with a duration), ``total_ns``, ``min_ns``,
    ``max_ns`` — the parts :func:`top_kernels_from_totals` combines across ranks."""
    # grouped on the categorical name, cast after: string keys cut from the batch's names would be views that
    # keep the whole batch's string buffer alive (~100 KB a rank held until the end of the run)
    return kernels.group_by("kernel_class", "name").agg(
        count=pl.len(), timed=pl.col("dur").count(), total_ns=pl.col("dur").sum(), min_ns=pl.col("dur").min(),
        max_ns=pl.col("dur").max(),
    ).with_columns(pl.col("name").cast(pl.String))


def top_kernels_from_totals(totals: pl.DataFrame, n: int = 10) -> pl.DataFrame:
    """:func:`workbench.analyses.kernels.top_kernels` (across ranks) from stacked :func:`kernel_totals` rows."""
    group = ["kernel_class"]
    return (
        totals.group_by("kernel_class", "name")
        .agg(count=pl.col("count").sum().cast(pl.UInt32), _timed=pl.col("timed").sum(),
             total_ns=pl.col("total_ns").sum(), min_ns=pl.col("min_ns").min(), max_ns=pl.col("max_ns").max())
        .with_columns(mean_ns=pl.when(pl.col("_timed") > 0).then(pl.col("total_ns") / pl.col("_timed")))
        .select("kernel_class", "name", "count", "total_ns", "mean_ns", "min_ns", "max_ns")
        .with_columns(
            pct_of_class=100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over(group),
            rank_in_class=pl.col("total_ns").rank("ordinal", descending=True).over(group),
        )
        .filter(pl.col("rank_in_class") <= n)
        .sort(*group, "rank_in_class")
    )


def _stack(frames: list[pl.DataFrame]) -> pl.DataFrame:
    full = [f for f in frames if f.width]
    if not full:
        return frames[0] if frames else pl.DataFrame()
    rows = [f for f in full if f.height] or full[:1]
    return pl.concat(rows, how="vertical_relaxed") if len(rows) > 1 else rows[0]


def kept_gaps(gaps: pl.DataFrame, n_ranks: int) -> pl.DataFrame:
    """The idle gaps a run keeps: all of them up to :data:`IDLE_GAPS_KEPT` rows, else :func:`longest_gaps`."""
    return gaps if gaps.height <= IDLE_GAPS_KEPT else longest_gaps(gaps, n_ranks)


def longest_gaps(gaps: pl.DataFrame, n_ranks: int) -> pl.DataFrame:
    """Each rank's longest ``max(IDLE_GAPS_MIN_PER_RANK, IDLE_GAPS_KEPT // n_ranks)`` gaps (ties: the earlier
    first), in ``gaps``' order."""
    if gaps.is_empty():
        return gaps
    per_rank = max(IDLE_GAPS_MIN_PER_RANK, IDLE_GAPS_KEPT // max(1, n_ranks))
    return (gaps.with_row_index("_row").sort(["gap_ns", "start"], descending=[True, False], maintain_order=True)
            .group_by("rank", maintain_order=True).head(per_rank).sort("_row").select(gaps.columns))


class _Merger:
    """Stacks :func:`rank_tables` results batch by batch. Once the idle gaps pass :data:`IDLE_GAPS_KEPT` rows,
    those held and every later batch's are cut to :func:`longest_gaps` (ranks never straddle batches, so this is
    :func:`kept_gaps` of the whole run) and no more than the kept rows and one batch's are ever held."""

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = n_ranks
        self.acc: dict[str, list[Any]] = {}
        self.gap_rows = 0
        self.cut = False

    def add(self, tables: dict[str, Any]) -> None:
        for k, v in tables.items():
            self.acc.setdefault(k, []).append(v)
        self.gap_rows += tables["idle_gaps"].height
        if not self.cut and self.gap_rows > IDLE_GAPS_KEPT:
            self.cut = True
            self.acc["idle_gaps"] = [longest_gaps(_stack(self.acc["idle_gaps"]), self.n_ranks)]
        elif self.cut:
            self.acc["idle_gaps"][-1] = longest_gaps(self.acc["idle_gaps"][-1], self.n_ranks)

    def result(self) -> dict[str, Any]:
        acc = dict(self.acc)
        devices = acc.pop("device_time", [])
        out: dict[str, Any] = {k: _stack(v) for k, v in acc.items()}
        out["device_time"] = _merge_device_times(devices)
        gaps = out["idle_gaps"]
        if gaps.height:
            out["idle_gaps"] = gaps.sort("end", maintain_order=True)  # as the whole-table result: by the next kernel's start
        out["top_kernels"] = top_kernels_from_totals(out.pop("kernel_totals"))
        return out


def _merge_device_times(parts: list[Any]) -> Any:
    """One ``DeviceTime`` from per-rank ones (each field is keyed by rank; interval lists stay packed)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    out = compact_device_time(type(parts[0])())
    for p in parts:
        for f in fields(out):
            getattr(out, f.name).update(getattr(p, f.name))
    return out


def event_tables(run: Any, steps: pl.DataFrame, window: Window, kernel_wait_ns: int, *,
                 max_events: int | None = None) -> dict[str, Any]:
    """:data:`KEYS` for ``run``: batch by batch of ranks when it offers ``rank_batches`` (:class:`workbench.Run`),
    else on its whole ``kernels`` and ``events`` frames. ``max_events`` overrides the batch size."""
    batches = getattr(run, "rank_batches", None)
    if callable(batches):
        merger: _Merger | None = None
        for ranks, t in batches("kernels", "events", **({"max_events": max_events} if max_events else {})):
            if merger is None:
                merger = _Merger(_n_ranks(run))
            merger.add(rank_tables(t["kernels"], t["events"], steps.filter(pl.col("rank").is_in(ranks)), window,
                                   kernel_wait_ns))
            del t
        if merger is not None:
            return merger.result()
    kernels = getattr(run, "kernels", None)
    events = getattr(run, "events", None)
    kernels = kernels if isinstance(kernels, pl.DataFrame) else empty(KERNELS)
    events = events if isinstance(events, pl.DataFrame) else empty(EVENTS)
    out = rank_tables(kernels, events, steps, window, kernel_wait_ns)
    out.pop("kernel_totals")
    out["idle_gaps"] = kept_gaps(out["idle_gaps"], _n_ranks(run, kernels))
    out["top_kernels"] = top_kernels(window_kernels(kernels, steps, window))
    return out


def _n_ranks(run: Any, kernels: pl.DataFrame | None = None) -> int:
    """The ranks the idle-gap budget is shared by: the run's rank table, else the ranks with kernels."""
    ranks = getattr(run, "ranks", None)
    if isinstance(ranks, pl.DataFrame) and ranks.height:
        return ranks.height
    if kernels is not None and kernels.height:
        return kernels["rank"].n_unique()
    return 1


__all__ = ["IDLE_GAPS_KEPT", "KEYS", "SpanStore", "compact_device_time", "event_tables", "kept_gaps", "kernel_totals",
           "longest_gaps", "rank_tables", "top_kernels_from_totals"]
