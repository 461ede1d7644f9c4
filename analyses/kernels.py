"""Kernel summary and launch statistics.

* top kernels: per kernel class, the kernels with the most total device time.
* launch delay: ``start - launch_start``, from the CPU launch call to the kernel starting on the device (queueing
  plus launch overhead); ``queue_ns`` = ``start - launch_end`` (time spent queued behind earlier work).
* short kernels: activity shorter than ``short_ns`` (default 10 µs) — when most kernels are short and the stream
  idles waiting on the host, the step is launch-bound (CUDA graphs / fusion help).
"""

from __future__ import annotations

import polars as pl

SHORT_NS = 10_000


def top_kernels(kernels: pl.DataFrame, n: int = 10, by_rank: bool = False) -> pl.DataFrame:
    """The ``n`` kernels with the most device time in each kernel class (optionally per rank).

    Columns: (``rank``), ``kernel_class``, ``name``, ``count``, ``total_ns``, ``mean_ns``, ``min_ns``, ``max_ns``,
    ``pct_of_class`` (share of the class's summed kernel time), ``rank_in_class`` (1 = most time).
    """
    group = (["rank"] if by_rank else []) + ["kernel_class"]
    k = kernels.with_columns(pl.col("name").cast(pl.String))
    out = (
        k.group_by(*group, "name")
        .agg(count=pl.len(), total_ns=pl.col("dur").sum(), mean_ns=pl.col("dur").mean(), min_ns=pl.col("dur").min(),
             max_ns=pl.col("dur").max())
        .with_columns(
            pct_of_class=100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over(group),
            rank_in_class=pl.col("total_ns").rank("ordinal", descending=True).over(group),
        )
        .filter(pl.col("rank_in_class") <= n)
        .sort(*group, "rank_in_class")
    )
    return out


def launch_stats(kernels: pl.DataFrame, short_ns: int = SHORT_NS) -> pl.DataFrame:
    """Launch delay distribution and short kernels per rank and kernel class.

    Columns: ``rank``, ``kernel_class``, ``count``, ``launched`` (rows with a recorded launch),
    ``delay_p50_ns`` / ``delay_p90_ns`` / ``delay_p99_ns`` / ``delay_max_ns`` (``start - launch_start``),
    ``queue_p50_ns`` (``start - launch_end``), ``short`` (rows shorter than ``short_ns``), ``short_pct``,
    ``short_time_ns`` (their summed duration), ``mean_dur_ns``.
    """
    delay = pl.col("start") - pl.col("launch_start")
    return (
        kernels.group_by("rank", "kernel_class")
        .agg(
            count=pl.len(),
            launched=pl.col("launch_start").is_not_null().sum(),
            delay_p50_ns=delay.quantile(0.5),
            delay_p90_ns=delay.quantile(0.9),
            delay_p99_ns=delay.quantile(0.99),
            delay_max_ns=delay.max(),
            queue_p50_ns=(pl.col("start") - pl.col("launch_end")).quantile(0.5),
            short=(pl.col("dur") < short_ns).sum(),
            short_time_ns=pl.col("dur").filter(pl.col("dur") < short_ns).sum(),
            mean_dur_ns=pl.col("dur").mean(),
        )
        .with_columns(short_pct=100.0 * pl.col("short") / pl.col("count"))
        .sort("rank", "kernel_class")
    )


def kernel_class_time(kernels: pl.DataFrame) -> pl.DataFrame:
    """Summed device time per rank and kernel class (not a union: overlapping kernels each count).

    Columns: ``rank``, ``kernel_class``, ``count``, ``total_ns``.
    """
    return (
        kernels.group_by("rank", pl.col("kernel_class").cast(pl.String))
        .agg(count=pl.len(), total_ns=pl.col("dur").sum())
        .sort("rank", "kernel_class")
    )
