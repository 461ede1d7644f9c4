"""One job per run: the compile logs and Kineto traces of a folder grouped into jobs by process, rank and time.

Each file is sniffed cheaply (its first lines, never the whole file): a TORCH_TRACE log's first line gives the
process (glog's thread id: the main thread's is the pid) and its start (``MMDD hh:mm:ss``; the year is not
written); a Kineto trace's first events give its pid and its ``distributedInfo`` rank (its event times are of a
steady clock, not comparable across machines or with the logs). Logs of one pid started within
:data:`SAME_PROCESS_S` of each other are one process; processes started within :data:`SAME_JOB_S` of each other
that claim no rank twice are one job. Jobs are found from the compile logs; a trace joins the job of its pid. A
collector's run directory is one job. A folder holding several jobs is refused by :func:`select` in one line
naming the jobs, their files and how they differ; ``select(..., job=ID)`` keeps one (``j1``, ``j2``, … by start).

Example:
    >>> from workbench.discover import Sources
    >>> select(Sources(root=Path("."))).compile_logs
    []
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.errors import InputError

#: Files of one pid that started this close (seconds) are one process.
SAME_PROCESS_S = 6 * 3600
#: Processes (ranks) that started this close (seconds) are one job, unless they claim the same rank.
SAME_JOB_S = 1800
_HEAD = re.compile(rb"^[VIWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) +(\d+) ")
_PID = re.compile(rb'"pid"\s*:\s*"?(\d+)')
_TRACE_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*(\d+)')
_SNIFF = 256 << 10


@dataclass(slots=True)
class FileJob:
    """What a file says about the job it belongs to."""

    path: Path
    kind: str                    # "compile log" or "trace"
    rank: int | None
    pid: int | None
    start_s: float | None        # seconds; compile logs: since the start of their (unknown) year
    yearless: bool = False       # start_s counts from Jan 1 (a TORCH_TRACE log writes no year)


@dataclass(slots=True)
class Job:
    """Files of one job."""

    id: str
    files: list[FileJob] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return sorted({f.pid for f in self.files if f.pid is not None})

    @property
    def start(self) -> float | None:
        return min((f.start_s for f in self.files if f.start_s is not None), default=None)


def _head_bytes(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            raw = fh.read(_SNIFF)
        if raw[:2] == b"\x1f\x8b":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, _SNIFF)
        return raw
    except (OSError, zlib.error, gzip.BadGzipFile):
        return b""


def _yearless_s(month: int, day: int, h: int, m: int, s: int) -> float | None:
    try:
        t = datetime(2000, month, day, h, m, s, tzinfo=timezone.utc)   # 2000: a leap year (Feb 29 exists)
    except ValueError:
        return None
    return (t - datetime(2000, 1, 1, tzinfo=timezone.utc)).total_seconds()


def sniff_compile_log(path: Path, rank: int | None) -> FileJob:
    """The pid and start of a TORCH_TRACE log, from its first line."""
    if rank is None:
        from workbench.compile_log import rank_from_filename

        rank = rank_from_filename(path)
    m = _HEAD.match(_head_bytes(path)[:400])
    if not m:
        return FileJob(path, "compile log", rank, None, None, True)
    mo, d, h, mi, s, _, tid = (int(x) for x in m.groups())
    return FileJob(path, "compile log", rank, tid, _yearless_s(mo, d, h, mi, s), True)


def sniff_trace(path: Path, rank: int | None) -> FileJob:
    """The pid and start of a Kineto trace, from its first events."""
    head = _head_bytes(path)
    if rank is None and (rm := _TRACE_RANK.search(head)):
        rank = int(rm.group(1))
    pid = _PID.search(head)
    # event times are of a steady clock (not the wall clock): a trace joins a job by its pid and rank only
    return FileJob(path, "trace", rank, int(pid.group(1)) if pid else None, None)


def _close(a: FileJob, b: FileJob, limit: float) -> bool:
    """Whether two files started within ``limit`` seconds (unknown times never separate files). A TORCH_TRACE log
    writes local time and a trace UTC: between the two, any time zone's offset is allowed."""
    if a.start_s is None or b.start_s is None:
        return True
    if a.yearless != b.yearless:
        limit = max(limit, 15 * 3600)
    if a.yearless or b.yearless:   # compare day-of-year and time, the year unknown
        sa, sb = (_as_yearless(x) for x in (a, b))
        diff = abs(sa - sb)
        return min(diff, 366 * 86400 - diff) <= limit
    return abs(a.start_s - b.start_s) <= limit


def _as_yearless(f: FileJob) -> float:
    if f.yearless or f.start_s is None:
        return f.start_s or 0.0
    t = datetime.fromtimestamp(f.start_s, tz=timezone.utc)
    return _yearless_s(t.month, t.day, t.hour, t.minute, t.second) or 0.0


def group(files: list[FileJob]) -> list[Job]:
    """The jobs of ``files`` (see the module docstring), ``j1``, ``j2``, … by start."""
    procs: list[list[FileJob]] = []
    for f in files:
        home = next((p for p in procs if f.pid is not None and p[0].pid == f.pid
                     and all(_close(f, g, SAME_PROCESS_S) for g in p)), None)
        if home is None and f.pid is None:
            home = next((p for p in procs if all(_close(f, g, SAME_PROCESS_S) for g in p)), None)
        if home is None:
            procs.append([f])
        else:
            home.append(f)
    jobs: list[list[FileJob]] = []
    for p in sorted(procs, key=lambda p: min((_as_yearless(f) for f in p), default=0.0)):
        ranks = {f.rank or 0 for f in p}   # a log without a rank is read as rank 0
        home = next((j for j in jobs if all(_close(a, b, SAME_JOB_S) for a in p for b in j)
                     and not (ranks & {f.rank or 0 for f in j if f.pid != p[0].pid})), None)
        if home is None:
            jobs.append(list(p))
        else:
            home.extend(p)
    return [Job(f"j{i + 1}", j) for i, j in enumerate(jobs)]


def _when(job: Job) -> str:
    f = min((f for f in job.files if f.start_s is not None), key=_as_yearless, default=None)
    if f is None:
        return "start unknown"
    if f.yearless:
        t = datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp() + f.start_s   # type: ignore[operator]
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%m-%d %H:%M:%S")
    return datetime.fromtimestamp(f.start_s, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")   # type: ignore[arg-type]


def _names(job: Job, root: Path, n: int = 3) -> str:
    names = []
    for f in job.files[:n]:
        try:
            names.append(str(f.path.relative_to(root)))
        except ValueError:
            names.append(f.path.name)
    more = f" +{len(job.files) - n} more" if len(job.files) > n else ""
    return ", ".join(names) + more


def _differ(jobs: list[Job]) -> str:
    out = []
    pids = [set(j.pids) for j in jobs]
    if all(p for p in pids) and not set.intersection(*pids):
        out.append("pids")
    starts = [_as_yearless(min((f for f in j.files if f.start_s is not None), key=_as_yearless))
              for j in jobs if any(f.start_s is not None for f in j.files)]
    if len(starts) > 1:
        span = max(starts) - min(starts)
        out.append(f"start ({span / 86400:.1f} days apart)" if span >= 86400 else f"start ({span / 3600:.1f} h apart)")
    ranks = [[f.rank for f in j.files if f.rank is not None] for j in jobs]
    if any(len(r) != len(set(r)) for r in ranks) or len({x for r in ranks for x in r}) < sum(len(set(r)) for r in ranks):
        out.append("the same ranks recorded again")
    return ", ".join(out) or "pids and start times"


def select(sources: Any, job: str | None = None) -> Any:
    """``sources`` (:class:`workbench.discover.Sources`) of one job: unchanged when they hold one job (or are a
    collector's run directory); :class:`InputError` in one line when they hold several and ``job`` is None (the
    jobs, their files and how they differ), or when ``job`` names none of them; else only ``job``'s files.

    The jobs are the compile logs' (they carry a start time); a trace joins the job whose log has its pid. Traces
    alone are left to the trace reader's own checks (two traces of one rank are refused there)."""
    if getattr(sources, "is_run_dir", False) and job is None:
        return sources
    jobs = group([sniff_compile_log(p, r) for p, r in sources.compile_logs])
    if len(jobs) <= 1 and job in (None, *(j.id for j in jobs)):
        return sources
    by_pid = {f.pid: j for j in jobs for f in j.files if f.pid is not None}
    loose: list[Path] = []
    for t in sources.traces:
        tf = sniff_trace(t.path, t.rank)
        if tf.pid in by_pid:
            by_pid[tf.pid].files.append(tf)
        else:
            loose.append(t.path)
    if job is None:
        listed = "; ".join(f"{j.id}: {_names(j, sources.root)} (pids {', '.join(map(str, j.pids)) or '?'}, "
                           f"started {_when(j)})" for j in jobs)
        extra = f"; traces of no log's process: {', '.join(p.name for p in loose[:3])}" if loose else ""
        raise InputError(f"{sources.root}: {len(jobs)} jobs in one folder, not merged (they differ in "
                         f"{_differ(jobs)}): {listed}{extra}. Open one with --job {jobs[0].id}")
    chosen = next((j for j in jobs if j.id == job), None)
    if chosen is None:
        raise InputError(f"{sources.root}: --job {job}: no such job here (jobs: {', '.join(j.id for j in jobs)})")
    keep = {f.path for f in chosen.files}
    return replace(sources, compile_logs=[(p, r) for p, r in sources.compile_logs if p in keep],
                   traces=[t for t in sources.traces if t.path in keep])
