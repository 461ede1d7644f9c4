"""``steps.jsonl`` without a system call on the training thread: one record per step into shared memory.

Per step the training thread packs one record into a ring in shared memory (:meth:`StepLog.record`: two
``struct.pack_into`` calls, no system call); a small process of its own (:mod:`step_writer`, standard library only,
started once at ``start()``) turns the records into JSON lines within :data:`~step_writer.POLL_S`. Why: on the H200
machine a step's ``os.write`` and ``orjson`` cost the training loop +93 µs a step (5.8 ms eager step), 15 times what
the same code costs alone, because it runs right after the step's own work has evicted the CPU caches; with the ring
the collector's step cost +12.5 µs (bench/README.md, "Collector overhead"). A thread would not do: a rank that is
killed or aborts would lose the lines it had not written, and those say where it died.

What is on disk when: a hung step does not stop the writer, so the steps before it are there within ``POLL_S``; a
rank killed with SIGKILL or aborted has all its finished steps there too (the writer sees the pipe close, writes the
rest of the ring and ends). Only a writer killed along with its rank (a whole job's processes killed at once) loses
the last ``POLL_S`` of lines.

Where no writer process can run (no shared-memory folder, a sandbox without ``fork``/``exec``), or when it dies,
the lines are written on the training thread at every step as before (``mode == "inline"``), and the reason is
reported through ``on_error``.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from workbench.collectors import step_writer as sw

#: Records the ring holds (at 40 bytes each); the writer reads them every POLL_S, so it never fills in practice.
CAPACITY = 1 << 16
#: Every this many records the training thread checks that the writer process is alive and keeping up.
CHECK_EVERY = 4096
#: At close, how long to wait for the writer process to write the rest.
CLOSE_WAIT_S = 10.0
_RECORDS_AT, _RECORD_SIZE = sw.HEADER.size, sw.RECORD.size


def _shm_dir() -> str | None:
    for d in ("/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(d) and os.access(d, os.W_OK):
            return d
    return None


class StepLog:
    """The writer of one rank's ``steps.jsonl``. Never raises after construction; errors go to ``on_error``."""

    def __init__(self, path: str | os.PathLike[str], on_error: Callable[[BaseException], None]) -> None:
        self.path = Path(path)
        self._on_error = on_error
        self.mode = "inline"
        self._fd: int | None = None            # inline mode: our own descriptor
        self._ring: mmap.mmap | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None
        self._err_path = self.path.with_name(f".{self.path.name}.writer-err")
        self._n = 0                             # records put into the ring
        self._prev_ready: int | None = None     # inline mode's data-wait state
        self._lock = threading.Lock()
        try:
            self._start_writer()
        except Exception as exc:
            self._report(RuntimeError(f"no step writer process ({type(exc).__name__}: {exc}); "
                                      "steps.jsonl is written on the training thread"))
            self._to_inline(drain=False)

    # ------------------------------------------------------------------ set-up
    def _start_writer(self) -> None:
        shm = _shm_dir()
        if shm is None:
            raise OSError("no writable shared-memory folder")
        size = sw.HEADER.size + CAPACITY * sw.RECORD.size
        fd, name = tempfile.mkstemp(prefix="wb-steps-", dir=shm)
        try:
            os.ftruncate(fd, size)
            ring = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        sw.HEADER.pack_into(ring, 0, sw.MAGIC, 0, 0, CAPACITY)
        read_end, write_end = os.pipe()
        try:
            with open(self._err_path, "wb") as err:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", sw.__file__, name, str(self.path), str(read_end)],
                    pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                    start_new_session=True)
        except Exception:
            os.close(write_end)
            ring.close()
            with_unlink(name)
            raise
        finally:
            os.close(read_end)
        os.set_inheritable(write_end, False)
        self._ring, self._pipe, self._ring_name = ring, write_end, name
        self.mode = "process"

    # ------------------------------------------------------------------ hot path
    def record(self, step: int, start_ns: int, end_ns: int, ready_ns: int, flags: int) -> None:
        """One step (or, with ``flags`` DEVICE, a CUDA step time in ``start_ns``)."""
        ring = self._ring
        if ring is None:
            self._write_inline([(step, start_ns, end_ns, ready_ns, flags)])
            return
        n = self._n
        sw.RECORD.pack_into(ring, _RECORDS_AT + (n % CAPACITY) * _RECORD_SIZE, step, start_ns, end_ns, ready_ns, flags)
        self._n = n = n + 1
        sw.COUNT.pack_into(ring, sw.WRITTEN_AT, n)
        if not n % CHECK_EVERY:
            self._check()

    def _check(self) -> None:
        """Every CHECK_EVERY records: the writer process is alive and not a ring behind."""
        assert self._ring is not None and self._proc is not None
        code = self._proc.poll()
        behind = self._n - sw.COUNT.unpack_from(self._ring, sw.READ_AT)[0]
        if code is None and behind < CAPACITY - CHECK_EVERY:
            return
        if code is None:
            self._proc.kill()
            self._proc.wait()
        self._report(RuntimeError(self._writer_failure(code, behind)))
        self._to_inline(drain=True)

    def _writer_failure(self, code: int | None, behind: int) -> str:
        detail = ""
        try:
            lines = self._err_path.read_text(errors="replace").strip().splitlines()
            detail = f": {lines[-1]}" if lines else ""
        except OSError:
            pass
        what = f"exited with {code}" if code is not None else f"fell {behind} records behind and was stopped"
        return f"the step writer process {what}{detail}; steps.jsonl is written on the training thread from here"

    # ------------------------------------------------------------------ inline mode (fallback)
    def _to_inline(self, *, drain: bool) -> None:
        """Write from this process from now on (the rest of the ring first, when the writer is gone)."""
        ring, self._ring = self._ring, None
        if self._pipe is not None:
            with_close(self._pipe)
            self._pipe = None
        self.mode = "inline"
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self._report(exc)
        if ring is not None:
            if drain:
                reader = sw.RingReader(ring)
                self._write(reader.take(self._n))
                self._prev_ready = reader.prev_ready
            ring.close()
        self._cleanup()

    def _write_inline(self, records: list[tuple[int, int, int, int, int]]) -> None:
        with self._lock:
            data, self._prev_ready = sw.format_records(records, self._prev_ready)
            self._write(data)

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
        self._finish_writer()
        if self._fd is not None:
            with_close(self._fd)
            self._fd = None
        self._cleanup()

    def write_inline(self) -> None:
        """From now on write each record on the calling thread (the fallback; the bench's ``sync_write`` arm)."""
        self._finish_writer()
        if self._fd is None:
            self._to_inline(drain=False)

    def _finish_writer(self) -> None:
        """Tell the writer process to write the rest and end, and wait for it (a failed one: drain the ring here)."""
        proc = self._proc
        if self._pipe is not None:
            with_close(self._pipe)          # end of file: the writer writes the rest and ends
            self._pipe = None
        if proc is not None and self._ring is not None:
            try:
                code = proc.wait(timeout=CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                self._report(RuntimeError(self._writer_failure(code, 0)))
                self._to_inline(drain=True)
        if self._ring is not None:
            self._ring.close()
            self._ring = None

    def _cleanup(self) -> None:
        name = getattr(self, "_ring_name", None)
        if name:
            with_unlink(name)
            self._ring_name = None
        try:
            if self._err_path.exists() and self._err_path.stat().st_size == 0:
                self._err_path.unlink()
        except OSError:
            pass

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


def with_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

