"""The process that writes ``steps.jsonl`` for a training process (standard library only; also imported by it).

The training process puts one fixed-size record per step into a ring in shared memory (:mod:`step_log`); this
process, started by the collector with ``python -I -S step_writer.py RING_FD STEPS_JSONL PIPE_FD [POLL_S]``, reads the
ring every :data:`POLL_S` seconds and appends the records as JSON lines. It ends when the pipe from the training
process reports end of file (a normal close, or the training process's death, SIGKILL included) after writing every
record still in the ring, so a killed or aborted rank's finished steps are all on disk. It runs in a session of its
own and ignores SIGINT, SIGTERM and SIGHUP, so a signal meant for the rank does not end it before it has written them.
On its stdout it tells the training process :data:`READY` once it has the ring and the file, and :data:`DONE` after
its last write; on an error it writes the error's line to ``<steps>.writer-err`` beside the file and exits 1.

Ring layout (native byte order, aligned 8-byte words): a header of 6 words (magic, records written by the training
process, records written out, capacity, the step of the last step record written out or :data:`NO_STEP`, records
lost so far and said so on disk), then
``capacity`` records of :data:`RECORD` (step, start_ns, end_ns, ready_ns, flags). ``flags``: :data:`PROFILED`,
:data:`INTERRUPTED`, or :data:`DEVICE` (a CUDA step time: ``start_ns`` holds ``device_ns``). While the training
process runs, only records already counted at the previous poll are read, so a record is never read while it is
being written; lines therefore reach the file within two polls. The counters change by one 8-byte store each
(:func:`words`), so neither process ever reads one half-written (one aligned 8-byte store, as CPython copies it, and
x86-64's store order: a record is stored before the count that covers it; other architectures are not checked).
A loop that records more than ``capacity`` steps in
two polls (faster than ~15 µs a step), or a writer stalled that long (a hung file system), outruns the ring: the
records overwritten before they were read (or while they were read) are not written, and one line in their place
says how many, ``{"lost_records": N, "lost_after_step": S}`` (no ``step`` key; ``lost_after_step``: the last step
written out before the gap, absent when none was); ``N`` counts records, of steps and of CUDA step times. The
training process reads the lost total from the header and says it once (``collector.errors``).
"""

from __future__ import annotations

import json
import mmap
import os
import select
import signal
import struct
import sys

MAGIC = 0x5742_5354_4550_5333          # "WBSTEPS3"
HEADER = struct.Struct("=4Qqq")
RECORD = struct.Struct("=5q")
#: Header offsets of the two counters, the last step written out and the records lost so far (on disk).
WRITTEN_AT, READ_AT, LAST_STEP_AT, LOST_AT = 8, 16, 32, 40
WRITTEN, READ, LAST_STEP, LOST = WRITTEN_AT // 8, READ_AT // 8, LAST_STEP_AT // 8, LOST_AT // 8  # indexes in words()
#: ``LAST_STEP_AT`` before any step record is written out.
NO_STEP = -(1 << 63)
PROFILED, INTERRUPTED, DEVICE = 1, 2, 4
READY, DONE = b"R", b"D"
#: Seconds between two reads of the ring.
POLL_S = 0.5


#: A record's first word in :func:`words`, record ``i`` of the ring at ``FIRST_WORD + (i % capacity) * RECORD_WORDS``.
FIRST_WORD, RECORD_WORDS = HEADER.size // 8, RECORD.size // 8


def words(ring: mmap.mmap) -> memoryview:
    """The whole ring (header, then records) as 8-byte words: a counter that another process reads while it
    changes is one aligned 8-byte store (``struct.pack_into`` zeroes the bytes first, and a reader in between sees
    0), and a record is five such stores (the training thread's cheapest write: no ``struct`` code, which after a
    training step is cold in the CPU's caches and costs ~13 µs). Release it before the ring is closed."""
    return memoryview(ring).cast("q")


def format_records(records: list[tuple[int, int, int, int, int]],
                   prev_ready: int | None) -> tuple[bytes, int | None]:
    """``steps.jsonl`` lines for records, and the ``ready_ns`` of the last step record (the next data wait starts
    there: the collector's own work after a step is not data loading)."""
    out = []
    for step, start, end, ready, flags in records:
        if flags & DEVICE:
            out.append(json.dumps({"step": step, "device_ns": start}, separators=(",", ":")))
            continue
        row: dict[str, object] = {"step": step, "start_ns": start, "end_ns": end}
        if prev_ready is not None:
            row["data_wait_ns"] = max(0, start - prev_ready)
        row["profiled"] = bool(flags & PROFILED)
        if flags & INTERRUPTED:
            row["interrupted"] = True
        prev_ready = ready
        out.append(json.dumps(row, separators=(",", ":")))
    return ("\n".join(out) + "\n").encode() if out else b"", prev_ready


class RingReader:
    """Reads records out of the ring, from the last one written out (by whoever wrote them)."""

    def __init__(self, ring: mmap.mmap, prev_ready: int | None = None) -> None:
        self.ring = ring
        magic, _, _, self.capacity, last, lost = HEADER.unpack_from(ring, 0)
        if magic != MAGIC:
            raise ValueError("not a step ring")
        self.prev_ready = prev_ready
        self.last_step = None if last == NO_STEP else last   # of the records taken so far
        self.lost = lost                                     # records lost so far, of those taken
        self._words = words(ring)

    def close(self) -> None:
        """Let go of the ring (it can be closed then)."""
        self._words.release()

    def written(self) -> int:
        return self._words[WRITTEN]

    def read(self) -> int:
        return self._words[READ]

    def take(self, upto: int) -> tuple[bytes, int]:
        """Lines for the records from the last one written out up to ``upto`` (exclusive), led by a
        ``lost_records`` line where records were overwritten before they could be read, and the count to
        :meth:`mark` once they are on disk."""
        done = self.read()
        start = max(done, upto - self.capacity)
        records = [RECORD.unpack_from(self.ring, HEADER.size + (i % self.capacity) * RECORD.size)
                   for i in range(start, upto)]
        # Record i shares its slot with record i + capacity, which the training process starts writing once it has
        # counted i + capacity records: a record read while that count was reached may be torn.
        first = min(upto, max(start, self.written() - self.capacity + 1))
        records = records[first - start:]
        lost = first - done
        head = b""
        if lost > 0:
            self.lost += lost
            gap: dict[str, int] = {"lost_records": lost}
            if self.last_step is not None:
                gap["lost_after_step"] = self.last_step
            head = (json.dumps(gap, separators=(",", ":")) + "\n").encode()
            self.prev_ready = None              # the first step after the gap has no known data wait
        data, self.prev_ready = format_records(records, self.prev_ready)
        for step, _, _, _, flags in reversed(records):
            if not flags & DEVICE:
                self.last_step = step
                break
        return head + data, max(upto, done)

    def mark(self, count: int) -> None:
        """Records up to ``count`` are on disk (the last step and the lost total first: a kill between the stores
        repeats lines, and then may count a lost gap twice, but never misplaces one)."""
        self._words[LAST_STEP] = NO_STEP if self.last_step is None else self.last_step
        self._words[LOST] = self.lost
        self._words[READ] = count


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def run(ring_fd: int, steps_path: str, pipe_fd: int, poll_s: float = POLL_S) -> None:
    ring = mmap.mmap(ring_fd, 0)
    os.close(ring_fd)
    reader = RingReader(ring)
    fd = os.open(steps_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(1, READY)
    seen = reader.read()
    while True:
        ready, _, _ = select.select([pipe_fd], [], [], poll_s)
        final = bool(ready) and not os.read(pipe_fd, 1)  # end of file: closed, or the training process is gone
        written = reader.written()
        upto = written if final else min(written, seen)
        if upto > reader.read():
            data, count = reader.take(upto)
            write_all(fd, data)
            reader.mark(count)       # only once on disk: a writer killed mid-write loses nothing
        seen = written
        if final:
            os.close(fd)
            os.write(1, DONE)
            return


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)           # the pipe's end of file ends this process, nothing else
    try:
        run(int(argv[0]), argv[1], int(argv[2]), float(argv[3]) if len(argv) > 3 else POLL_S)
        return 0
    except BaseException as exc:
        try:
            with open(argv[1] + ".writer-err", "w") as err:
                err.write(f"{type(exc).__name__}: {exc}\n")
        except Exception:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
