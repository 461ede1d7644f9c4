"""What an export draws, whatever the file format: the tracks and slices of one rank, and the findings.

One process per rank (``pid`` = rank + 1: Perfetto reserves pid 0 for the idle process), named
``"rank R · host · device"``; under it, in this order, the tracks the workbench derives from its tables (steps of the
collector, profiler steps, compiles, collectives, Flight Recorder collectives, collective waits, activity other ranks
waited for), then one track per host thread and one per GPU stream holding the Kineto events as recorded. Slices
that overlap without nesting (Kineto rounds, async collectives overlap) go to extra lanes of their track
(``"… · lane 2"``), so every track nests properly, as Perfetto requires.

Times are the run's int64 ns (``workbench.schema``) minus the rank's clock offset (:class:`Clock`): raw time =
exported time + offset, exactly.

Example:
    >>> sel = Selection.parse("0-3", "5-9")          # ranks 0..3, steps 5..9
    >>> sel.ranks, sel.steps
    ((0, 1, 2, 3), (5, 6, 7, 8, 9))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from workbench import schema
from workbench.errors import InputError

#: pid of rank R is R + PID_BASE (Perfetto takes pid 0 for the idle process).
PID_BASE = 1
#: pid of the process that holds the findings in the Chrome JSON format (the protobuf uses global tracks).
FINDINGS_PID = 1_000_000_000

#: The derived tracks of a rank, in display order: key → track name.
DERIVED = {
    "steps": "steps (collector)",
    "profiler_steps": "steps (profiler)",
    "compiles": "compiles (torch.compile log)",
    "collectives": "collectives",
    "flight_recorder": "collectives (Flight Recorder)",
    "waiting": "waiting for another rank",
    "awaited": "other ranks waited for this",
}
_ORDER = {k: i for i, k in enumerate(DERIVED)}
_HOST, _DEVICE = 100, 200
_DEVICE_KINDS = schema.DEVICE_TIMELINE_KINDS

#: Slice kinds: a range with begin and end, a range of zero length, and a Kineto instant event.
SLICE, ZERO, INSTANT = 0, 1, 2


# ---------------------------------------------------------------------------------------------- selection
def parse_ids(text: str | None, what: str) -> tuple[int, ...] | None:
    """``"0-7"``, ``"0,2,5-9"`` → sorted ids; None for no selection. A bad part is one :class:`InputError` line."""
    if text is None or not str(text).strip():
        return None
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise InputError(f"--{what}: {part!r} is not a number or a range like 0-7") from None
        if a < 0 or b < a or b - a > 10_000_000:
            raise InputError(f"--{what}: {part!r} is not a range of non-negative ids, low to high")
        out.update(range(a, b + 1))
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class Selection:
    """The ranks and steps to export (None: all). An item with a step is kept when its step is selected; one
    without a step when it overlaps its rank's selected steps (first start to last end, any step source)."""

    ranks: tuple[int, ...] | None = None
    steps: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, ranks: str | None = None, steps: str | None = None) -> Selection:
        return cls(parse_ids(ranks, "ranks"), parse_ids(steps, "steps"))

    def rank_ok(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def filter(self, frame: pl.DataFrame, windows: dict[int, tuple[int, int]], start: str = "start",
               end: str = "end", step: str | None = "step") -> pl.DataFrame:
        """``frame``'s rows (any ranks, a ``rank`` column) that this selection keeps."""
        if self.ranks is not None:
            frame = frame.filter(pl.col("rank").is_in(list(self.ranks)))
        if self.steps is None or frame.is_empty():
            return frame
        win = pl.DataFrame([(r, a, b) for r, (a, b) in windows.items()],
                           schema={"rank": pl.Int32, "_lo": pl.Int64, "_hi": pl.Int64}, orient="row")
        f = frame.with_columns(pl.col("rank").cast(pl.Int32)).join(win, on="rank", how="left")
        stepped = pl.col(step).is_in(list(self.steps)) if step and step in frame.columns else pl.lit(False)
        no_step = pl.col(step).is_null() if step and step in frame.columns else pl.lit(True)
        overlaps = (pl.col(start) < pl.col("_hi")) & (pl.coalesce(end, start) >= pl.col("_lo"))
        return f.filter(stepped | (no_step & overlaps.fill_null(False))).drop("_lo", "_hi")

    def describe(self) -> dict[str, Any]:
        return {"ranks": "all" if self.ranks is None else list(self.ranks),
                "steps": "all" if self.steps is None else list(self.steps)}


def step_windows(steps: pl.DataFrame, selection: Selection) -> dict[int, tuple[int, int]]:
    """Per rank, the raw span (first start, last end) of its selected steps, over both step sources."""
    if selection.steps is None or steps.is_empty():
        return {}
    w = steps.filter(pl.col("step").is_in(list(selection.steps))).group_by("rank").agg(
        lo=pl.col("start").min(), hi=pl.col("end").max())
    return {int(r): (int(a), int(b)) for r, a, b in w.iter_rows()}


# ---------------------------------------------------------------------------------------------- clock
@dataclass(frozen=True)
class Clock:
    """Per-rank clock offsets: exported time = raw time - ``offset(rank)``.

    ``estimated`` is ``analyses.collectives.clock_offsets`` (median of collective-end differences to the lowest rank);
    they are applied (``aligned``) when the ranks span hosts, as ``match_collectives`` does; on one host the ranks
    share a clock and nothing is moved."""

    aligned: bool
    offsets: dict[int, int]
    estimated: pl.DataFrame
    reason: str

    def offset(self, rank: int) -> int:
        return self.offsets.get(rank, 0) if self.aligned else 0

    def describe(self) -> dict[str, Any]:
        return {
            "aligned": self.aligned, "reason": self.reason,
            "rule": "exported time = raw time - offset_ns of the rank (raw = exported + offset_ns)",
            "method": "analyses.collectives.clock_offsets: per rank, the median over matched collectives of its "
                      "end minus the lowest rank's end",
            "offsets": {str(r["rank"]): {"offset_ns": r["offset_ns"], "applied_ns": self.offset(int(r["rank"])),
                                         "spread_ns": r["spread_ns"], "samples": r["samples"], "host": r["host"]}
                        for r in self.estimated.iter_rows(named=True)},
        }


def estimate_clock(collectives: pl.DataFrame, ranks: pl.DataFrame) -> Clock:
    """The offsets the analyses estimate, applied when the ranks span hosts."""
    from workbench.analyses.collectives import clock_offsets, spans_hosts

    est = clock_offsets(collectives, ranks)
    offsets = {int(r): int(o) for r, o in est.select("rank", "offset_ns").iter_rows() if o is not None}
    if not spans_hosts(ranks):
        return Clock(False, offsets, est, "all ranks on one host share its clock: times are as recorded")
    if not offsets:
        return Clock(False, offsets, est, "ranks span hosts but no matched collective estimates their offsets: "
                                          "times are as recorded")
    return Clock(True, offsets, est, "ranks span hosts: each rank's offset to the lowest rank, estimated from "
                                     "collective ends, is subtracted")


# ---------------------------------------------------------------------------------------------- waits (flows)
#: Who waited for whom: one row per wait. Times are raw, each on its own rank's clock. The exporter draws the wait on
#: ``rank`` and links it by a flow to the activity ``[on_start, on_end]`` of ``on_rank`` (the collective slice with
#: exactly those times when there is one, else a slice on that rank's "other ranks waited for this" track).
WAITS: dict[str, pl.DataType] = {
    "rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "step": pl.Int32,
    "on_rank": pl.Int32, "on_start": pl.Int64, "on_end": pl.Int64, "what": pl.String,
}


def collective_waits(collectives: pl.DataFrame, ranks: pl.DataFrame | None = None) -> pl.DataFrame:
    """WAITS from collective matching (``analyses.collectives.match_collectives``): on every rank that reached a
    collective before the last one, its wait (own arrival → last arrival), linked to the last rank's collective
    (arrival → finish). Point-to-point calls are left out (their order does not pair them)."""
    from workbench.analyses.collectives import clock_offsets, match_collectives

    if collectives.is_empty():
        return pl.DataFrame(schema=WAITS)
    m = match_collectives(collectives, ranks)
    if m.is_empty():
        return pl.DataFrame(schema=WAITS)
    if bool(m["aligned"].any()):  # back to each rank's own clock
        off = clock_offsets(collectives).select("rank", "offset_ns")
        m = m.join(off, on="rank", how="left").with_columns(
            arrival=pl.col("arrival") + pl.col("offset_ns").fill_null(0),
            finish=pl.col("finish") + pl.col("offset_ns").fill_null(0)).drop("offset_ns")
    key = ["pg_name", "pg_ranks", "step", "order"]
    last = m.filter(pl.col("is_last")).select(*key, on_rank=pl.col("rank"), on_start=pl.col("arrival"),
                                              on_end=pl.col("finish"), _coll=pl.col("collective").cast(pl.String))
    w = m.filter(~pl.col("p2p") & ~pl.col("is_last") & (pl.col("wait_ns") > 0)).join(
        last, on=key, how="inner", nulls_equal=True)
    out = w.select(
        "rank", start=pl.col("arrival"), end=pl.col("arrival") + pl.col("wait_ns"), step=pl.col("step"),
        on_rank="on_rank", on_start="on_start", on_end="on_end",
        what=pl.concat_str([pl.col("_coll"), pl.lit(" · pg "), pl.col("pg_name"), pl.lit(" · call "),
                            pl.col("order").cast(pl.String), pl.lit(" of step "),
                            pl.col("step").cast(pl.String).fill_null("-")]),
    )
    return out.cast(WAITS).sort("rank", "start", "on_rank")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- one rank
@dataclass(slots=True)
class RankTrace:
    """One rank's process, tracks and slices (parallel lists), ready for a writer."""

    rank: int
    pid: int
    name: str
    labels: list[str]
    offset: int
    tracks: list[str] = field(default_factory=list)
    track: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)     # SLICE, ZERO or INSTANT
    depths: list[int] = field(default_factory=list)
    args: list[dict[str, Any] | None] = field(default_factory=list)
    flows: list[tuple[int, ...] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.starts)


class _Items:
    """Slices gathered before lanes are assigned: keyed by their logical track."""

    def __init__(self) -> None:
        self.key: list[tuple] = []
        self.name: list[str] = []
        self.cat: list[str] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.kind: list[int] = []
        self.args: list[dict[str, Any] | None] = []
        self.flows: list[tuple[int, ...] | None] = []

    def add(self, key: tuple, name: str, cat: str, start: int, end: int | None, kind: int = SLICE,
            args: dict[str, Any] | None = None, flows: tuple[int, ...] | None = None) -> None:
        end = start if end is None or end < start else end
        if kind == SLICE and end == start:
            kind = ZERO
        self.key.append(key)
        self.name.append(name)
        self.cat.append(cat)
        self.start.append(start)
        self.end.append(end)
        self.kind.append(kind)
        self.args.append(args)
        self.flows.append(flows)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def process_name(row: dict[str, Any]) -> str:
    """``"rank 1 · host · NVIDIA H200"`` (CPU when no device is recorded, ``?`` for an unknown host)."""
    return f"rank {row['rank']} · {row.get('host') or '?'} · {row.get('device_name') or 'CPU'}"


def rank_trace(rank: int, info: dict[str, Any], clock: Clock, events: pl.DataFrame, small: dict[str, pl.DataFrame],
               waits: pl.DataFrame, targets: pl.DataFrame, thread_names: dict[str, str]) -> RankTrace:
    """Everything one rank shows. ``events``: its EVENTS rows (already selected); ``small``: its rows of
    ``steps``, ``compiles``, ``collectives``, ``fr`` (Flight Recorder entries), selected; ``waits``: WAITS rows
    where it waited, with a ``flow`` id column; ``targets``: (``on_start``, ``on_end``, ``what``, ``flows``) it
    was waited for; ``thread_names``: Kineto's names of its threads."""
    off = clock.offset(rank)
    out = RankTrace(rank, rank + PID_BASE, process_name(info), [f"rank {rank}", f"clock offset {off} ns "
                    f"(raw time = shown time + {off} ns)"], off)
    it = _Items()
    empty = pl.DataFrame()
    _add_steps(it, small.get("steps", empty), off)
    _add_compiles(it, small.get("compiles", empty), off)
    target_at = {(int(s), int(e)): (w, tuple(f)) for s, e, w, f in targets.iter_rows()}
    _add_collectives(it, small.get("collectives", empty), off, target_at)  # takes the targets it holds
    for (s, e), (what, flows) in sorted(target_at.items()):
        it.add(("awaited",), what, "workbench.awaited", s - off, e - off, flows=flows)
    _add_flight_recorder(it, small.get("fr", empty), off)
    for r in waits.iter_rows(named=True):
        it.add(("waiting",), f"wait for rank {r['on_rank']}", "workbench.wait", r["start"] - off, r["end"] - off,
               flows=(r["flow"],), args={"on_rank": r["on_rank"], "what": r["what"], "wait_ns": r["end"] - r["start"]})
    _add_events(it, events, off, rank)
    _finish(out, it, thread_names)
    return out


def _add_steps(it: _Items, steps: pl.DataFrame, off: int) -> None:
    for r in steps.sort("start").iter_rows(named=True) if steps.height else ():
        prof = str(r["source"]) == "profiler"
        it.add(("profiler_steps" if prof else "steps",), f"step {r['step']}", "workbench.step",
               r["start"] - off, r["end"] - off,
               args=_clean({"step": r["step"], "source": str(r["source"]), "data_wait_ns": r["data_wait_ns"],
                            "device_ns": r["device_ns"], "profiled": r["profiled"]}))


def _add_compiles(it: _Items, comp: pl.DataFrame, off: int) -> None:
    """Compiles with a start; the end is the log's, else start + duration, else the start."""
    rows = comp.filter(pl.col("start").is_not_null()).sort("start").iter_rows(named=True) if comp.height else ()
    for r in rows:
        end = r["end"] if r["end"] is not None else (r["start"] + r["duration_ns"]
                                                     if r["duration_ns"] is not None else r["start"])
        cause = f" ({r['cause']})" if r["cause"] else ""
        it.add(("compiles",), f"compile {r['compile_id']} {r['co_name'] or '?'}{cause}", "workbench.compile",
               r["start"] - off, end - off,
               args=_clean({k: r[k] for k in ("compile_id", "status", "cause", "cause_detail", "cause_source",
                                              "step", "duration_ns", "fail_reason", "break_reason",
                                              "co_filename", "co_firstlineno")}))


def _add_collectives(it: _Items, coll: pl.DataFrame, off: int,
                     target_at: dict[tuple[int, int], tuple[str, tuple[int, ...]]]) -> None:
    """Collectives from arrival to finish; one whose times are a wait's target carries its flows (and is taken
    out of ``target_at``)."""
    if not coll.height:
        return
    for r in coll.with_columns(_a=pl.coalesce("kernel_start", "start"), _f=pl.coalesce("kernel_end", "end")) \
            .sort("_a").iter_rows(named=True):
        hit = target_at.pop((r["_a"], r["_f"]), None)
        it.add(("collectives",), f"{r['collective']} #{r['seq']} · pg {r['pg_name']}", "workbench.collective",
               r["_a"] - off, r["_f"] - off, flows=hit[1] if hit else None,
               args=_clean({"backend": str(r["backend"]), **{k: r[k] for k in (
                   "pg_name", "pg_desc", "pg_ranks", "group_size", "seq", "dtype", "bytes", "step",
                   "kernel_name")}, "host_call_start_ns": r["start"], "host_call_end_ns": r["end"]}))


def _add_flight_recorder(it: _Items, fr: pl.DataFrame, off: int) -> None:
    """Flight Recorder entries from start (or creation) to completion; one never completed is an instant."""
    rows = fr.sort("created_ns", "record_id", nulls_last=True).iter_rows(named=True) if fr.height else ()
    for r in rows:
        begin = r["started_ns"] or r["created_ns"]
        if begin is None:
            continue
        done = r["completed_ns"]
        it.add(("flight_recorder",), f"{r['op']} · pg {r['pg_name']} seq {r['seq']} · {r['state']}",
               "workbench.flight_recorder", begin - off, (done - off) if done else None,
               kind=SLICE if done else INSTANT,
               args=_clean({k: r[k] for k in ("state", "seq", "p2p_seq", "op", "in_sizes", "in_dtypes",
                                              "timeout_ms", "call_site", "created_ns", "started_ns",
                                              "completed_ns")}))


#: Correlation and External ids are per process: written as ``rank << ID_RANK_SHIFT | id`` so the ranks' ids never
#: meet in one file (a tool linking a kernel to its launch by id stays within the rank); raw id = low 32 bits.
ID_RANK_SHIFT = 32


def _add_events(it: _Items, events: pl.DataFrame, off: int, rank: int) -> None:
    """Kineto events on their thread (host) or stream (device) track, category as recorded; ids made unique per
    rank (:data:`ID_RANK_SHIFT`)."""
    if events.is_empty():
        return
    ev = events.select(
        kind=pl.col("kind").cast(pl.String), cat=pl.col("cat").cast(pl.String), name=pl.col("name").cast(pl.String),
        start=pl.col("start") - off, end=pl.col("end") - off, pid=pl.col("pid"), tid=pl.col("tid"),
        device=pl.col("device"), stream=pl.col("stream"),
        correlation=pl.col("correlation") + (rank << ID_RANK_SHIFT),
        external_id=pl.col("external_id") + (rank << ID_RANK_SHIFT),
    )
    pids = ev.filter(~pl.col("kind").is_in(_DEVICE_KINDS))["pid"].drop_nulls()
    main_pid = int(pids.mode().sort()[0]) if pids.len() else None
    for kind, cat, name, s, e, pid, tid, dev, stream, corr, ext in ev.iter_rows():
        if kind in _DEVICE_KINDS:
            key = (_DEVICE, -1 if dev is None else dev, -1 if stream is None else stream)
        else:
            key = (_HOST, -1 if pid is None else pid, -1 if tid is None else tid, main_pid)
        args = None
        if corr is not None or ext is not None:
            args = {"External id": ext} if corr is None else ({"correlation": corr} if ext is None else
                                                               {"correlation": corr, "External id": ext})
        it.add(key, name, cat, s, e, INSTANT if kind == "instant" else SLICE, args)


def _track_name(key: tuple, thread_names: dict[str, str]) -> str:
    if isinstance(key[0], str):
        return DERIVED[key[0]]
    if key[0] == _DEVICE:
        return f"GPU {'?' if key[1] < 0 else key[1]} · stream {'?' if key[2] < 0 else key[2]}"
    _, pid, tid, main = key
    if tid < 0:
        return "no thread"
    label = thread_names.get(str(tid)) or f"thread {tid}"
    return label.strip() if pid in (main, -1) else f"pid {pid} · {label.strip()}"


def _sort_key(key: tuple) -> tuple:
    return (_ORDER[key[0]], 0, 0) if isinstance(key[0], str) else key[:3]


def pack(starts: Sequence[int], ends: Sequence[int], kinds: Sequence[int]) -> tuple[list[int], list[int]]:
    """Lane and depth of each slice of one track (given sorted by start, then longest first): a slice goes to the
    first lane where it nests inside the open slice or follows it; instants and zero-length slices stay in lane 0."""
    lanes: list[list[int]] = []   # per lane, the stack of open ends
    lane_of = [0] * len(starts)
    depth_of = [0] * len(starts)
    for i, (s, e, k) in enumerate(zip(starts, ends, kinds)):
        if k != SLICE:
            continue
        for n, stack in enumerate(lanes):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or stack[-1] >= e:
                lane_of[i], depth_of[i] = n, len(stack)
                stack.append(e)
                break
        else:
            lane_of[i] = len(lanes)
            lanes.append([e])
    return lane_of, depth_of


def _finish(out: RankTrace, it: _Items, names: dict[str, str]) -> None:
    """Assign lanes per track and fill ``out`` (tracks in display order); ``names``: Kineto thread names."""
    n = len(it.start)
    order = sorted(range(n), key=lambda i: (_sort_key(it.key[i]), it.key[i], it.start[i], -it.end[i]))
    track_ids: dict[tuple, int] = {}
    i = 0
    while i < n:
        j = i
        key = it.key[order[i]]
        while j < n and it.key[order[j]] == key:
            j += 1
        idx = order[i:j]
        lanes, depths = pack([it.start[k] for k in idx], [it.end[k] for k in idx], [it.kind[k] for k in idx])
        base = _track_name(key, names)
        for k, lane, depth in zip(idx, lanes, depths):
            tk = (key, lane)
            t = track_ids.get(tk)
            if t is None:
                t = track_ids[tk] = len(out.tracks)
                out.tracks.append(base if lane == 0 else f"{base} · lane {lane + 1}")
            out.track.append(t)
            out.names.append(it.name[k])
            out.cats.append(it.cat[k])
            out.starts.append(it.start[k])
            out.ends.append(it.end[k])
            out.kinds.append(it.kind[k])
            out.depths.append(depth)
            out.args.append(it.args[k])
            out.flows.append(it.flows[k])
        i = j


# ---------------------------------------------------------------------------------------------- findings
@dataclass(slots=True)
class FindingsTrace:
    """The findings as global tracks: one per root cause, its symptoms on tracks under it."""

    tracks: list[tuple[str, int | None]] = field(default_factory=list)  # (name, parent track index)
    track: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    args: list[dict[str, Any]] = field(default_factory=list)
    undrawn: list[str] = field(default_factory=list)  # ids of findings with no time on the exported steps


def finding_label(f: Any, root: bool) -> str:
    """``"root cause: divergent recompile, rank 1, 2.63 s"``."""
    from workbench.analyses.findings import format_ns, ranks_text

    parts = [f"{'root cause' if root else 'symptom'}: {f.kind.replace('_', ' ')}"]
    ranks = getattr(f.evidence, "compiling_ranks", None) or f.ranks  # a divergent recompile: who compiled
    if ranks:
        parts.append(ranks_text(ranks) if len(ranks) <= 4 else f"{len(ranks)} ranks")
    if f.cost.ns:
        parts.append(format_ns(f.cost.ns))
    return ", ".join(parts)


def _span(f: Any, steps: pl.DataFrame, clock: Clock, sel: Selection) -> tuple[int, int] | None:
    """Where a finding lies on the exported clock, first start to last end of: its steps on its ranks, else its
    steps on any exported rank (a rank that died in a step never recorded it), else its ranks' steps, else every
    exported step. None when none of its ranks or steps is exported."""
    ranks = [r for r in f.ranks if sel.rank_ok(r)]
    wanted = [x for x in f.steps if sel.steps is None or x in sel.steps]
    if (f.ranks and not ranks) or (f.steps and not wanted):
        return None
    on_ranks = steps.filter(pl.col("rank").is_in(ranks)) if ranks else steps
    on_steps = (lambda s: s.filter(pl.col("step").is_in(wanted))) if wanted else (lambda s: s)
    for s in (on_steps(on_ranks), on_steps(steps), on_ranks, steps):
        if not s.is_empty():
            break
    else:
        return None
    off = pl.col("rank").replace_strict({r: clock.offset(r) for r in s["rank"].unique().to_list()},
                                        default=0, return_dtype=pl.Int64)
    lo, hi = s.select((pl.col("start") - off).min(), (pl.col("end") - off).max()).row(0)
    return int(lo), int(hi)


def findings_trace(roots: Iterable[Any], steps: pl.DataFrame, clock: Clock, sel: Selection) -> FindingsTrace:
    """Each root finding a slice on its own track, each symptom a slice on a track under its root's."""
    steps = steps.filter(pl.col("rank").is_in(list(sel.ranks))) if sel.ranks is not None else steps
    steps = steps.filter(pl.col("step").is_in(list(sel.steps))) if sel.steps is not None else steps
    out = FindingsTrace()
    for n, root in enumerate(roots, 1):
        parent: int | None = None
        for f, cause in root.walk():
            is_root = cause is None
            span = _span(f, steps, clock, sel)
            if span is None:
                if is_root:
                    out.undrawn += [g.id for g, _ in root.walk()]
                    break
                out.undrawn.append(f.id)
                continue
            label = finding_label(f, is_root)
            out.tracks.append((f"{n} · {label}" if is_root else label, None if is_root else parent))
            t = len(out.tracks) - 1
            if is_root:
                parent = t
            out.track.append(t)
            out.names.append(label)
            out.starts.append(span[0])
            out.ends.append(span[1])
            out.args.append(_clean({"id": f.id, "kind": f.kind, "severity": f.severity, "message": f.message,
                                    "cost_ns": f.cost.ns, "cost": f.cost.label(), "ranks": list(f.ranks),
                                    "steps": list(f.steps), "cause_id": None if is_root else cause.id}))
    return out


__all__ = ["DERIVED", "FINDINGS_PID", "INSTANT", "PID_BASE", "SLICE", "WAITS", "ZERO", "Clock", "FindingsTrace",
           "RankTrace", "Selection", "collective_waits", "estimate_clock", "finding_label", "findings_trace",
           "pack", "parse_ids", "process_name", "rank_trace", "step_windows"]
