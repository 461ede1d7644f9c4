"""``steps.jsonl`` without a system call on the training thread: one record per step into shared memory.

Per step the training thread puts one record into a ring in shared memory (:meth:`StepLog.record`, or for most steps
the collector's step context itself through :meth:`StepLog.cursor`: an 8-byte store per field, then one of
the count; no system call, no ``struct`` code); a small process of its own
(:mod:`step_writer`, standard library only, started once at ``start()``) turns the records into JSON lines within
two :data:`~step_writer.POLL_S`. Why: on the H200 machine a step's ``os.write`` and ``orjson`` cost the training
loop +93 µs a step (5.8 ms eager step), 15 times what the same code costs alone, because it runs right after the
step's own work has evicted the CPU caches; with the ring the collector's step cost +28 µs of CPU time there
(less since, measured on the dev VM; bench/README.md, "Collector overhead"). A thread would not do: a rank that is
killed or aborts would lose the lines it had not written, and those say where it died.

What is on disk when: a hung step does not stop the writer, so the steps before it are there within 2 × ``POLL_S``; a
rank killed with SIGKILL or aborted has all its finished steps there too (the writer sees the pipe close, writes the
rest of the ring and ends; a DataLoader worker forked from the rank holds nothing of it open). Only a writer killed
along with its rank (a whole job's processes killed at once) loses the last 2 × ``POLL_S`` of lines. A writer more
than the ring behind (a loop faster than ~15 µs a step, a hung file system) loses the oldest records it had not read:
``steps.jsonl`` gets a ``lost_records`` line where each gap is, and ``on_error`` hears once how many were lost
(the count on disk, read from the ring's header at the liveness checks and at close).

Where no writer process can run (no shared-memory folder, a sandbox without ``fork``/``exec``), or when it dies,
the lines are written on the training thread at every step as before (``mode == "inline"``), and the reason is
reported through ``on_error``.
"""

from __future__ import annotations

import mmap
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Callable, NamedTuple

from workbench.collectors import step_writer as sw

#: Records the ring holds (at 40 bytes each); the writer reads them every POLL_S, so it rarely fills: records it
#: could not read in time are lost, said once through ``on_error`` and by a ``lost_records`` line in steps.jsonl.
CAPACITY = 1 << 16
#: Every this many records the training thread checks that the writer process is still there.
CHECK_EVERY = 4096
#: Seconds between the writer process's reads of the ring (tests shorten it).
POLL_S = sw.POLL_S
#: How long to wait for the writer process to say it is ready, and at close for it to write the rest.
START_WAIT_S = 5.0
CLOSE_WAIT_S = 10.0
_FIRST_WORD, _RECORD_WORDS, _WRITTEN = sw.FIRST_WORD, sw.RECORD_WORDS, sw.WRITTEN

_LIVE: weakref.WeakSet[StepLog] = weakref.WeakSet()


def _in_forked_child() -> None:
    """A child forked from the rank (a DataLoader worker) must neither hold the writer's pipe open nor record."""
    for log in list(_LIVE):
        log._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)


def _shm_dir() -> str | None:
    for d in ("/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(d) and os.access(d, os.W_OK):
            return d
    return None


class RingCursor(NamedTuple):
    """The ring lent to a caller that stores whole records into it itself (:meth:`StepLog.cursor`)."""

    words: memoryview      # step_writer.words(ring): record i at words[at..at + 4], then the count in words[WRITTEN]
    count: int             # records in the ring so far (words[WRITTEN])
    at: int                # the next record's first word
    end: int               # one past the last record word (the next record after it goes at FIRST_WORD)
    before_check: int      # records the caller may store before one must go through record() (its writer check)


class StepRecordsLost(RuntimeError):
    """The writer process fell more than the ring behind: the oldest unread records are lost (steps go on)."""


class StepLog:
    """The writer of one rank's ``steps.jsonl``. Never raises after construction; errors go to ``on_error``."""

    def __init__(self, path: str | os.PathLike[str], on_error: Callable[[BaseException], None]) -> None:
        self.path = Path(path)
        self._on_error = on_error
        self.mode = "inline"
        self._fd: int | None = None            # inline mode: our own descriptor
        self._ring: mmap.mmap | None = None
        self._words: memoryview | None = None  # the whole ring as 8-byte words (sw.words): each stored whole
        self._pid: int | None = None
        self._pipe: int | None = None           # ours -> writer: its end of file ends the writer
        self._status: int | None = None         # writer -> ours: READY, then DONE after its last write
        self._err_path = Path(str(self.path) + ".writer-err")
        self._check_at = CHECK_EVERY            # the ring's count at which record() next checks the writer
        self._capacity = CAPACITY               # records the ring holds (also in its header)
        self._prev_ready: int | None = None     # inline mode's data-wait state
        self._lock = threading.RLock()          # reentrant: close() may run from a signal handler inside a write
        self._forked = False
        self._lost_said = False                 # records lost (the ring's LOST word) said once
        try:
            self._start_writer()
        except Exception as exc:
            self._report(RuntimeError(f"no step writer process ({type(exc).__name__}: {exc}); "
                                      "steps.jsonl is written on the training thread"))
            self._to_inline(drain=False)
        _LIVE.add(self)

    # ------------------------------------------------------------------ set-up
    def _start_writer(self) -> None:
        if getattr(sys, "frozen", False) or not sys.executable:
            raise OSError("no Python interpreter to run it with")
        shm = _shm_dir()
        if shm is None:
            raise OSError("no writable shared-memory folder")
        size = sw.HEADER.size + self._capacity * sw.RECORD.size
        ring_fd, name = tempfile.mkstemp(prefix="wb-steps-", dir=shm)
        os.unlink(name)                         # only the two processes' descriptors keep it: nothing to leak
        pipe_r = pipe_w = status_r = status_w = -1
        try:
            os.ftruncate(ring_fd, size)
            ring = mmap.mmap(ring_fd, size)
            sw.HEADER.pack_into(ring, 0, sw.MAGIC, 0, 0, self._capacity, sw.NO_STEP, 0)
            pipe_r, pipe_w = os.pipe()
            status_r, status_w = os.pipe()
            script = os.path.abspath(sw.__file__)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", script, str(ring_fd), str(self.path), str(pipe_r), repr(float(POLL_S))],
                pass_fds=(ring_fd, pipe_r), stdin=subprocess.DEVNULL, stdout=status_w,
                stderr=subprocess.DEVNULL, start_new_session=True)
            proc.returncode = 0                 # reaped here with waitpid, never by Popen (no lock a signal can hold)
        except Exception:
            for fd in (pipe_w, status_r):
                if fd >= 0:
                    with_close(fd)
            raise
        finally:
            for fd in (ring_fd, pipe_r, status_w):
                if fd >= 0:
                    with_close(fd)
        self._pid, self._pipe, self._status = proc.pid, pipe_w, status_r
        os.set_inheritable(pipe_w, False)
        if self._read_status(START_WAIT_S) != sw.READY:
            ring.close()
            self._stop_writer()
            raise OSError("it did not start" + self._err_detail())
        self._ring, self._words = ring, sw.words(ring)
        self.mode = "process"

    def _read_status(self, timeout_s: float) -> bytes:
        """The writer's next status byte, b"" at its end of file or when none came within ``timeout_s``."""
        if self._status is None:
            return b""
        try:
            ready, _, _ = select.select([self._status], [], [], timeout_s)
            return os.read(self._status, 1) if ready else b""
        except OSError:
            return b""

    # ------------------------------------------------------------------ hot path
    def record(self, step: int, start_ns: int, end_ns: int, ready_ns: int, flags: int) -> None:
        """One step (or, with ``flags`` DEVICE, a CUDA step time in ``start_ns``)."""
        try:
            w = self._words
            if w is None:
                if not self._forked:
                    self._write_inline([(step, start_ns, end_ns, ready_ns, flags)])
                return
            n = w[_WRITTEN]                   # the count is the ring's: the collector's step context stores too
            i = _FIRST_WORD + (n % self._capacity) * _RECORD_WORDS   # five word stores: see step_writer.words
            w[i] = step
            w[i + 1] = start_ns
            w[i + 2] = end_ns
            w[i + 3] = ready_ns
            w[i + 4] = flags
            w[_WRITTEN] = n = n + 1           # after the record it counts (see step_writer: store order)
            if n >= self._check_at:
                self._check_at = n + CHECK_EVERY
                self._check()
        except Exception as exc:               # e.g. a close() from a signal handler between two lines
            self._report(exc)

    def cursor(self) -> RingCursor | None:
        """Where the next record goes, for a caller that stores records into the ring itself (the collector's step
        context) until its next :meth:`record` call, after which it takes a new cursor; None when the lines are
        written here (or the ring was let go of meanwhile)."""
        w = self._words
        if w is None:
            return None
        try:
            n = w[_WRITTEN]
        except ValueError:                    # released by a close() from a signal handler
            return None
        return RingCursor(w, n, _FIRST_WORD + n % self._capacity * _RECORD_WORDS,
                          _FIRST_WORD + self._capacity * _RECORD_WORDS, max(0, self._check_at - 1 - n))

    def _check(self) -> None:
        """Every CHECK_EVERY records: a writer process that has ended is replaced by inline writing; records the
        writer has lost (it fell a ring behind) are said (and it is left running: writing inline would put a slow
        disk on the training thread)."""
        if self._pid is not None and self._exited():
            self._report(RuntimeError(self._writer_failure("ended early")))
            self._to_inline(drain=True)
            return
        if self._words is not None:
            self._say_lost(self._words[sw.LOST])

    def _say_lost(self, lost: int) -> None:
        """Say, the first time, that ``lost`` records (the total so far, as on disk) were lost."""
        if lost > 0 and not self._lost_said:
            self._lost_said = True
            self._report(StepRecordsLost(
                f"{lost} records lost so far: the step writer process fell more than its ring ({self._capacity} records) "
                "behind the training loop; steps.jsonl has a lost_records line where each gap is"))

    def _exited(self) -> bool:
        """The writer process has ended (reaped here; where children are reaped elsewhere: its status pipe is
        closed)."""
        try:
            pid, _ = os.waitpid(self._pid, os.WNOHANG)  # type: ignore[arg-type]
            if pid:
                self._pid = None
                return True
            return False
        except ChildProcessError:
            ready, _, _ = select.select([self._status], [], [], 0) if self._status is not None else ([], 0, 0)
            return bool(ready)

    def _err_detail(self) -> str:
        """``: <the writer's error line>`` from ``steps.jsonl.writer-err``, or nothing."""
        try:
            lines = self._err_path.read_text(errors="replace").strip().splitlines()
            return f": {lines[-1]}" if lines else ""
        except OSError:
            return ""

    def _writer_failure(self, what: str) -> str:
        return (f"the step writer process {what}{self._err_detail()}; steps.jsonl is written on the training "
                "thread from here")

    def _stop_writer(self, *, kill: bool = True) -> None:
        """End the writer process for good (killed unless it is ending by itself), and reap it without waiting
        long."""
        if self._pipe is not None:
            with_close(self._pipe)
            self._pipe = None
        if self._pid is not None:
            if kill:
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except OSError:
                    pass
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(self._pid, os.WNOHANG)[0]:
                        break
                except ChildProcessError:
                    break
                time.sleep(0.01)
            self._pid = None
        if self._status is not None:
            with_close(self._status)
            self._status = None

    def _forget_in_child(self) -> None:
        for fd in (self._pipe, self._status):
            if fd is not None:
                with_close(fd)
        self._pipe = self._status = self._pid = None
        self._ring = self._words = None
        self._forked = True

    def _let_go_of_ring(self) -> mmap.mmap | None:
        """The ring, no longer recorded into and with its header view released (so it can be closed)."""
        words, self._words = self._words, None   # first: record() writes inline from here
        ring, self._ring = self._ring, None
        if words is not None:
            words.release()
        return ring

    # ------------------------------------------------------------------ inline mode (fallback)
    def _to_inline(self, *, drain: bool) -> None:
        """Write from this process from now on (the rest of the ring first, when the writer is gone)."""
        ring = self._let_go_of_ring()
        self._stop_writer()
        self.mode = "inline"
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self._report(exc)
        if ring is not None:
            if drain:
                reader = sw.RingReader(ring)
                try:
                    data, _ = reader.take(reader.written())
                finally:
                    reader.close()
                if data and self._ends_cut():
                    data = b"\n" + data        # a line the writer left cut stays one bad line, not two
                self._write(data)
                # the drain is the collector's work: the next data wait starts after it
                self._prev_ready = time.time_ns() if reader.prev_ready is not None else None
                self._say_lost(reader.lost)
            ring.close()

    def _ends_cut(self) -> bool:
        try:
            with open(self.path, "rb") as f:
                f.seek(0, os.SEEK_END)
                if f.tell() == 0:
                    return False
                f.seek(-1, os.SEEK_END)
                return f.read(1) != b"\n"
        except OSError:
            return False

    def _write_inline(self, records: list[tuple[int, int, int, int, int]]) -> None:
        with self._lock:
            data, self._prev_ready = sw.format_records(records, self._prev_ready)
            self._write(data)
            if any(not flags & sw.DEVICE for *_, flags in records):
                self._prev_ready = time.time_ns()   # writing the line is the collector's work, not data loading

    def _write(self, data: bytes) -> None:
        if self._fd is None or not data:
            return
        try:
            sw.write_all(self._fd, data)
        except Exception as exc:           # full disk, closed file system, ...
            with_close(self._fd)
            self._fd = None
            self._report(exc)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Everything recorded is on disk when this returns (the writer is told to finish and waited for)."""
        try:
            self._finish_writer()
        except Exception as exc:
            self._report(exc)
        if self._fd is not None:
            with_close(self._fd)
            self._fd = None
        _LIVE.discard(self)

    def write_inline(self) -> None:
        """From now on write each record on the calling thread (the fallback; the bench's ``sync_write`` arm)."""
        self._finish_writer()
        if self._fd is None:
            self._to_inline(drain=False)

    def _finish_writer(self) -> None:
        """Tell the writer process to write the rest and end, and wait for its DONE (none: drain the ring here)."""
        if self._ring is None:
            return
        if self._pipe is not None:
            with_close(self._pipe)          # end of file: the writer writes the rest and ends
            self._pipe = None
        deadline = time.monotonic() + CLOSE_WAIT_S
        status = b""
        while time.monotonic() < deadline:
            status = self._read_status(max(0.0, deadline - time.monotonic()))
            if status in (sw.DONE, b""):
                break
        if status == sw.DONE:
            self._say_lost(self._words[sw.LOST] if self._words is not None else 0)
            self._let_go_of_ring().close()  # type: ignore[union-attr]
            self._stop_writer(kill=False)   # it is ending by itself: reap it
            return
        self._report(RuntimeError(self._writer_failure("did not finish")))
        self._to_inline(drain=True)

    def _report(self, exc: BaseException) -> None:
        try:
            self._on_error(exc)
        except Exception:
            pass


def with_close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
