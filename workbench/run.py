"""``workbench.open(path)`` and the :class:`Run` it returns: every table of a run as polars frames.

Example:
    >>> run = workbench.open("sample_traces/cpu-gloo-4rank")      # doctest: +SKIP
    >>> run.kernels.group_by("rank", "kernel_class").len()        # doctest: +SKIP
    >>> run.steps.to_pandas()                                     # doctest: +SKIP
"""

from __future__ import annotations

import os
from itertools import islice
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import orjson
import polars as pl

from workbench import cache as table_cache
from workbench import rundir, schema
from workbench.discover import Sources, TraceSource
from workbench.errors import InputError, OptionError, TraceError, one_line
from workbench.regular_file import read_regular
from workbench.kineto import ASSUMED_RANK, MAX_WORLD_SIZE, read_trace, same_rank_windows
from workbench.lazy import BATCH_EVENTS, BIG, BigTables, RankPart, compact_meta
from workbench.schema import HangTables

OnError = Literal["raise", "skip"]
ProgressCallback = Callable[[str, int, int], None]


class Run:
    """All tables of one run, all ranks stacked with a ``rank`` column (schemas in :mod:`workbench.schema`).

    ``events`` and ``kernels`` are read from the per-rank parquet cache on first access; analyses that go
    rank by rank use :meth:`per_rank` (one rank's rows in memory at a time) or :meth:`scan` (a LazyFrame).
    """

    def __init__(self, path: Path, ranks: pl.DataFrame, events: pl.DataFrame | None = None,
                 kernels: pl.DataFrame | None = None, collectives: pl.DataFrame | None = None,
                 steps: pl.DataFrame | None = None, compiles: pl.DataFrame | None = None,
                 fingerprints: pl.DataFrame | None = None, skipped: pl.DataFrame | None = None,
                 problems: list[str] | None = None, meta: dict[str, Any] | None = None, *,
                 big: BigTables | None = None) -> None:
        self.path = path
        self.ranks = ranks
        self._big = big if big is not None else BigTables()
        if events is not None:
            self._big.set("events", events)
        if kernels is not None:
            self._big.set("kernels", kernels)
        self.collectives = collectives if collectives is not None else schema.empty(schema.COLLECTIVES)
        self.steps = steps if steps is not None else schema.empty(schema.STEPS)
        self.compiles = compiles if compiles is not None else schema.empty(schema.COMPILES)
        self.fingerprints = fingerprints if fingerprints is not None else schema.empty(schema.FINGERPRINTS)
        self.skipped = skipped if skipped is not None else schema.empty(schema.SKIPPED)
        self.problems: list[str] = problems if problems is not None else []
        self.meta: dict[str, Any] = meta if meta is not None else {}

    @property
    def events(self) -> pl.DataFrame:
        """EVENTS of every rank (read whole on first access; prefer :meth:`per_rank` on large runs)."""
        return self._big.frame("events")

    @events.setter
    def events(self, frame: pl.DataFrame) -> None:
        self._big.set("events", frame)

    @property
    def kernels(self) -> pl.DataFrame:
        """KERNELS of every rank (read whole on first access; prefer :meth:`per_rank` on large runs)."""
        return self._big.frame("kernels")

    @kernels.setter
    def kernels(self, frame: pl.DataFrame) -> None:
        self._big.set("kernels", frame)

    def per_rank(self, *tables: str) -> Iterator[tuple[int, dict[str, pl.DataFrame]]]:
        """``(rank, {"events": ..., "kernels": ...})`` for every rank, ascending, one rank in memory at a time."""
        return self._big.per_rank(tables or BIG)

    def rank_batches(self, *tables: str, max_events: int = BATCH_EVENTS,
                     ) -> Iterator[tuple[list[int], dict[str, pl.DataFrame]]]:
        """``(ranks, {"events": ..., "kernels": ...})``: consecutive ranks together, about ``max_events``
        events at a time (what the analyses use: the per-query cost is shared, memory stays bounded)."""
        return self._big.batches(tables or BIG, max_events)

    def scan(self, table: str, ranks: Iterable[int] | None = None) -> pl.LazyFrame:
        """A polars LazyFrame over ``events`` or ``kernels`` (parquet scans of the cache), or any table;
        with ``ranks``, those ranks' rows only (only their cache files are read)."""
        if table in BIG:
            return self._big.scan(table, ranks)
        lazy = self.table(table).lazy()
        return lazy.filter(pl.col("rank").is_in(sorted({int(r) for r in ranks}))) if ranks is not None else lazy

    def subset(self, ranks: Iterable[int]) -> Run:
        """The same run restricted to ``ranks``: every small table filtered, ``events`` / ``kernels`` read from
        those ranks' cache files only, on first use (a drill-down into a few ranks of a large run)."""
        keep = sorted({int(r) for r in ranks})

        def only(frame: pl.DataFrame) -> pl.DataFrame:
            return frame.filter(pl.col("rank").is_in(keep)) if "rank" in frame.columns else frame

        return type(self)(path=self.path, ranks=only(self.ranks), collectives=only(self.collectives),
                   steps=only(self.steps), compiles=only(self.compiles), fingerprints=only(self.fingerprints),
                   skipped=only(self.skipped), problems=list(self.problems), meta=dict(self.meta),
                   big=self._big.subset(keep))

    def ranks_with(self, table: str) -> list[int]:
        """Ranks with at least one row of ``table`` (``events`` / ``kernels``: from the per-file counts, without
        reading them), ascending."""
        if table in BIG:
            return self._big.ranks_with(table)
        f = self.table(table)
        return sorted(int(r) for r in f.get_column("rank").unique().drop_nulls().to_list()) if f.height else []

    def loaded(self, table: str) -> bool:
        """Whether ``events`` / ``kernels`` is held whole in memory (the small tables always are)."""
        return table not in BIG or self._big.loaded(table)

    def count(self, table: str) -> int:
        """Rows of a table, without reading ``events`` / ``kernels`` when they are not loaded."""
        if table in BIG and not self._big.loaded(table) and self._big.parts:
            return sum(int(p.stats.get(table, 0)) for p in self._big.parts)
        return self.table(table).height

    @property
    def name(self) -> str:
        """A short name for the run: its folder (or file) name."""
        return self.path.name

    @property
    def world_size(self) -> int | None:
        """The world size the traces or ``run.json`` state, else the number of ranks seen."""
        ws = self._stated_world_size()
        return ws if ws is not None else (self.ranks.height or None)

    def _stated_world_size(self) -> int | None:
        ws = self.meta.get("world_size")
        if ws is None and self.ranks.height:
            ws = self.ranks.get_column("world_size").max()
        return int(ws) if ws is not None else None

    @property
    def hangs(self) -> HangTables:
        """The run's hang evidence: Flight Recorder dumps and the collector's hang files under its folder, and the
        collectives its compiled graphs issue (:func:`workbench.flight_recorder.run_hangs`; read on first use)."""
        from workbench.flight_recorder import run_hangs

        return run_hangs(self)

    def __repr__(self) -> str:
        """One line (``print(run)`` never dumps the tables): ranks, device, steps and what was recorded."""
        devices = sorted({d for d in self.ranks.get_column("device_name").to_list() if d}) \
            if "device_name" in self.ranks.columns else []
        steps = self.steps.get_column("step").n_unique() if self.steps.height else 0
        kernels = self.count("kernels")
        what = f"{kernels:,} device activities" if kernels else "no device activity (CPU run)"
        return (f"Run({self.name!r}: {self.ranks.height} rank{'s' if self.ranks.height != 1 else ''}"
                f"{' on ' + ', '.join(devices) if devices else ''}, {steps} steps, {what}, "
                f"{self.collectives.height:,} collectives, {self.compiles.height:,} compiles)")

    def table(self, name: str) -> pl.DataFrame:
        """A table by name (``events``, ``kernels``, ...)."""
        if name not in schema.TABLES or name == "findings":
            raise KeyError(f"no table {name!r}; tables: {', '.join(t for t in schema.TABLES if t != 'findings')}")
        return getattr(self, name)

    def info(self) -> dict[str, Any]:
        """A JSON-ready summary: ranks, world size, devices, versions, steps, span, events, kernels, collectives."""
        return summarize(self)


def summarize(run: Run) -> dict[str, Any]:
    """The summary ``workbench info`` prints."""
    n_events, by_kind, by_class, ev_start, ev_end = _event_counts(run)
    span = 0
    if n_events and ev_start is not None and ev_end is not None:
        span = int(ev_end - ev_start)
    elif run.steps.height:
        span = int(run.steps.get_column("end").max() - run.steps.get_column("start").min())
    elif run.compiles.height and run.compiles.get_column("start").is_not_null().any():
        span = int((run.compiles.get_column("end").max() or 0) - (run.compiles.get_column("start").min() or 0))
    kernels = {k: 0 for k in schema.KERNEL_CLASSES}
    for k, n in by_class.items():
        kernels[k] = int(n)
    coll = run.collectives
    collectives_by_name = {str(k): int(n) for k, n in coll.group_by("collective").len().sort("collective").iter_rows()}
    steps = sorted(set(run.steps.get_column("step").drop_nulls().to_list()))
    r = run.ranks
    devices = sorted({d for d in r.get_column("device_name").drop_nulls().to_list()}) if r.height else []
    return {
        "path": str(run.path),
        "ranks": [int(x) for x in r.get_column("rank").to_list()],
        "world_size": run.world_size,
        "missing_ranks": run.meta.get("missing_ranks", []),
        "backend": sorted({b for b in r.get_column("backend").drop_nulls().to_list()}),
        "devices": devices,
        "torch_version": sorted({v for v in r.get_column("torch_version").drop_nulls().to_list()}),
        "nccl_version": sorted({v for v in r.get_column("nccl_version").drop_nulls().to_list()}),
        "clock": sorted({v for v in r.get_column("clock").drop_nulls().to_list()}),
        "steps": len(steps),
        "step_ids": steps,
        "span_ns": span,
        "events": n_events,
        "events_by_kind": by_kind,
        "kernels": kernels,
        "collectives": coll.height,
        "collectives_by_name": collectives_by_name,
        "compiles": run.compiles.height,
        "skipped": {str(k): int(n) for k, n in run.skipped.group_by("reason").agg(pl.col("count").sum()).sort("reason").iter_rows()},
        "problems": run.problems,
    }


def _event_counts(run: Run) -> tuple[int, dict[str, int], dict[str, int], int | None, int | None]:
    """Events, events by kind (in kind order), kernels by class, first start and last end: from the per-file
    counts taken at ingestion when the events are not loaded, else from the tables."""
    parts = run._big.parts
    if parts and not (run.loaded("events") or run.loaded("kernels")):
        by_kind: dict[str, int] = {}
        by_class: dict[str, int] = {}
        for p in parts:
            for k, n in p.stats.get("events_by_kind", {}).items():
                by_kind[k] = by_kind.get(k, 0) + int(n)
            for k, n in p.stats.get("kernels_by_class", {}).items():
                by_class[k] = by_class.get(k, 0) + int(n)
        starts = [p.stats["start"] for p in parts if p.stats.get("start") is not None]
        ends = [p.stats["end"] for p in parts if p.stats.get("end") is not None]
        order = {k: i for i, k in enumerate(schema.EVENT_KINDS)}
        by_kind = dict(sorted(by_kind.items(), key=lambda kv: order.get(kv[0], len(order))))
        return (sum(int(p.stats.get("events", 0)) for p in parts), by_kind, by_class,
                min(starts) if starts else None, max(ends) if ends else None)
    ev = run.events
    by_kind = {str(k): int(n) for k, n in ev.group_by("kind").len().sort("kind").iter_rows()}
    by_class = {str(k): int(n) for k, n in run.kernels.group_by("kernel_class").len().iter_rows() if k is not None}
    if not ev.height:
        return 0, by_kind, by_class, None, None
    return ev.height, by_kind, by_class, int(ev.get_column("start").min()), int(ev.get_column("end").max())


# --- opening -------------------------------------------------------------------------------------


def open(  # noqa: A001 - the notebook entry point is deliberately ``workbench.open``
    path: str | os.PathLike[str],
    *,
    rank: int | None = None,
    on_error: OnError = "raise",
    cache: bool = True,
    progress: ProgressCallback | None = None,
    workers: int | None = None,
    cluster: str | None = None,
    run_type: type[Run] | None = None,
    job: str | None = None,
) -> Run:
    """Open a run directory, a folder of Kineto traces, one trace file, or TORCH_TRACE logs.

    ``rank`` names the rank of a lone trace that carries none. ``on_error="skip"`` loads the good
    ranks and lists the bad files in ``Run.problems``; ``"raise"`` raises the first
    :class:`~workbench.errors.TraceError`. ``progress(stage, done, total)`` is called as files finish.
    ``cluster`` (or ``$WORKBENCH_DASK_SCHEDULER``) is the address of a Dask scheduler that parses the files
    on its workers (:mod:`workbench.parallel`); else they are parsed here on ``workers`` threads (all cores).
    Events and kernels stay in the per-rank cache until used (see :class:`Run`). ``run_type``: the :class:`Run`
    subclass to return (``workbench.open`` returns the notebook's, which adds ``findings()``). A folder holding the
    files of several jobs is refused in one line, never merged; ``job`` (``j1``, ``j2``, … as that line lists them)
    opens one of them (:mod:`workbench.jobs`).
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    root = Path(path)
    if rank is not None and not (isinstance(rank, int) and 0 <= rank < rundir.RANK_LIMIT):
        raise InputError(f"{root}: --rank {rank} is not a rank (an integer from 0 to 2**31 - 1)")
    from workbench.flight_recorder import discover_with_dumps  # a folder of Flight Recorder dumps is a run too
    sources = discover_with_dumps(root)
    from workbench import jobs
    sources = jobs.select(sources, job)   # one job per run: several are refused (or ``job`` picks one)
    if rank is not None and len(sources.traces) != 1:
        raise OptionError(f"{root}: --rank applies to a single trace file, but {len(sources.traces)} were found")
    problems: list[str] = list(sources.notes)  # what the folder walk skipped, one line each
    cache_dir = None
    if cache and sources.traces:
        cache_dir, why = table_cache.find_cache_root(root)
        if why:
            problems.append(why)
    cluster = cluster or os.environ.get("WORKBENCH_DASK_SCHEDULER") or None
    if cluster:
        from workbench.parallel import read_on_cluster

        parts = read_on_cluster(cluster, sources.traces, rank, on_error, problems, cache_dir, progress)
    else:
        parts = _read_traces(sources.traces, rank, on_error, problems, cache_dir, progress, workers)
    parts, notes = same_rank_windows(parts, problems if on_error == "skip" else None) if not sources.is_run_dir \
        else (parts, [])
    meta = rundir.read_json(sources.run_json) if sources.run_json else {}
    run_skipped: list[dict[str, Any]] = []
    _check_run_json(meta, sources.run_json, run_skipped)
    compiles, compile_skipped = _read_compiles(sources, on_error, problems)
    steps_collector, steps_skipped = _read_steps_files(sources.steps_files, on_error, problems)
    fingerprints = _read_fingerprints(sources.fingerprint_files, on_error, problems, run_skipped)
    ranks = _ranks_table(parts, sources, meta, fingerprints, compiles)
    ranks = _check_world_size(ranks, meta, root, run_skipped)
    run = (run_type or Run)(
        path=root,
        ranks=ranks,
        collectives=_concat([p.collectives for p in parts], schema.COLLECTIVES),
        steps=_merge_steps(_concat([p.steps for p in parts], schema.STEPS), steps_collector),
        compiles=compiles,
        fingerprints=fingerprints,
        skipped=_concat([p.skipped for p in parts] + [compile_skipped, steps_skipped,
                                                      pl.DataFrame(run_skipped, schema=schema.SKIPPED)],
                        schema.SKIPPED),
        problems=problems,
        meta=dict(meta),
        big=BigTables(parts),
    )
    for p in parts:  # the run holds them stacked now; each part keeps only its files and counts
        p.drop_small_tables()
    notes += [f"{p.path}: no rank recorded and one process: read as rank 0" for p in parts
              if p.rank_source == ASSUMED_RANK]
    if notes:
        run.meta["notes"] = notes
    ws = run._stated_world_size()
    if ws and ranks.height:
        present = set(ranks.get_column("rank").to_list())
        missing = list(islice((r for r in range(ws) if r not in present), 64))  # never one object per rank
        n_missing = ws - len({r for r in present if 0 <= r < ws})
        if missing and sources.is_run_dir:
            listed = _short_list(missing[:16]) + (f", … ({n_missing} in all)" if n_missing > 16 else "")
            run.problems.append(f"{root}: ranks missing from the run: {listed} (world size {ws})")
        run.meta["missing_ranks"] = missing if len(missing) < 64 else []
    return run


def _world_size_value(value: Any) -> int | None:
    """``value`` as a world size (an integer from 1 to :data:`MAX_WORLD_SIZE`), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 1 <= value <= MAX_WORLD_SIZE else None


def _check_run_json(meta: dict[str, Any], path: Path | None, skipped: list[dict[str, Any]]) -> None:
    """``run.json``'s ``world_size`` checked in place: a value that is not a world size is dropped, with a note."""
    ws = meta.get("world_size")
    if ws is None:
        return
    good = _world_size_value(ws)
    if good is None:
        shown = one_line(orjson.dumps(ws, default=str).decode(), 60)
        skipped.append({"rank": None, "file": str(path), "count": 1,
                        "reason": f"run.json world_size = {shown} is not a world size "
                                  f"(an integer from 1 to {MAX_WORLD_SIZE}): ignored"})
        del meta["world_size"]
    else:
        meta["world_size"] = good


def _check_world_size(ranks: pl.DataFrame, meta: dict[str, Any], root: Path,
                      skipped: list[dict[str, Any]]) -> pl.DataFrame:
    """The world size the traces or ``run.json`` state, checked against the ranks present: one that does not hold
    them all (a rank at or past it) is dropped everywhere, with one note; the run then knows only the ranks seen."""
    if not ranks.height:
        return ranks
    stated = ranks.get_column("world_size").drop_nulls()
    candidates = sorted({int(w) for w in stated.to_list()} | ({meta["world_size"]} if meta.get("world_size") else set()))
    if not candidates:
        return ranks
    top = int(ranks.get_column("rank").max())  # type: ignore[arg-type]
    n = ranks.height
    small = [w for w in candidates if w <= top or w < n]
    if not small:
        return ranks
    skipped.append({"rank": None, "file": str(root), "count": 1,
                    "reason": f"world size {', '.join(map(str, small))} stated, but {n} rank(s) up to rank {top} are "
                              "present: not a world size of this run, ignored"})
    if meta.get("world_size") in small:
        del meta["world_size"]
    return ranks.with_columns(pl.when(~pl.col("world_size").is_in(small)).then(pl.col("world_size"))
                              .alias("world_size"))


def _short_list(xs: list[int]) -> str:
    return ", ".join(map(str, xs[:16])) + (f", … ({len(xs)} in all)" if len(xs) > 16 else "")


def read_part(src: TraceSource, rank: int | None, cache_dir: Path | None, threads: int = 1) -> tuple[RankPart, str]:
    """One trace file as a :class:`RankPart` (from its cache entry, else parsed and cached), and a line
    saying why it could not be cached (``""`` when it was)."""
    override = src.rank if src.rank is not None else rank
    key = table_cache.entry_key(src.path, override) if cache_dir else ""
    if cache_dir:
        hit = table_cache.load_meta(cache_dir, key)
        if hit is not None:
            return RankPart(path=hit["path"], rank=hit["rank"], rank_source=hit["rank_source"],
                            meta=compact_meta(hit["meta"]),
                            big=hit["files"], stats=hit.get("stats") or {}, **hit["frames"]), ""
    tables = read_trace(src.path, rank=override, threads=threads)
    if src.rank is not None:
        tables.meta["rank_source"] = "run directory"
        tables.rank_source = "run directory"
    part = RankPart.from_tables(tables)
    if not cache_dir:
        return part, ""
    tables.kernels = part.big["kernels"]  # type: ignore[assignment]  # conformed, as every entry holds it
    why = table_cache.store(cache_dir, key, tables, part.stats)
    if why:
        return part, why
    part.big = {t: table_cache.entry_dir(cache_dir, key) / f"{t}.parquet" for t in BIG}
    return part, ""


def _read_traces(
    traces: list[TraceSource], rank: int | None, on_error: OnError, problems: list[str],
    cache_dir: Path | None, progress: ProgressCallback | None, workers: int | None,
) -> list[RankPart]:
    """Read every trace, several at once on threads (polars and zlib release the GIL); each one's events
    go to its cache entry as soon as it is parsed, so only a few ranks' events are in memory at once."""
    if not traces:
        return []
    threads = max(1, workers or os.cpu_count() or 1)
    n_workers = min(threads, len(traces))
    per_file = max(1, threads // n_workers)  # spare threads parse pieces of one large file at once
    results: list[RankPart | None] = [None] * len(traces)
    errors: list[TraceError | None] = [None] * len(traces)
    uncached: list[str] = [""] * len(traces)

    def work(i: int) -> None:
        try:
            results[i], uncached[i] = read_part(traces[i], rank, cache_dir, per_file)
        except TraceError as exc:
            errors[i] = exc
        except Exception as exc:  # an unforeseen problem in one file must not take the other ranks down
            errors[i] = TraceError(traces[i].path, rundir.unforeseen(exc))

    done = 0
    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        for _ in pool.map(work, range(len(traces))):
            done += 1
            if progress:
                progress("traces", done, len(traces))
    return collect_parts(results, errors, uncached, on_error, problems)


def collect_parts(results: list[RankPart | None], errors: list[TraceError | None], uncached: list[str],
                  on_error: OnError, problems: list[str]) -> list[RankPart]:
    """The parts read, in trace order; bad files raised or listed, cache write failures in one line."""
    for exc in errors:
        if exc is None:
            continue
        if on_error == "raise":
            raise exc
        problems.append(str(exc))
    failed = [u for u in uncached if u]
    if failed:
        more = f" (and {len(failed) - 1} more file(s) read uncached)" if len(failed) > 1 else ""
        problems.append(failed[0] + more)
    return [r for r in results if r is not None]


def _concat(frames: list[pl.DataFrame], sch: dict[str, pl.DataType]) -> pl.DataFrame:
    frames = [f for f in frames if f.height]
    if not frames:
        return schema.empty(sch)
    return pl.concat([schema.conform(f, sch) for f in frames], how="vertical")


def _read_compiles(sources: Sources, on_error: OnError, problems: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    if not sources.compile_logs:
        return schema.empty(schema.COMPILES), schema.empty(schema.SKIPPED)
    from workbench.compile_log import read_compile_logs

    frames, skipped = [], []
    by_rank: dict[int | None, list[Path]] = {}
    for p, r in sources.compile_logs:
        by_rank.setdefault(r, []).append(p)
    for r, paths in by_rank.items():
        try:
            c, s = read_compile_logs(paths, rank=r, problems=problems if on_error == "skip" else None)
        except TraceError as exc:
            if on_error == "raise":
                raise
            problems.append(str(exc))
            continue
        frames.append(c)
        skipped.append(s)
    return _concat(frames, schema.COMPILES), _concat(skipped, schema.SKIPPED)


#: The ``skipped`` reason for the records a rank's step writer lost (its ``lost_records`` lines, summed per file).
STEP_RECORDS_LOST = ("records of steps (and CUDA step times) lost: the step writer process fell behind the training "
                     "loop (steps.jsonl)")
_INT64 = 1 << 63


def _nonneg_int(value: Any, limit: int = _INT64) -> int | None:
    """``value`` when it is an integer from 0 to ``limit`` - 1 (never a boolean), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit else None


def _read_steps_files(files: dict[int, Path], on_error: OnError = "raise",
                      problems: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``steps.jsonl`` of every rank; lines of one step are merged, later keys winning; ``lost_records`` lines (the
    step writer fell behind) become one ``skipped`` row per file with their sum.

    A line whose ``step`` is not an integer from 0 to 2**31 - 1, or whose ``start_ns``/``end_ns`` are not integer
    nanoseconds (end not before start), is dropped and counted with the field's name; a ``device_ns`` or
    ``data_wait_ns`` that is not a non-negative integer is read as null and counted.
    """
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for rank, path in files.items():
        try:
            got = read_regular(path, rundir.MAX_JSON_BYTES, what="JSON-lines file", keep="head")
            data, cut = got.data, got.truncated
        except TraceError as exc:
            if on_error == "raise" or problems is None:
                raise
            problems.append(str(exc))
            continue
        lines, bad = rundir.parse_jsonl(data[: data.rfind(b"\n") + 1] if cut else data)
        del data
        merged: dict[int, dict[str, Any]] = {}
        lost = 0
        odd: dict[str, int] = {}

        def note(reason: str) -> None:
            odd[reason] = odd.get(reason, 0) + 1

        if cut:
            note(f"steps.jsonl over {rundir.MAX_JSON_BYTES:,} bytes (the size limit): the lines past it not read")

        for line in lines:
            step = line.get("step")
            if "lost_records" in line and step is None:
                n = _nonneg_int(line["lost_records"])
                if n:
                    lost += n
                else:
                    bad += 1
            elif _nonneg_int(step, rundir.RANK_LIMIT) is not None:
                merged.setdefault(step, {}).update(line)
            else:
                note("steps.jsonl 'step' missing, of the wrong type or out of range (an integer from 0 to "
                     "2**31 - 1 expected): line dropped")
        if lost:
            skipped.append({"rank": rank, "file": str(path), "reason": STEP_RECORDS_LOST, "count": lost})
        for step, d in sorted(merged.items()):
            start, end = d.get("start_ns"), d.get("end_ns")
            if start is None or end is None:
                bad += 1
                continue
            if _nonneg_int(start) is None or _nonneg_int(end) is None or end < start:
                note("steps.jsonl 'start_ns'/'end_ns' of the wrong type or out of order (integer nanoseconds, end "
                     "not before start, expected): step dropped")
                continue
            extra = {}
            for k in ("device_ns", "data_wait_ns"):
                v = d.get(k)
                extra[k] = _nonneg_int(v)
                if v is not None and extra[k] is None:
                    note(f"steps.jsonl '{k}' of the wrong type (a non-negative integer expected): read as null")
            rows.append({"rank": rank, "step": step, "source": "collector", "start": start, "end": end,
                         "dur": end - start, **extra, "profiled": d.get("profiled") is True})
        if bad:
            skipped.append({"rank": rank, "file": str(path), "reason": "steps.jsonl line incomplete or unreadable",
                            "count": bad})
        skipped.extend({"rank": rank, "file": str(path), "reason": r, "count": n} for r, n in odd.items())
    steps = pl.DataFrame(rows, schema=schema.STEPS) if rows else schema.empty(schema.STEPS)
    return steps, (pl.DataFrame(skipped, schema=schema.SKIPPED) if skipped else schema.empty(schema.SKIPPED))


def _merge_steps(profiler: pl.DataFrame, collector: pl.DataFrame) -> pl.DataFrame:
    return _concat([collector, profiler], schema.STEPS).sort("rank", "source", "step")


def _read_fingerprints(files: dict[int, Path], on_error: OnError, problems: list[str],
                       skipped: list[dict[str, Any]] | None = None) -> pl.DataFrame:
    """``fingerprint.json`` of every rank; a field of the wrong type is read as null (counted in ``skipped``)."""
    rows = []
    for rank, path in files.items():
        try:
            fp = rundir.read_json(path)
        except TraceError as exc:
            if on_error == "raise":
                raise
            problems.append(str(exc))
            continue
        odd: list[str] = []

        def text(d: dict[str, Any], k: str, where: str = "") -> str | None:
            v = d.get(k)
            if v is None or isinstance(v, str):
                return v
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return str(v)
            odd.append(f"fingerprint.json '{where}{k}' of the wrong type ({type(v).__name__}, not text): ignored")
            return None

        versions = fp.get("versions") if isinstance(fp.get("versions"), dict) else fp
        device = fp.get("device") if isinstance(fp.get("device"), dict) else {}
        local_rank = fp.get("local_rank")
        if local_rank is not None and _nonneg_int(local_rank, rundir.RANK_LIMIT) is None:
            odd.append("fingerprint.json 'local_rank' of the wrong type or out of range: ignored")
            local_rank = None
        try:
            raw = orjson.dumps(fp, default=str).decode()
            env = orjson.dumps(fp.get("env") or {}, default=str).decode()
        except orjson.JSONEncodeError:  # nested deeper than orjson writes
            odd.append("fingerprint.json nested too deeply to keep whole: its raw copy and env left out")
            raw, env = None, "{}"
        rows.append({
            "rank": rank,
            "host": text(fp, "host"),
            "local_rank": local_rank,
            **{k: text(versions, k, "versions." if versions is not fp else "") for k in
               ("python", "torch", "triton", "cuda", "cudnn", "nccl")},
            "device_name": text(device, "name", "device.") if device else text(fp, "device_name"),
            "config_hash": text(fp, "config_hash"),
            "env": env,
            "raw": raw,
        })
        if skipped is not None:
            skipped.extend({"rank": rank, "file": str(path), "reason": r, "count": 1} for r in dict.fromkeys(odd))
    return pl.DataFrame(rows, schema=schema.FINGERPRINTS) if rows else schema.empty(schema.FINGERPRINTS)


def _ranks_table(parts: list[RankPart], sources: Sources, meta: dict[str, Any],
                 fingerprints: pl.DataFrame, compiles: pl.DataFrame) -> pl.DataFrame:
    rows: dict[int, dict[str, Any]] = {}
    for p in parts:
        m = p.meta
        info = m.get("distributedInfo") or {}
        devs = m.get("deviceProperties") or []
        row = rows.setdefault(p.rank, {
            "rank": p.rank, "world_size": info.get("world_size") or meta.get("world_size"),
            "rank_source": p.rank_source, "backend": info.get("backend"), "host": None,
            "device_name": devs[0].get("name") if devs else None,
            "device_count": len(devs) or None, "torch_version": None,
            "nccl_version": info.get("nccl_version"), "base_time_ns": m.get("baseTimeNanoseconds"),
            "clock": m.get("clock"), "trace_files": [], "events": 0, "skipped": 0,
        })
        row["trace_files"].append(p.path)
        row["events"] += int(p.stats.get("events", 0))
        row["skipped"] += int(p.skipped.get_column("count").sum() or 0)
    fp_by_rank = {r["rank"]: r for r in fingerprints.iter_rows(named=True)}
    in_run_dir = set(sources.steps_files) | set(fp_by_rank) | {r for _, r in sources.compile_logs if r is not None}
    for r in in_run_dir - set(rows):
        rows[r] = {"rank": r, "world_size": meta.get("world_size"), "rank_source": "run directory",
                   "trace_files": [], "events": 0, "skipped": 0}
    for r in set(compiles.get_column("rank").drop_nulls().to_list()) - set(rows):
        rows[r] = {"rank": r, "world_size": meta.get("world_size"), "rank_source": "compile log",
                   "trace_files": [], "events": 0, "skipped": 0}
    for r, row in rows.items():
        fp = fp_by_rank.get(r)
        if fp:
            row["host"] = fp["host"]
            row["torch_version"] = fp["torch"]
            row["nccl_version"] = row.get("nccl_version") or fp["nccl"]
            row["device_name"] = row.get("device_name") or fp["device_name"]
    if not rows:
        return schema.empty(schema.RANKS)
    return pl.DataFrame([rows[r] for r in sorted(rows)], schema=schema.RANKS, strict=False)


__all__ = ["Run", "open", "summarize"]
