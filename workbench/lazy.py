"""Per-rank tables that stay out of memory until asked for: what keeps a 1024-rank run in bounded memory.

Ingestion turns every trace file into a :class:`RankPart`: its small tables (collectives, steps, skipped) and
counts in memory, its ``events`` and ``kernels`` either as the parquet files of its cache entry or, for a run
read uncached, as frames. :class:`BigTables` stacks the parts of a run: a whole table on first access
(``frame``), a polars ``LazyFrame`` over the parquet files (``scan``), or one rank at a time (``per_rank``).

Example:
    >>> run = workbench.open("runs/exp1")                         # doctest: +SKIP
    >>> for rank, t in run.per_rank("kernels"):                   # doctest: +SKIP
    ...     print(rank, t["kernels"].height)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from workbench import schema
from workbench.kineto import TraceTables

BIG = ("events", "kernels")
_SCHEMAS = {"events": schema.EVENTS, "kernels": schema.KERNELS}
_EMPTY = {"collectives": schema.empty(schema.COLLECTIVES), "steps": schema.empty(schema.STEPS),
          "skipped": schema.empty(schema.SKIPPED)}


@dataclass(slots=True)
class RankPart:
    """One trace file as ingested: small tables in memory, ``big`` tables as parquet files or frames."""

    path: str
    rank: int
    rank_source: str
    meta: dict[str, Any]
    collectives: pl.DataFrame
    steps: pl.DataFrame
    skipped: pl.DataFrame
    big: dict[str, Path | pl.DataFrame]
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_tables(cls, tables: TraceTables, files: dict[str, Path] | None = None) -> RankPart:
        """A part from freshly read tables; with ``files`` (its cache entry) the big frames are dropped."""
        big: dict[str, Path | pl.DataFrame] = (
            dict(files) if files else {t: schema.conform(getattr(tables, t), _SCHEMAS[t]) for t in BIG})
        return cls(path=tables.path, rank=tables.rank, rank_source=tables.rank_source, meta=compact_meta(tables.meta),
                   collectives=tables.collectives, steps=tables.steps, skipped=tables.skipped, big=big,
                   stats=part_stats(tables.events, tables.kernels))

    def frame(self, table: str) -> pl.DataFrame:
        """This part's ``events`` or ``kernels``, conformed to its schema (read from parquet when cached)."""
        src = self.big[table]
        if isinstance(src, pl.DataFrame):
            return src
        return schema.conform(pl.read_parquet(src), _SCHEMAS[table])

    def drop_small_tables(self) -> None:
        """Let go of ``collectives``, ``steps`` and ``skipped`` once a :class:`~workbench.Run` holds them stacked
        (a 1024-rank run would otherwise hold every small table twice)."""
        self.collectives = _EMPTY["collectives"]
        self.steps = _EMPTY["steps"]
        self.skipped = _EMPTY["skipped"]

    def cached(self) -> bool:
        """Whether the big tables live in parquet files."""
        return all(isinstance(v, Path) for v in self.big.values())


def compact_meta(meta: dict[str, Any], max_ranks: int = 64) -> dict[str, Any]:
    """``meta`` without the member lists of large process groups (``distributedInfo.pg_config[].ranks``):
    every rank of an N-rank job lists all N, which held for N ranks is N² numbers. Their length is kept
    (``ranks_count``); the cache entry keeps them whole."""
    di = meta.get("distributedInfo")
    pgs = di.get("pg_config") if isinstance(di, dict) else None
    if not isinstance(pgs, list) or not any(isinstance(pg, dict) and isinstance(pg.get("ranks"), list)
                                            and len(pg["ranks"]) > max_ranks for pg in pgs):
        return meta
    small = [dict(pg, ranks=None, ranks_count=len(pg["ranks"]))
             if isinstance(pg, dict) and isinstance(pg.get("ranks"), list) and len(pg["ranks"]) > max_ranks else pg
             for pg in pgs]
    return {**meta, "distributedInfo": {**di, "pg_config": small}}


def part_stats(events: pl.DataFrame, kernels: pl.DataFrame) -> dict[str, Any]:
    """The per-file counts ``Run.info()`` needs, so a summary never reads the events again."""
    by_kind = {str(k): int(n) for k, n in events.group_by("kind").len().iter_rows()} if events.height else {}
    by_class = {str(k): int(n) for k, n in kernels.group_by("kernel_class").len().iter_rows()
                if k is not None} if kernels.height else {}
    return {
        "events": events.height,
        "kernels": kernels.height,
        "events_by_kind": by_kind,
        "kernels_by_class": by_class,
        "start": int(events.get_column("start").min()) if events.height else None,
        "end": int(events.get_column("end").max()) if events.height else None,
    }


#: Events held at once when analyses go through a run in batches of ranks (about 40 MB of frames).
BATCH_EVENTS = 200_000


def _stack(frames: list[pl.DataFrame], table: str) -> pl.DataFrame:
    full = [f for f in frames if f.height]
    if not full:
        return schema.empty(_SCHEMAS[table])
    return pl.concat(full, how="vertical") if len(full) > 1 else full[0]


class BigTables:
    """``events`` and ``kernels`` of every part of a run, materialised only when asked for."""

    def __init__(self, parts: list[RankPart] | None = None, frames: dict[str, pl.DataFrame] | None = None) -> None:
        self.parts = parts or []
        self._frames: dict[str, pl.DataFrame] = dict(frames or {})

    def loaded(self, table: str) -> bool:
        """Whether ``table`` is held whole in memory."""
        return table in self._frames

    def frame(self, table: str) -> pl.DataFrame:
        """The whole table, every part stacked in ingestion order (read once, then kept)."""
        if table not in self._frames:
            frames = [f for f in (p.frame(table) for p in self.parts) if f.height]
            self._frames[table] = (pl.concat(frames, how="vertical") if frames else schema.empty(_SCHEMAS[table]))
        return self._frames[table]

    def set(self, table: str, frame: pl.DataFrame) -> None:
        """Replace a table by a frame (``Run.events = ...``)."""
        self._frames[table] = frame

    def scan(self, table: str, ranks: Iterable[int] | None = None) -> pl.LazyFrame:
        """A LazyFrame over the whole table (or ``ranks``' rows only: only their files are read): parquet scans
        of the cached parts, in-memory frames of the others."""
        if ranks is not None:
            return self.subset(ranks).scan(table)
        if table in self._frames or not self.parts:
            return self.frame(table).lazy()
        cols = [pl.col(n).cast(t) for n, t in _SCHEMAS[table].items()]
        lazies = [(pl.scan_parquet(src) if isinstance(src, Path) else src.lazy()).select(cols)
                  for src in (p.big[table] for p in self.parts)]
        return pl.concat(lazies, how="vertical") if len(lazies) > 1 else lazies[0]

    def subset(self, ranks: Iterable[int]) -> BigTables:
        """The same tables for ``ranks`` only (their parts; frames held whole are filtered)."""
        keep = {int(r) for r in ranks}
        frames = {t: f.filter(pl.col("rank").is_in(sorted(keep))) for t, f in self._frames.items()}
        return BigTables([p for p in self.parts if p.rank in keep], frames)

    def ranks_with(self, table: str) -> list[int]:
        """The ranks with at least one row of ``table``, ascending (from the per-file counts when not loaded)."""
        if table in self._frames or not self.parts:
            f = self.frame(table)
            return sorted(int(r) for r in f.get_column("rank").unique().drop_nulls().to_list()) if f.height else []
        return sorted({p.rank for p in self.parts if int(p.stats.get(table, 0)) > 0})

    def ranks(self) -> list[int]:
        """The ranks with a part (or with rows, for tables set whole), ascending."""
        if self.parts:
            return sorted({p.rank for p in self.parts})
        ranks: set[int] = set()
        for f in self._frames.values():
            if f.height:
                ranks |= set(f.get_column("rank").unique().drop_nulls().to_list())
        return sorted(ranks)

    def batches(self, tables: tuple[str, ...] = BIG, max_events: int = BATCH_EVENTS,
                ) -> Iterator[tuple[list[int], dict[str, pl.DataFrame]]]:
        """``(ranks, {table: frame})``: consecutive ranks (ascending) together, as many as hold about
        ``max_events`` events (at least one rank), so per-query costs are shared without holding every rank."""
        batch: list[int] = []
        frames: dict[str, list[pl.DataFrame]] = {t: [] for t in tables}
        n = 0
        events_of = {}
        for p in self.parts:
            events_of[p.rank] = events_of.get(p.rank, 0) + int(p.stats.get("events", 0))
        for rank, t in self.per_rank(tables):
            if batch and n + events_of.get(rank, 0) > max_events:
                yield batch, {k: _stack(v, k) for k, v in frames.items()}
                batch, frames, n = [], {k: [] for k in tables}, 0
            batch.append(rank)
            n += events_of.get(rank, 0)
            for k, f in t.items():
                frames[k].append(f)
        if batch:
            yield batch, {k: _stack(v, k) for k, v in frames.items()}

    def per_rank(self, tables: tuple[str, ...] = BIG) -> Iterator[tuple[int, dict[str, pl.DataFrame]]]:
        """``(rank, {table: frame})`` for every rank in ascending order, one rank's rows in memory at a time
        (filtered from the whole table instead when that is already loaded)."""
        by_rank: dict[int, list[RankPart]] = {}
        for p in self.parts:
            by_rank.setdefault(p.rank, []).append(p)
        for rank in self.ranks():
            out: dict[str, pl.DataFrame] = {}
            for t in tables:
                if t in self._frames or rank not in by_rank:
                    out[t] = self.frame(t).filter(pl.col("rank") == rank)
                else:
                    frames = [f for f in (p.frame(t) for p in by_rank[rank]) if f.height]
                    out[t] = pl.concat(frames, how="vertical") if frames else schema.empty(_SCHEMAS[t])
            yield rank, out


__all__ = ["BATCH_EVENTS", "BigTables", "RankPart", "compact_meta", "part_stats"]
