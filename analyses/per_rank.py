"""The analyses that read ``events`` / ``kernels``, run on a few ranks at a time so a large run never holds them all.

Breakdown, idle gaps, pipeline bubbles, launch statistics, kernel class time and the main stream are per-rank
results: computed on the rows of a batch of ranks (``Run.rank_batches``: about 200k events at a time) and stacked,
they equal the whole-table result. The top kernels rank kernels
across ranks, so each rank contributes its per-kernel totals (count, sum, min, max) and the ranking is done once
on those. Only these results (a few rows per rank and step, the idle gaps) stay in memory.

Example:
    >>> tables = event_tables(workbench.open("runs/exp1"), steps, "steady", KERNEL_WAIT_NS)   # doctest: +SKIP
    >>> tables["breakdown"]                                                                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from workbench.analyses.breakdown import idle_gaps, main_streams, time_breakdown
from workbench.analyses.bubbles import pipeline_bubbles
from workbench.analyses.kernels import kernel_class_time, launch_stats, top_kernels
from workbench.analyses.window import Window, window_kernels
from workbench.schema import EVENTS, KERNELS, empty

#: What :func:`event_tables` returns: frames, and ``device_time`` (a ``rootcause.DeviceTime`` where that exists).
KEYS = ("breakdown", "idle_gaps", "bubbles", "launch_stats", "kernel_class_time", "main_streams", "top_kernels",
        "python_events", "compile_events", "device_time")


def _device_time(kw: pl.DataFrame, events: pl.DataFrame | None = None, steps: pl.DataFrame | None = None,
                 window: Window = "steady") -> Any:
    try:
        from workbench.analyses.rootcause import device_time
    except ImportError:
        return None
    return device_time(kw, events, steps, window)  # ranks without device activity: host-side (rootcause.host_time)


def rank_tables(kernels: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame, window: Window,
                kernel_wait_ns: int) -> dict[str, pl.DataFrame]:
    """The event-reading analyses on these frames (any ranks); ``kernel_totals`` instead of ``top_kernels``."""
    kw = window_kernels(kernels, steps, window)
    return {
        "breakdown": time_breakdown(kernels, steps, window),
        "idle_gaps": idle_gaps(kernels, steps, window, kernel_wait_ns),
        "bubbles": pipeline_bubbles(events, steps, window),
        "launch_stats": launch_stats(kw),
        "kernel_class_time": kernel_class_time(kw),
        "main_streams": main_streams(kw),
        "kernel_totals": kernel_totals(kw),
        # the python_function events (traces recorded with_stack), narrowed to what the overhead finding reads
        "python_events": events.filter(pl.col("kind").cast(pl.String) == "python").select("rank", "kind"),
        # torch.compile's own ranges in the trace (rootcause.trace_compile_spans reads them)
        "compile_events": events.filter(pl.col("name").cast(pl.String).str.ends_with("(dynamo_timed)"))
        .select("rank", "name", "start", "end"),
        "device_time": _device_time(kw, events, steps, window),
    }


def kernel_totals(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per kernel class and name: ``count`` (rows), ``timed`` (rows with a duration), ``total_ns``, ``min_ns``,
    ``max_ns`` — the parts :func:`top_kernels_from_totals` combines across ranks."""
    return kernels.with_columns(pl.col("name").cast(pl.String)).group_by("kernel_class", "name").agg(
        count=pl.len(), timed=pl.col("dur").count(), total_ns=pl.col("dur").sum(), min_ns=pl.col("dur").min(),
        max_ns=pl.col("dur").max(),
    )


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


def merge_rank_tables(per_rank: Iterable[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """The per-rank results of :func:`rank_tables`, stacked in rank order, as one run's :data:`KEYS`."""
    acc: dict[str, list[Any]] = {}
    for tables in per_rank:
        for k, v in tables.items():
            acc.setdefault(k, []).append(v)
    devices = acc.pop("device_time", [])
    out: dict[str, Any] = {k: _stack(v) for k, v in acc.items()}
    out["device_time"] = _merge_device_times(devices)
    gaps = out["idle_gaps"]
    if gaps.height:
        out["idle_gaps"] = gaps.sort("end", maintain_order=True)  # as the whole-table result: by the next kernel's start
    out["top_kernels"] = top_kernels_from_totals(out.pop("kernel_totals"))
    return out


def _merge_device_times(parts: list[Any]) -> Any:
    """One ``DeviceTime`` from per-rank ones (each field is a dict keyed by rank)."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    out = type(parts[0])()
    for p in parts:
        for name in out.__dataclass_fields__:
            getattr(out, name).update(getattr(p, name))
    return out


def event_tables(run: Any, steps: pl.DataFrame, window: Window, kernel_wait_ns: int, *,
                 max_events: int | None = None) -> dict[str, Any]:
    """:data:`KEYS` for ``run``: batch by batch of ranks when it offers ``rank_batches`` (:class:`workbench.Run`),
    else on its whole ``kernels`` and ``events`` frames. ``max_events`` overrides the batch size."""
    batches = getattr(run, "rank_batches", None)
    if callable(batches):
        results = [rank_tables(t["kernels"], t["events"], steps.filter(pl.col("rank").is_in(ranks)), window,
                               kernel_wait_ns)
                   for ranks, t in batches("kernels", "events", **({"max_events": max_events} if max_events else {}))]
        if results:
            return merge_rank_tables(results)
    kernels = getattr(run, "kernels", None)
    events = getattr(run, "events", None)
    kernels = kernels if isinstance(kernels, pl.DataFrame) else empty(KERNELS)
    events = events if isinstance(events, pl.DataFrame) else empty(EVENTS)
    out = rank_tables(kernels, events, steps, window, kernel_wait_ns)
    out.pop("kernel_totals")
    out["top_kernels"] = top_kernels(window_kernels(kernels, steps, window))
    return out


__all__ = ["KEYS", "event_tables", "kernel_totals", "merge_rank_tables", "rank_tables", "top_kernels_from_totals"]
