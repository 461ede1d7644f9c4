"""Hang capture: what each rank leaves on disk when a job hangs, times out or dies, in ``rank<R>/hang/``.

Nothing here runs per collective or per step on the training thread. At :meth:`HangCapture.start`:

* the Flight Recorder environment, where it is not set already — ``TORCH_FR_BUFFER_SIZE`` /
  ``TORCH_NCCL_TRACE_BUFFER_SIZE`` (entries kept), ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` and
  ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` / ``TORCH_FR_DUMP_TEMP_FILE`` pointing into ``rank<R>/hang/`` (NCCL's
  watchdog dumps there on a timeout). torch reads these when the process group is created: when it already exists
  (the usual ``init_process_group`` before ``Collector``), NCCL's own dump-on-timeout keeps the settings it was
  created with; the start event records ``pg_before_collector`` and docs/hangs.md says what to export instead.
  Gloo records Flight Recorder entries in torch 2.13 whatever the env says (2000 entries by default), but gloo has
  no watchdog that dumps them: the collector dumps them itself (below).
* ``faulthandler`` writing to ``rank<R>/hang/fatal.txt`` (when nothing else enabled it): a rank that gloo aborts
  (``SIGABRT`` on a received-size mismatch) or that crashes leaves its Python stacks, hence the line it was at.
* a daemon watchdog thread: a one-line heartbeat every :data:`HEARTBEAT_S` (alive until then, at which step), and
  one Flight Recorder dump when a step runs longer than :data:`STALL_S` (env ``WORKBENCH_HANG_STALL_S``), so a job
  hung under a 30-minute timeout and then ``SIGKILL``-ed still leaves what every process group was doing.

Flight Recorder entries for every step (docs/critical-path.md): the recorder keeps only its last
``TORCH_FR_BUFFER_SIZE`` entries, so the watchdog polls the process groups' sequence numbers (a counter read, no
dump) every :data:`FR_POLL_S` and, when :data:`FR_DUMP_FILL` of the buffer holds entries not dumped yet, dumps it
without stack traces into ``rank<R>/hang/fr/<n>.pkl.gz`` (gzip level 1). A dump holds the GIL (~4-5 µs of CPU per
entry on a quiet CPU), so the dumps are governed by a budget: their measured CPU time (the dumping thread's,
which holds the GIL while torch builds the dump) never exceeds :data:`FR_DUMP_BUDGET` of the wall time since the
collector started (each dump is allowed on the last one's cost per entry); a dump that would exceed it waits, and the
entries overwritten meanwhile are counted (``lost`` in the ``fr_dump`` event). The readers merge these dumps with the
one written at close (which has the stacks).

At the exits: an exception leaving a step records the error and the step (:meth:`on_step_error`);
:meth:`close` (the collector's close: normal end, exception, ``atexit``) dumps the Flight Recorder to
``rank<R>/hang/fr_trace_rank_<R>`` (torch's pickle format, via ``torch._C._distributed_c10d._dump_fr_trace``) and
appends the exit to ``events.jsonl``. A ``SIGKILL`` leaves only what was written before: the heartbeat, the compile
log (flushed per record) and ``steps.jsonl`` (the step writer process writes every finished step, also after the
rank is killed).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gzip
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import orjson

#: Entries the Flight Recorder keeps when the user did not choose (torch's own default for gloo).
FR_BUFFER_DEFAULT = "2000"
#: Seconds between heartbeats.
HEARTBEAT_S = 1.0
#: A step longer than this (seconds) gets one Flight Recorder dump from the watchdog.
STALL_S = 60.0

_DUMP_PREFIX = "fr_trace_rank_"
_NCCL_PREFIX = "nccl_trace_rank_"

#: The periodic dumps' folder inside ``rank<R>/hang/`` (``<n>.pkl.gz``, n counting from 0).
FR_PERIODIC_DIR = "fr"
#: Seconds between two looks at the process groups' sequence numbers (the watchdog's tick).
FR_POLL_S = 0.25
#: A periodic dump is taken once this share of the Flight Recorder's buffer holds entries not dumped yet.
FR_DUMP_FILL = 0.75
#: The periodic dumps' time may reach at most this share of the wall time since the collector started
#: (``WORKBENCH_FR_DUMP_BUDGET`` sets another share: 0 turns the periodic dumps off, 1 never holds one back).
FR_DUMP_BUDGET = 0.001


def dump_budget() -> float:
    """:data:`FR_DUMP_BUDGET`, or ``WORKBENCH_FR_DUMP_BUDGET`` when it holds a number in [0, 1]."""
    try:
        value = float(os.environ.get("WORKBENCH_FR_DUMP_BUDGET", ""))
    except ValueError:
        return FR_DUMP_BUDGET
    return value if 0.0 <= value <= 1.0 else FR_DUMP_BUDGET
#: CPU time per dumped entry assumed before the first dump measured it (seconds; measured 3.4-5.5 µs on a CPU).
FR_ENTRY_S = 6e-6


def stall_seconds() -> float:
    """:data:`STALL_S`, or ``WORKBENCH_HANG_STALL_S`` when it holds a positive number."""
    try:
        value = float(os.environ.get("WORKBENCH_HANG_STALL_S", ""))
        return value if value > 0 else STALL_S
    except ValueError:
        return STALL_S


def flight_recorder_env(hang_dir: Path) -> dict[str, str]:
    """The env vars that turn the Flight Recorder on and point its dumps at ``hang_dir`` (set them before
    ``init_process_group``; torch appends the rank to the two file prefixes)."""
    return {
        "TORCH_FR_BUFFER_SIZE": FR_BUFFER_DEFAULT,
        "TORCH_NCCL_TRACE_BUFFER_SIZE": FR_BUFFER_DEFAULT,
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(hang_dir / _NCCL_PREFIX),
        "TORCH_FR_DUMP_TEMP_FILE": str(hang_dir / _NCCL_PREFIX),
    }


def dump_flight_recorder(stacks: bool = True) -> bytes | None:
    """This process's Flight Recorder as torch's pickle (with stack frames unless ``stacks`` is False), or None where
    torch has none."""
    try:
        from torch._C import _distributed_c10d as c10d
    except Exception:
        return None
    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            return bytes(fn() if stacks else fn(includeStackTraces=False))
        except Exception:
            continue
    return None


def _fr_buffer_size() -> int:
    """The Flight Recorder's buffer (entries) as the environment sets it, torch's gloo default otherwise."""
    for key in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        try:
            value = int(os.environ.get(key, ""))
        except ValueError:
            continue
        return max(0, value)
    return int(FR_BUFFER_DEFAULT)


def fr_recorded() -> int | None:
    """Collectives recorded so far by this process's groups (the sum of their sequence numbers: a counter read, no
    dump); None where torch offers no such counter or no group exists."""
    if "torch.distributed" not in sys.modules:   # never the one to import torch
        return None
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        if not (dist.is_available() and dist.is_initialized()):
            return None
        return sum(int(pg._get_sequence_number_for_group()) for pg in list(c10d._world.pg_map))
    except Exception:
        return None


class PeriodicDumps:
    """The watchdog's side of "entries for every step": :meth:`poll` dumps the Flight Recorder (no stacks) into
    ``folder`` when :data:`FR_DUMP_FILL` of its ``buffer`` holds entries not dumped yet and the budget allows it
    (module docstring). ``spent_s``: the dumps' measured time; ``lost``: entries overwritten before a dump."""

    def __init__(self, folder: Path, buffer: int) -> None:
        self.folder = folder
        self.buffer = buffer
        self.t0 = time.monotonic()
        self.spent_s = 0.0
        self.per_entry_s = FR_ENTRY_S
        self.dumped_at = 0          # fr_recorded() at the last dump
        self.count = 0              # dumps written
        self.lost = 0
        self.budget = dump_budget()
        self.enabled = buffer > 0 and self.budget > 0

    def due(self, recorded: int | None) -> bool:
        """Enough entries wait to be dumped (``recorded``: :func:`fr_recorded` now)."""
        return recorded is not None and recorded - self.dumped_at >= FR_DUMP_FILL * self.buffer

    def affordable(self, now: float) -> bool:
        """A dump of the whole buffer now keeps the dumps within the budget (:func:`dump_budget`) of the time so
        far."""
        return self.spent_s + self.per_entry_s * self.buffer <= self.budget * (now - self.t0)

    def poll(self) -> dict[str, Any] | None:
        """Dump when due and affordable; returns what the dump did (for ``events.jsonl``), else None."""
        if not self.enabled:
            return None
        recorded = fr_recorded()
        if not self.due(recorded) or not self.affordable(time.monotonic()):
            return None
        return self.dump(recorded)

    def dump(self, recorded: int | None) -> dict[str, Any] | None:
        """Dump now. Its cost is the dumping thread's CPU time: what it held the GIL for while torch built the
        dump (the gzip and the write let go of it); the wall time is recorded beside it."""
        t, c = time.monotonic(), time.thread_time()
        data = dump_flight_recorder(stacks=False)
        took = time.thread_time() - c
        if data is None:
            self.enabled = False
            return None
        packed = gzip.compress(data, compresslevel=1, mtime=0)   # zlib lets go of the GIL while it compresses
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{self.count:06d}.pkl.gz"
        tmp = self.folder / f".{self.count:06d}.tmp"
        tmp.write_bytes(packed)
        os.replace(tmp, path)
        wall = time.monotonic() - t
        self.spent_s += took
        pending = (recorded - self.dumped_at) if recorded is not None else 0
        lost = max(0, pending - self.buffer)
        self.lost += lost
        self.per_entry_s = max(took / max(1, min(self.buffer, pending or self.buffer)), 1e-7)
        self.dumped_at = recorded if recorded is not None else self.dumped_at
        self.count += 1
        return {"file": f"{FR_PERIODIC_DIR}/{path.name}", "recorded": recorded, "lost": lost, "bytes": len(packed),
                "seconds": round(took, 6), "wall_seconds": round(wall, 6),
                "spent_share": round(self.spent_s / max(1e-9, t - self.t0 + wall), 6)}


class HangCapture:
    """One rank's hang files. ``step_state()`` returns (step running now or None, steps done); ``on_error(exc)``
    reports a failure of this component (the collector turns it off and carries on)."""

    def __init__(self, rank_dir: Path, rank: int, step_state: Callable[[], tuple[int | None, int]],
                 on_error: Callable[[BaseException], None]) -> None:
        self.dir = Path(rank_dir) / "hang"
        self.rank = rank
        self._step_state = step_state
        self._on_error = on_error
        self._events_fd: int | None = None
        self._fatal_fh: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._stall_s = stall_seconds()
        self._stalled_step: int | None = None
        self._step_seen: tuple[int | None, float] = (None, time.monotonic())
        self.dumps = 0
        self._lock = threading.Lock()
        self.fr = PeriodicDumps(self.dir / FR_PERIODIC_DIR, _fr_buffer_size())

    # ------------------------------------------------------------------ start
    def start(self) -> HangCapture:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._events_fd = os.open(self.dir / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        pg_before = _pg_initialized()
        set_env = {}
        for key, value in flight_recorder_env(self.dir).items():
            if key not in os.environ:
                os.environ[key] = value
                set_env[key] = value
        self._event("start", pid=os.getpid(), pg_before_collector=pg_before, env_set=sorted(set_env),
                    backend=_backend())
        self._guard(self._enable_faulthandler)
        self._thread = threading.Thread(target=self._watch, name="workbench-hang-watchdog", daemon=True)
        self._thread.start()
        return self

    def _enable_faulthandler(self) -> None:
        if faulthandler.is_enabled():
            return   # someone else (pytest, torchrun -X faulthandler, the user) owns it
        self._fatal_fh = open(self.dir / "fatal.txt", "w")  # noqa: SIM115 - stays open for faulthandler
        faulthandler.enable(file=self._fatal_fh, all_threads=True)

    # ------------------------------------------------------------------ watchdog thread
    def _watch(self) -> None:
        beat = self.dir / "heartbeat.jsonl"
        tmp = self.dir / ".heartbeat.tmp"
        next_beat = time.monotonic() + HEARTBEAT_S
        while not self._stop.wait(FR_POLL_S):
            try:
                done_dump = self.fr.poll()
                if done_dump is not None:
                    self._event("fr_dump", **done_dump)
                if time.monotonic() < next_beat:
                    continue
                next_beat += HEARTBEAT_S
                step, done = self._step_state()
                now = time.monotonic()
                if step != self._step_seen[0]:
                    self._step_seen = (step, now)
                elif step is not None and self._stalled_step != step and now - self._step_seen[1] > self._stall_s:
                    self._stalled_step = step
                    self._event("stalled", step=step, seconds=round(now - self._step_seen[1], 1))
                    self.dump("stalled")
                tmp.write_bytes(orjson.dumps({"time_ns": time.time_ns(), "step": step, "steps_done": done}) + b"\n")
                os.replace(tmp, beat)
            except Exception as exc:
                self._on_error(exc)
                return

    # ------------------------------------------------------------------ exits
    def on_step_error(self, exc: BaseException | None) -> None:
        """An exception is leaving the current step (called before the step is closed)."""
        if self._error is not None or exc is None:
            return
        with contextlib.suppress(Exception):
            step, _ = self._step_state()
            self._error = f"{type(exc).__name__}: {exc}"[:2000]
            self._event("error", step=step, error=self._error)

    def dump(self, reason: str) -> Path | None:
        """Write this process's Flight Recorder to ``fr_trace_rank_<R>`` (atomically); None where torch has none."""
        data = dump_flight_recorder()
        if data is None:
            return None
        with self._lock:
            path = self.dir / f"{_DUMP_PREFIX}{self.rank}"
            tmp = self.dir / f".{_DUMP_PREFIX}{self.rank}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, path)
            self.dumps += 1
        self._event("dump", reason=reason, file=path.name, bytes=len(data))
        return path

    def close(self) -> None:
        """Stop the watchdog, dump the Flight Recorder, record the exit, give faulthandler back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * HEARTBEAT_S)
        reason = "exception" if self._error is not None else "closed"
        recorded = fr_recorded()
        self._guard(lambda: self.dump(reason))
        if recorded is not None and self.fr.enabled:   # what the dumps kept of what the recorder saw
            lost = self.fr.lost + max(0, recorded - self.fr.dumped_at - self.fr.buffer)
            self._event("fr_coverage", recorded=recorded, periodic_dumps=self.fr.count, lost=lost,
                        dump_cpu_s=round(self.fr.spent_s, 6))
        step, done = (None, 0)
        with contextlib.suppress(Exception):
            step, done = self._step_state()
        self._event("exit", reason=reason, steps_done=done)
        if self._fatal_fh is not None:
            with contextlib.suppress(Exception):
                faulthandler.disable()
                self._fatal_fh.close()
                path = self.dir / "fatal.txt"
                if path.stat().st_size == 0:
                    path.unlink()
            self._fatal_fh = None
        if self._events_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._events_fd)
            self._events_fd = None

    # ------------------------------------------------------------------ helpers
    def _event(self, event: str, **fields: Any) -> None:
        if self._events_fd is None:
            return
        try:
            os.write(self._events_fd, orjson.dumps({"event": event, "time_ns": time.time_ns(), **fields},
                                                   default=str) + b"\n")
        except Exception as exc:
            self._on_error(exc)

    def _guard(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:
            self._on_error(exc)


def _pg_initialized() -> bool:
    try:
        import torch.distributed as dist

        return bool(dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _backend() -> str | None:
    try:
        import torch.distributed as dist

        return str(dist.get_backend()) if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def start(rank_dir: Path, rank: int, step_state: Callable[[], tuple[int | None, int]],
          on_error: Callable[[BaseException], None]) -> HangCapture | None:
    """A started :class:`HangCapture`, or None (with ``on_error`` called) when it cannot start."""
    try:
        return HangCapture(rank_dir, rank, step_state, on_error).start()
    except Exception as exc:
        on_error(exc)
        return None


def enable_before_init(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Set the Flight Recorder env (where unset) for a process group created *before* the Collector: call it
    before ``init_process_group``. NCCL's dump on timeout then lands in ``<run_dir>/nccl_trace_rank_<R>``, which
    ``workbench analyze <run_dir>`` reads. Returns what it set."""
    prefix = str(Path(run_dir) / _NCCL_PREFIX)
    env = {**flight_recorder_env(Path(run_dir)), "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
           "TORCH_FR_DUMP_TEMP_FILE": prefix}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    done = {}
    for key, value in env.items():
        if key not in os.environ:
            os.environ[key] = value
            done[key] = value
    return done
