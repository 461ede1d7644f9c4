"""Interval algebra on polars frames: unions, covered time and intersections, all vectorised.

Intervals are rows with a ``start`` and an ``end`` (int64 ns, ``end >= start``) and any number of grouping
columns (``by``), usually ``rank``. Nothing here loops over rows in Python: unions come from a sort plus a
cumulative maximum of the ends, and the time an interval set covers up to a point comes from an as-of join.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def merge_intervals(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = ("rank",)) -> pl.LazyFrame:
    """The union of the intervals in ``frame`` per ``by`` group, as disjoint sorted intervals.

    Columns: ``by...``, ``start``, ``end`` (a merged interval: overlapping or touching inputs become one;
    zero-length inputs inside another interval vanish). Rows are sorted by ``by`` then ``start``.
    """
    by = list(by)
    lf = frame.lazy().select([*by, "start", "end"]).filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
    prev_end = pl.col("end").cum_max().shift(1)
    if by:
        prev_end = prev_end.over(by)
    return (
        lf.sort([*by, "start"])
        .with_columns(_new=(pl.col("start") > prev_end).fill_null(True))
        .with_columns(_grp=(pl.col("_new").cum_sum().over(by) if by else pl.col("_new").cum_sum()))
        .group_by([*by, "_grp"])
        .agg(pl.col("start").min(), pl.col("end").max())
        .drop("_grp")
        .sort([*by, "start"])
    )


def union_length(frame: pl.DataFrame | pl.LazyFrame, by: Sequence[str] = ("rank",)) -> pl.LazyFrame:
    """Total time (ns) covered by at least one interval, per ``by`` group. Columns: ``by...``, ``covered_ns``."""
    by = list(by)
    merged = merge_intervals(frame, by)
    agg = (pl.col("end") - pl.col("start")).sum().alias("covered_ns")
    return merged.group_by(by).agg(agg) if by else merged.select(agg)


def covered_until(
    merged: pl.LazyFrame | pl.DataFrame,
    points: pl.LazyFrame | pl.DataFrame,
    at: str,
    by: Sequence[str] = ("rank",),
    name: str = "covered",
) -> pl.LazyFrame:
    """``points`` with a column ``name``: time (ns) that the disjoint intervals ``merged`` cover in ``(-inf, at]``.

    ``merged`` must come from :func:`merge_intervals` with the same ``by``. A point before every interval, or in a
    group without intervals, gets 0.
    """
    by = list(by)
    m = (
        merged.lazy()
        .with_columns(_len=pl.col("end") - pl.col("start"))
        .with_columns(
            _before=(pl.col("_len").cum_sum().over(by) if by else pl.col("_len").cum_sum()) - pl.col("_len")
        )
        .rename({"start": "_m_start", "end": "_m_end"})
        .sort("_m_start")
    )
    p = points.lazy().with_row_index("_pt").sort(at)
    joined = p.join_asof(m, left_on=at, right_on="_m_start", by=by or None, strategy="backward", check_sortedness=False)
    value = (
        pl.col("_before") + pl.min_horizontal(pl.col(at) - pl.col("_m_start"), pl.col("_len")).clip(lower_bound=0)
    ).fill_null(0)
    return (
        joined.with_columns(value.alias(name))
        .drop(["_m_start", "_m_end", "_len", "_before"])
        .sort("_pt")
        .drop("_pt")
    )


def covered_between(
    intervals: pl.LazyFrame | pl.DataFrame,
    ranges: pl.LazyFrame | pl.DataFrame,
    by: Sequence[str] = ("rank",),
    name: str = "covered_ns",
) -> pl.LazyFrame:
    """``ranges`` (with ``start``/``end``) plus ``name``: time in each range covered by the union of ``intervals``.

    The ranges may overlap each other; each is measured on its own.
    """
    by = list(by)
    merged = merge_intervals(intervals, by)
    r = ranges.lazy()
    r = covered_until(merged, r, "start", by, "_c0")
    r = covered_until(merged, r, "end", by, "_c1")
    return r.with_columns((pl.col("_c1") - pl.col("_c0")).alias(name)).drop(["_c0", "_c1"])
