"""Read an exported trace back and check it against the run it came from: the proof an export is right.

* :func:`read_perfetto` parses the protobuf with the ``perfetto`` package's protos (``TracePacket`` by
  ``TracePacket``) and rebuilds the slices from their begin/end events, track by track (an end with no open begin, a
  begin never ended or an end before its begin is a problem).
* :func:`read_chrome` reads the JSON with the workbench's own Kineto reader (:func:`workbench.kineto.read_trace`:
  times, names, categories, threads), and its metadata, thread names and flow events with orjson.
* :func:`check` compares what was read with the run's tables: every rank's process, every Kineto event, step,
  compile, collective and Flight Recorder entry at its time to the nanosecond after the rank's clock offset, proper
  nesting on every track, every flow joining a wait to the activity it waited for, and the findings.

Example:
    >>> problems, counts = check(run, read_perfetto("run.pftrace"))      # doctest: +SKIP
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import polars as pl

from workbench.export.model import DERIVED, FINDINGS_PID, PID_BASE, Selection, collective_waits, step_windows

_SLICES = {"pid": pl.Int64, "track": pl.Int64, "track_name": pl.String, "name": pl.String, "cat": pl.String,
           "start": pl.Int64, "end": pl.Int64, "instant": pl.Boolean}
_FLOWS = {"id": pl.UInt64, "pid": pl.Int64, "track": pl.Int64, "track_name": pl.String, "ts": pl.Int64,
          "side": pl.String}


@dataclass
class ReadBack:
    """A trace as read: processes (pid → name, labels), slices and flow endpoints (frames), metadata, problems."""

    format: str
    processes: dict[int, dict[str, Any]]
    slices: pl.DataFrame
    flows: pl.DataFrame
    metadata: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def _open(path: str | Path) -> BinaryIO:
    fh = open(path, "rb")
    magic = fh.read(2)
    fh.seek(0)
    return gzip.GzipFile(fileobj=fh) if magic == b"\x1f\x8b" else fh  # type: ignore[return-value]


def _varint(fh: BinaryIO) -> int | None:
    shift = value = 0
    while True:
        b = fh.read(1)
        if not b:
            return None
        value |= (b[0] & 0x7F) << shift
        if b[0] < 0x80:
            return value
        shift += 7


def packets(path: str | Path) -> Any:
    """Every ``TracePacket`` of a protobuf trace file, in file order."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    with _open(path) as fh:
        while True:
            tag = _varint(fh)
            if tag is None:
                return
            if tag != 0x0A:
                raise ValueError(f"{path}: field tag {tag:#x} where a Trace.packet (0x0a) was expected")
            size = _varint(fh)
            data = fh.read(size or 0)
            if size is None or len(data) != size:
                raise ValueError(f"{path}: the last packet is cut short")
            yield pb.TracePacket.FromString(data)


def _value(a: Any) -> Any:
    kind = a.WhichOneof("value")
    return getattr(a, kind) if kind else None


def read_perfetto(path: str | Path) -> ReadBack:
    """A protobuf trace read back through the ``perfetto`` protos."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    TE = pb.TrackEvent
    tracks: dict[int, tuple[str, int | None, int | None]] = {}   # uuid -> name, parent, pid
    interned: dict[int, tuple[dict[int, str], dict[int, str]]] = {}
    open_: dict[int, list[tuple]] = {}
    rows: list[tuple] = []
    flows: list[tuple] = []
    problems: list[str] = []
    metadata: dict[str, Any] = {}
    processes: dict[int, dict[str, Any]] = {}
    for p in packets(path):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1 or p.incremental_state_cleared or seq not in interned:
            interned[seq] = ({}, {})
        names, cats = interned[seq]
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
        for e in p.interned_data.event_categories:
            cats[e.iid] = e.name
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            pid = td.process.pid if td.HasField("process") else None
            if pid is not None:
                processes[pid] = {"name": td.process.process_name, "labels": list(td.process.process_labels)}
            tracks[td.uuid] = (td.name or (td.process.process_name if pid is not None else ""),
                               td.parent_uuid if td.HasField("parent_uuid") else None, pid)
        elif p.HasField("track_event"):
            te = p.track_event
            if te.type == TE.TYPE_SLICE_END:
                stack = open_.get(te.track_uuid)
                if not stack:
                    problems.append(f"slice end at {p.timestamp} on track {te.track_uuid} with no open slice")
                    continue
                ts, name, cat, fl = stack.pop()
                if p.timestamp < ts:
                    problems.append(f"slice {name!r} ends at {p.timestamp}, before its start {ts}")
                rows.append((te.track_uuid, name, cat, ts, p.timestamp, False))
                continue
            name = te.name if te.HasField("name") else names.get(te.name_iid, f"<iid {te.name_iid}?>")
            cat = ",".join([cats.get(i, f"<iid {i}?>") for i in te.category_iids] + list(te.categories))
            for fid in te.flow_ids:
                flows.append((fid, te.track_uuid, p.timestamp))
            if te.type == TE.TYPE_INSTANT:
                rows.append((te.track_uuid, name, cat, p.timestamp, p.timestamp, True))
            elif te.type == TE.TYPE_SLICE_BEGIN:
                open_.setdefault(te.track_uuid, []).append((p.timestamp, name, cat, list(te.flow_ids)))
        elif p.HasField("chrome_events"):
            for m in p.chrome_events.metadata:
                if m.name == "workbench" and m.HasField("json_value"):
                    metadata = orjson.loads(m.json_value)
    for uuid, stack in open_.items():
        if stack:
            problems.append(f"{len(stack)} slice(s) on track {uuid} never ended (first {stack[0][1]!r})")

    def pid_of(uuid: int) -> int | None:
        seen = 0
        while uuid in tracks and seen < 64:
            name, parent, pid = tracks[uuid]
            if pid is not None:
                return pid
            if parent is None:
                return None
            uuid, seen = parent, seen + 1
        return None

    pids = {u: pid_of(u) for u in tracks}
    unknown = {u for u, *_ in rows if u not in tracks}
    if unknown:
        problems.append(f"events on {len(unknown)} track(s) with no descriptor")
    slices = pl.DataFrame([(pids.get(u), u, tracks.get(u, ("?",))[0], n, c, s, e, i) for u, n, c, s, e, i in rows],
                          schema=_SLICES, orient="row")
    fl = pl.DataFrame([(f, pids.get(u), u, tracks.get(u, ("?",))[0], ts, "any") for f, u, ts in flows],
                      schema=_FLOWS, orient="row")
    return ReadBack("perfetto", processes, slices, fl, metadata, problems)


def read_chrome(path: str | Path) -> ReadBack:
    """A Chrome JSON trace read back: events through :func:`workbench.kineto.read_trace`, the rest with orjson."""
    from workbench.kineto import read_bytes, read_trace

    tables = read_trace(path, rank=0)
    doc = orjson.loads(read_bytes(Path(path)))
    processes: dict[int, dict[str, Any]] = {}
    threads: dict[tuple[int, int], str] = {}
    flows: list[tuple] = []
    base = int(doc.get("baseTimeNanoseconds") or 0)
    for e in doc.get("traceEvents", []):
        ph = e.get("ph")
        if ph == "M":
            pid, args = int(e["pid"]), e.get("args") or {}
            if e["name"] == "process_name":
                processes.setdefault(pid, {"labels": []})["name"] = args.get("name")
            elif e["name"] == "process_labels":
                processes.setdefault(pid, {"labels": []})["labels"] = str(args.get("labels", "")).split(", ")
            elif e["name"] == "thread_name":
                threads[(pid, int(e["tid"]))] = args.get("name")
        elif ph in ("s", "f"):
            us = e["ts"]
            whole = int(us // 1)
            ts = base + whole * 1000 + round((us - whole) * 1000)
            flows.append((e["id"], int(e["pid"]), int(e["tid"]), threads.get((int(e["pid"]), int(e["tid"]))), ts,
                          "out" if ph == "s" else "in"))
    ev = tables.events.select(
        pl.col("pid"), track=pl.col("tid"), name=pl.col("name").cast(pl.String), cat=pl.col("cat").cast(pl.String),
        start=pl.col("start"), end=pl.col("end"), instant=pl.col("kind").cast(pl.String) == "instant")
    names = pl.DataFrame([(p, t, n) for (p, t), n in threads.items()],
                         schema={"pid": pl.Int64, "track": pl.Int64, "track_name": pl.String}, orient="row")
    slices = ev.join(names, on=["pid", "track"], how="left").select(list(_SLICES)).cast(_SLICES)  # type: ignore[arg-type]
    problems = [f"{r['reason']}: {r['count']}" for r in tables.skipped.iter_rows(named=True)
                if not str(r["reason"]).startswith(("metadata", "flow arrow"))]
    fl = pl.DataFrame(flows, schema=_FLOWS, orient="row")
    return ReadBack("json", processes, slices, fl, doc.get("workbench") or {}, problems)


def read(path: str | Path) -> ReadBack:
    """:func:`read_perfetto` or :func:`read_chrome`, by the file's content."""
    with _open(path) as fh:
        head = fh.read(1)
    return read_chrome(path) if head == b"{" else read_perfetto(path)


# ---------------------------------------------------------------------------------------------- checking
def _offsets(run: Any) -> dict[int, int]:
    """The offsets the export must have applied: the analyses' estimate, when the ranks span hosts."""
    from workbench.analyses.collectives import clock_offsets, spans_hosts

    if not spans_hosts(run.ranks):
        return {}
    return {int(r): int(o) for r, o in clock_offsets(run.collectives, run.ranks).select("rank", "offset_ns")
            .iter_rows() if o is not None}


def _base(name: str | None) -> str:
    return (name or "").split(" · lane ")[0]


def _diff(what: str, expected: list, actual: list, problems: list[str]) -> int:
    e, a = Counter(expected), Counter(actual)
    if e != a:
        missing, extra = e - a, a - e
        problems.append(f"{what}: {sum(missing.values())} expected not found (first {sorted(missing)[:1]}), "
                        f"{sum(extra.values())} found not expected (first {sorted(extra)[:1]})")
    return len(expected)


def _nesting(slices: pl.DataFrame, problems: list[str]) -> None:
    """Every track's slices nest or follow each other (what Perfetto needs to draw them)."""
    bad = 0
    first = ""
    for (pid, track), g in slices.filter(~pl.col("instant")).sort("start", pl.col("end"), descending=[False, True]) \
            .group_by("pid", "track", maintain_order=True):
        stack: list[int] = []
        for s, e, n in g.select("start", "end", "name").iter_rows():
            while stack and stack[-1] <= s:
                stack.pop()
            if stack and e > stack[-1]:
                bad += 1
                first = first or f"{n!r} [{s}, {e}] on pid {pid} track {track}"
            stack.append(e)
    if bad:
        problems.append(f"{bad} slice(s) overlap a slice of their track without nesting, first {first}")


def check(run: Any, rb: ReadBack, selection: Selection | None = None, *, waits: pl.DataFrame | None = None,
          findings: bool = True) -> tuple[list[str], dict[str, int]]:
    """Problems (empty when the trace is right) and how many items of each family were checked."""
    sel = selection or Selection()
    problems = list(rb.problems)
    counts: dict[str, int] = {}
    offsets = _offsets(run)
    ranks = [int(r) for r in run.ranks["rank"].to_list() if sel.rank_ok(int(r))]
    windows = step_windows(run.steps, sel)
    # processes: one per exported rank, named after it
    seen = {pid - PID_BASE for pid in rb.processes if pid != FINDINGS_PID}
    if seen != set(ranks):
        problems.append(f"processes for ranks {sorted(seen)}, expected {ranks}")
    for pid, p in rb.processes.items():
        if pid != FINDINGS_PID and not str(p.get("name")).startswith(f"rank {pid - PID_BASE} · "):
            problems.append(f"process {pid} is named {p.get('name')!r}, not after rank {pid - PID_BASE}")
    applied = {int(k): v.get("applied_ns") for k, v in (rb.metadata.get("clock") or {}).get("offsets", {}).items()}
    for r in ranks:
        if applied.get(r, 0) != offsets.get(r, 0):
            problems.append(f"rank {r}: metadata says offset {applied.get(r)} applied, the analyses give "
                            f"{offsets.get(r, 0)}")
    s = rb.slices.with_columns(rank=pl.col("pid") - PID_BASE, family=pl.col("track_name").map_elements(
        _base, return_dtype=pl.String))
    kineto = ~pl.col("cat").fill_null("").str.starts_with("workbench.")
    for r in ranks:
        off = offsets.get(r, 0)
        ev = sel.filter(run.scan("events", ranks=[r]).collect(), windows)
        exp = [(c, n, a - off, b - off) for c, n, a, b in ev.select(
            pl.col("cat").cast(pl.String), pl.col("name").cast(pl.String), "start", "end").iter_rows()]
        got = [tuple(x) for x in s.filter((pl.col("rank") == r) & kineto).select("cat", "name", "start", "end")
               .iter_rows()]
        counts["events"] = counts.get("events", 0) + _diff(f"rank {r} Kineto events", exp, got, problems)
    _derived(run, s, sel, windows, offsets, ranks, problems, counts)
    _nesting(rb.slices.filter(pl.col("pid") != FINDINGS_PID), problems)
    _flows(run, rb, s, sel, windows, offsets, ranks, waits, problems, counts)
    if findings:
        _findings(rb, s, problems, counts)
    return problems, counts


def _derived(run: Any, s: pl.DataFrame, sel: Selection, windows: dict, offsets: dict[int, int], ranks: list[int],
             problems: list[str], counts: dict[str, int]) -> None:
    """Steps, compiles, collectives and Flight Recorder entries at their tables' times."""
    from workbench.flight_recorder import run_hangs

    off = pl.col("rank").replace_strict(offsets, default=0, return_dtype=pl.Int64)
    st = sel.filter(run.steps, windows)
    fams = {
        "steps": st.select("rank", fam=pl.when(pl.col("source").cast(pl.String) == "profiler")
                           .then(pl.lit(DERIVED["profiler_steps"])).otherwise(pl.lit(DERIVED["steps"])),
                           a=pl.col("start"), b=pl.col("end")),
        "compiles": sel.filter(run.compiles, windows).filter(pl.col("start").is_not_null()).select(
            "rank", fam=pl.lit(DERIVED["compiles"]), a=pl.col("start"),
            b=pl.coalesce("end", pl.col("start") + pl.col("duration_ns"), "start")),
        "collectives": sel.filter(run.collectives, windows).select(
            "rank", fam=pl.lit(DERIVED["collectives"]), a=pl.coalesce("kernel_start", "start"),
            b=pl.coalesce("kernel_end", "end")),
    }
    fr = run_hangs(run).entries
    if not fr.is_empty():
        fams["flight_recorder"] = sel.filter(fr, windows, start="created_ns", end="completed_ns", step=None) \
            .filter(pl.coalesce("started_ns", "created_ns").is_not_null()).select(
            "rank", fam=pl.lit(DERIVED["flight_recorder"]), a=pl.coalesce("started_ns", "created_ns"),
            b=pl.coalesce("completed_ns", "started_ns", "created_ns"))
    families = {"steps": [DERIVED["steps"], DERIVED["profiler_steps"]], "compiles": [DERIVED["compiles"]],
                "collectives": [DERIVED["collectives"]], "flight_recorder": [DERIVED["flight_recorder"]]}
    for name, f in fams.items():
        f = f.filter(pl.col("rank").is_in(ranks)).with_columns(pl.col("a") - off, pl.col("b") - off)
        exp = [tuple(x) for x in f.select("rank", "fam", "a", "b").iter_rows()]
        got = [tuple(x) for x in s.filter(pl.col("family").is_in(families[name]))
               .select("rank", "family", "start", "end").iter_rows()]
        counts[name] = _diff(name, exp, got, problems)


def _flows(run: Any, rb: ReadBack, s: pl.DataFrame, sel: Selection, windows: dict, offsets: dict[int, int],
           ranks: list[int], waits: pl.DataFrame | None, problems: list[str], counts: dict[str, int]) -> None:
    """Each flow joins a wait slice on one rank to the activity it waited for on another, at the WAITS' times."""
    w = collective_waits(run.collectives, run.ranks) if waits is None else waits
    w = sel.filter(w.filter(pl.col("on_rank").is_in(ranks)), windows)
    exp = [(r, a - offsets.get(r, 0), b - offsets.get(r, 0), o, c - offsets.get(o, 0))
           for r, a, b, o, c in w.select("rank", "start", "end", "on_rank", "on_start").iter_rows()]
    got = []
    waits_at = {(p - PID_BASE, t, a): b for p, t, a, b in s.filter(pl.col("cat") == "workbench.wait").select(
        "pid", "track", "start", "end").iter_rows()}
    for fid, g in rb.flows.group_by("id"):
        ends = g.sort("ts").rows(named=True)
        if len(ends) != 2:
            problems.append(f"flow {fid[0]} has {len(ends)} endpoint(s), not 2")
            continue
        src = [e for e in ends if str(e["track_name"]).startswith(DERIVED["waiting"])]
        dst = [e for e in ends if e not in src]
        if len(src) != 1 or len(dst) != 1:
            problems.append(f"flow {fid[0]} does not join one wait to one activity")
            continue
        a, b = src[0], dst[0]
        end = waits_at.get((a["pid"] - PID_BASE, a["track"], a["ts"]))
        if end is None:
            problems.append(f"flow {fid[0]} starts at {a['ts']}, where no wait slice starts")
        if rb.format == "json" and (a["side"], b["side"]) != ("out", "in"):
            problems.append(f"flow {fid[0]} runs {a['side']} → {b['side']}, not from the wait to what it waited for")
        got.append((a["pid"] - PID_BASE, a["ts"], end, b["pid"] - PID_BASE, b["ts"]))
    counts["flows"] = _diff("flows (wait → awaited)", exp, got, problems)


def _findings(rb: ReadBack, s: pl.DataFrame, problems: list[str], counts: dict[str, int]) -> None:
    """Every finding of the metadata drawn once (unless listed as undrawn), labelled root cause / symptom."""
    md = rb.metadata
    ids: list[tuple[str, bool]] = []

    def walk(fs: list[dict[str, Any]], root: bool) -> None:
        for f in fs:
            ids.append((f["id"], root))
            walk(f.get("symptoms") or [], False)

    walk(md.get("findings") or [], True)
    drawn = s.filter(pl.col("cat") == "workbench.finding")
    undrawn = set(md.get("findings_undrawn") or [])
    want = [(("root cause: " if root else "symptom: ") + i.split(":")[0].replace("_", " "))
            for i, root in ids if i not in undrawn]
    got = [n.split(",")[0] for n in drawn["name"].to_list()]
    counts["findings"] = _diff("findings drawn", want, got, problems)


__all__ = ["ReadBack", "check", "packets", "read", "read_chrome", "read_perfetto"]
