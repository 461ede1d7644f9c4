"""Interval algebra, the one place: span lists and polars frames of intervals.

An interval is a ``start`` and an ``end`` (int64 ns, ``end >= start``); a time set is a union of intervals.

Span lists (one rank's time sets, for root-cause attribution; :data:`Spans`):

* :func:`merge` — the disjoint sorted union of any spans; :func:`intersect`, :func:`subtract` of two merged lists;
  :func:`length` — the time a merged list covers; :func:`overlaps` — whether a span touches a merged list;
* :class:`SpanStore` — ``{rank: spans}`` packed as int64 arrays (16 bytes a span), for thousands of ranks.

Frames (rows with ``start``/``end`` and grouping columns ``by``, usually ``rank``; nothing loops over rows in
Python):

* :func:`merge_intervals`, :func:`union_length` — unions from a sort plus a cumulative maximum of the ends;
* :func:`covered_until`, :func:`covered_between` — the time a union covers up to a point, or inside ranges (an
  as-of join);
* :func:`previous_end` — per row, the latest end of the group's earlier rows (what a gap is measured from);
* :func:`class_coverage` — per segment, the time during which exactly each combination of interval classes is
  active (one sweep over every boundary): breakdown's compute / communication / copies / idle come from it.

Example:
    >>> merge([(5, 9), (0, 3), (2, 4)])
    [(0, 4), (5, 9)]
    >>> subtract([(0, 10)], [(2, 3), (5, 6)])
    [(0, 2), (3, 5), (6, 10)]
    >>> length(intersect([(0, 10)], [(8, 20)]))
    2
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import polars as pl

#: A merged time set: disjoint ``(start, end)`` pairs in start order.
Spans = list[tuple[int, int]]


# ---------------------------------------------------------------------------------------------- span lists
def merge(spans: Iterable[tuple[Any, Any]]) -> Spans:
    """Disjoint sorted union of ``spans`` (pairs with a null end or ``end <= start`` are left out)."""
    out: Spans = []
    for s, e in sorted((int(a), int(b)) for a, b in spans if a is not None and b is not None and b > a):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def intersect(a: Spans, b: Spans) -> Spans:
    """Intersection of two merged lists."""
    out: Spans = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Spans, b: Spans) -> Spans:
    """``a`` minus ``b`` (both merged)."""
    out: Spans = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def length(a: Spans) -> int:
    """Time (ns) a merged list covers."""
    return sum(e - s for s, e in a)


def overlaps(spans: Spans, start: int, end: int) -> bool:
    """Whether ``(start, end)`` shares time with any span of ``spans``."""
    return any(s < end and e > start for s, e in spans)


class SpanStore(MutableMapping):
    """``{rank: [(start, end), ...]}`` held as one int64 array per rank (16 bytes a span instead of ~130 as
    tuples): what keeps the root-cause intervals of thousands of ranks small. Reading a rank gives its list."""

    __slots__ = ("_data",)

    def __init__(self, spans: Mapping[int, Iterable[tuple[int, int]]] | None = None) -> None:
        self._data: dict[int, array] = {}
        if spans:
            self.update(spans)

    def __getitem__(self, rank: int) -> Spans:
        flat = self._data[rank].tolist()
        return list(zip(flat[0::2], flat[1::2]))

    def __setitem__(self, rank: int, spans: Iterable[tuple[int, int]]) -> None:
        self._data[rank] = array("q", [int(x) for se in spans for x in se])

    def __delitem__(self, rank: int) -> None:
        del self._data[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, rank: object) -> bool:
        return rank in self._data

    def update(self, other: Any = (), /, **kw: Any) -> None:  # type: ignore[override]
        """As ``dict.update``; from another store the arrays are shared, not unpacked."""
        if isinstance(other, SpanStore):
            self._data.update(other._data)
        else:
            super().update(other, **kw)

    def nbytes(self) -> int:
        """Bytes of span data held."""
        return sum(a.itemsize * len(a) for a in self._data.values())

    def __repr__(self) -> str:
        return f"SpanStore({len(self)} ranks, {self.nbytes() // 16:,} spans)"


# ---------------------------------------------------------------------------------------------- frames
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


def previous_end(by: Sequence[str]) -> pl.Expr:
    """Per row of a frame sorted by ``start``: the latest ``end`` of the earlier rows of its ``by`` group (null for
    a group's first row). A row starting after it begins a gap of ``start - previous_end``."""
    return pl.col("end").cum_max().shift(1).over(list(by))


def class_coverage(intervals: pl.DataFrame, segments: pl.DataFrame, classes: Sequence[str], *,
                   cls: str = "kernel_class", by: str = "rank") -> pl.LazyFrame:
    """Per segment, the time during which exactly each combination of ``classes`` is active.

    ``intervals``: ``by``, ``start``, ``end`` and ``cls`` (rows of other classes count for nothing); ``segments``:
    ``by``, ``start`` (where each segment begins; it runs to the group's next segment start or its last interval
    end). One sweep over every interval start and end, with the segment starts as extra boundaries so no
    elementary interval crosses a segment: running counts say which classes are active in each elementary
    interval. Columns: ``by``, ``start`` (the segment's), ``mask`` (bit ``i`` set: ``classes[i]`` active; 0: none),
    ``ns``. Select with :func:`mask_has`.
    """
    c = pl.col(cls).cast(pl.String)
    deltas = [(c == k).cast(pl.Int32).alias(f"_d{i}") for i, k in enumerate(classes)]
    zero = [pl.lit(0, pl.Int32).alias(f"_d{i}") for i in range(len(classes))]
    starts = intervals.lazy().select(by, pl.col("start").alias("t"), *deltas)
    ends = intervals.lazy().select(by, pl.col("end").alias("t"), *[(-d) for d in deltas])
    marks = segments.lazy().select(by, pl.col("start").alias("t"), *zero)
    # every group's deltas sum to zero, so one running sum over the frame sorted by group is each group's count
    active = [(pl.col(f"_d{i}").cum_sum() > 0).cast(pl.Int64) * (1 << i) for i in range(len(classes))]
    sweep = (
        pl.concat([starts, ends, marks])
        .sort(by, "t")
        .with_columns(mask=pl.sum_horizontal(active) if active else pl.lit(0, pl.Int64),
                      ns=pl.when(pl.col(by).shift(-1) == pl.col(by)).then(pl.col("t").shift(-1) - pl.col("t"))
                      .otherwise(0))
        .join_asof(segments.lazy().select(by, pl.col("start").alias("_seg")).sort("_seg"),
                   left_on="t", right_on="_seg", by=by, strategy="backward", check_sortedness=False)
    )
    return sweep.group_by(by, pl.col("_seg").alias("start"), "mask").agg(pl.col("ns").sum())


def mask_has(classes: Sequence[str], *names: str, every: bool = False) -> pl.Expr:
    """A filter on :func:`class_coverage`'s ``mask``: at least one of ``names`` is active (``every``: all are)."""
    bits = 0
    for k in names:
        bits |= 1 << list(classes).index(k)
    return (pl.col("mask") & bits) == bits if every else (pl.col("mask") & bits) != 0


__all__ = ["SpanStore", "Spans", "class_coverage", "covered_between", "covered_until", "intersect", "length",
           "mask_has", "merge", "merge_intervals", "overlaps", "previous_end", "subtract", "union_length"]
