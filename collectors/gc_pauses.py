"""Python garbage collections long enough to make a rank late, on this rank's clock (``rank<R>/gc.jsonl``).

A collection runs on whatever thread allocated past the collector's threshold, holding the interpreter lock: a
long one (a big heap of Python objects walked by a full collection) stops the training thread, and a DDP hook's
completion callback waiting for the lock with it. The critical path names such a pause a ``gc`` activity instead of
untraced host time (docs/critical-path.md).

Cost: ``gc.callbacks`` calls :meth:`GcPauses._on_gc` at the start and the end of every collection (a dict built by
CPython and two clock reads, about a microsecond a collection; young collections run a few times a step);
only collections of :data:`MIN_PAUSE_NS` or more are kept, in memory, and written at close, or when
:data:`FLUSH_EVERY` are waiting. Never raises into the training loop.

Example:
    >>> pauses = GcPauses(Path("/tmp/run/rank0/gc.jsonl"))
    >>> pauses.start(); ...; pauses.close()
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Collections shorter than this are not kept (ns): below any lateness the critical path can tell from noise.
MIN_PAUSE_NS = 1_000_000
#: Kept pauses written to the file at once (one append) when this many are waiting.
FLUSH_EVERY = 256


class GcPauses:
    """Records this process's long garbage collections while started: one JSON line per pause, ``start_ns`` and
    ``end_ns`` (``time.time_ns``, the clock of ``steps.jsonl``), ``generation`` and ``collected``."""

    def __init__(self, path: Path, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.path = path
        self._on_error = on_error
        self._pid = os.getpid()
        self._t0 = 0
        self._kept: list[tuple[int, int, int, int]] = []
        self._now = time.time_ns

    def start(self) -> None:
        """Watch the collections from now on (idempotent)."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        try:
            if phase == "start":
                self._t0 = self._now()
                return
            t1 = self._now()
            if self._t0 and t1 - self._t0 >= MIN_PAUSE_NS and os.getpid() == self._pid:
                self._kept.append((self._t0, t1, int(info.get("generation", -1)), int(info.get("collected", 0))))
                if len(self._kept) >= FLUSH_EVERY:
                    self.flush()
            self._t0 = 0
        except Exception as exc:   # never into the training loop
            self._fail(exc)

    def flush(self) -> None:
        """Append the pauses kept so far to the file."""
        if not self._kept or os.getpid() != self._pid:
            return
        kept, self._kept = self._kept, []
        try:
            import orjson

            lines = b"".join(orjson.dumps({"start_ns": a, "end_ns": b, "generation": g, "collected": n}) + b"\n"
                             for a, b, g, n in kept)
            with open(self.path, "ab") as fh:
                fh.write(lines)
        except Exception as exc:
            self._fail(exc)

    def close(self) -> None:
        """Stop watching and write what is kept."""
        try:
            while self._on_gc in gc.callbacks:
                gc.callbacks.remove(self._on_gc)
        except Exception as exc:
            self._fail(exc)
        self.flush()

    def _fail(self, exc: BaseException) -> None:
        if self._on_error is not None:
            try:
                self._on_error(exc)
            except Exception:
                pass


def stop_in_forked_child() -> None:
    """A child forked from a watched process (a data loader's worker) does not watch: its collections are its own."""
    for cb in list(gc.callbacks):
        if isinstance(getattr(cb, "__self__", None), GcPauses):
            gc.callbacks.remove(cb)
            cb.__self__._kept = []


__all__ = ["FLUSH_EVERY", "MIN_PAUSE_NS", "GcPauses", "stop_in_forked_child"]
