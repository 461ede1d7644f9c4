"""The runs the app serves: found once under the roots it was started with, opened lazily, cached in-process.

The browser only ever sends a run *id* (a short name listed here); paths never come from the browser, and a run
whose real path (links resolved) leaves the roots is neither listed nor opened nor written to (a linked folder
pointing elsewhere is one line in :attr:`RunStore.notes`), so the app reads nothing outside its roots. Opening a
run is the slow part, so opened runs and analysis results are cached for the life of the server process. A run
that fails to open is cached as its error, shown in an error panel, and never takes the rest of the app down.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from workbench import rundir
from workbench.errors import InputError, TraceError, one_line
from workbench.regular_file import read_regular

_TRACE_SUFFIXES = (".json", ".json.gz", ".log", ".log.gz")
_SKIP_NAMES = {rundir.CACHE_DIR, "__pycache__", ".git"}


class RunUnavailable(Exception):
    """A run that could not be opened (the message says why, naming the file where it can)."""


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run the app can show: its id (what URLs carry), a label and the path (server side only)."""

    id: str
    path: Path
    label: str
    is_run_dir: bool


def _has_inputs(path: Path, depth: int = 3) -> bool:
    """True if ``path`` holds a trace or compile log within ``depth`` folder levels (cheap look, no parsing)."""
    if path.is_file():
        return path.name.endswith(_TRACE_SUFFIXES)
    if depth < 0:
        return False
    try:
        children = sorted(path.iterdir())
    except OSError:
        return False
    for p in children:
        if p.name in _SKIP_NAMES or p.name.startswith("."):
            continue
        if p.is_file() and p.name.endswith(_TRACE_SUFFIXES) and p.name not in (rundir.RUN_JSON, "fingerprint.json"):
            return True
    return any(p.is_dir() and p.name not in _SKIP_NAMES and not p.name.startswith(".") and _has_inputs(p, depth - 1)
               for p in children)


def _direct_inputs(path: Path) -> bool:
    return any(p.is_file() and p.name.endswith(_TRACE_SUFFIXES) and not p.name.startswith(".") for p in path.iterdir())


def inside(path: str | Path, roots: Iterable[Path]) -> bool:
    """``path``'s real path (every link resolved) is one of ``roots`` (real paths) or below one."""
    real = Path(os.path.realpath(path))
    return any(real == r or real.is_relative_to(r) for r in roots)


def find_runs(roots: Iterable[str | Path], *, depth: int = 3,
              notes: list[str] | None = None) -> list[RunEntry]:
    """The runs under ``roots``: each root that is a run itself, else the folders below it that are runs.

    A path is one run when it is a file, a run directory, or a folder with trace files directly in it; otherwise
    its sub-folders are searched (``depth`` levels, sorted by name). A root that does not exist is listed too, so
    it shows as a broken run. A folder whose real path leaves the roots (a link to elsewhere) is not listed: one
    line in ``notes``.
    """
    found: list[tuple[str, Path, bool]] = []
    real_roots = [Path(os.path.realpath(r)) for r in roots]

    def collect(path: Path, label: str, left: int) -> None:
        if path.is_file() or rundir.is_run_dir(path) or _direct_inputs(path):
            found.append((label, path, path.is_dir() and rundir.is_run_dir(path)))
            return
        if left <= 0:
            return
        for child in sorted(path.iterdir()):
            if child.name in _SKIP_NAMES or child.name.startswith("."):
                continue
            if not inside(child, real_roots):
                if notes is not None and child.is_dir():
                    notes.append(f"{child}: not listed: a link to {os.path.realpath(child)}, outside the folders "
                                 "the app serves")
                continue
            if child.is_dir() and (rundir.is_run_dir(child) or _has_inputs(child)):
                collect(child, f"{label}/{child.name}" if label else child.name, left - 1)

    for root in real_roots:
        if not root.exists():
            found.append((root.name or str(root), root, False))
            continue
        if root.is_file() or rundir.is_run_dir(root) or _direct_inputs(root):
            found.append((root.name, root, root.is_dir() and rundir.is_run_dir(root)))
        else:
            collect(root, "", depth)
    entries: list[RunEntry] = []
    used: set[str] = set()
    for label, path, is_run in found:
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-") or "run"
        rid, n = base, 2
        while rid in used:
            rid, n = f"{base}-{n}", n + 1
        used.add(rid)
        entries.append(RunEntry(id=rid, path=path, label=label, is_run_dir=is_run))
    return entries


def _records_gpu(entry: RunEntry) -> bool:
    """True when a rank's ``fingerprint.json`` of a run directory names a CUDA device (a cheap look, no parsing
    of traces; a file that is not a regular file under 1 MiB is not looked at)."""
    if not entry.is_run_dir:
        return False
    for fp in sorted(entry.path.glob("rank*/fingerprint.json"))[:2]:
        try:
            data = orjson.loads(read_regular(fp, 1 << 20, what="fingerprint.json").data)
        except (TraceError, orjson.JSONDecodeError):
            continue
        device = data.get("device") if isinstance(data, dict) else None
        if isinstance(device, dict) and device.get("name") and data.get("cuda"):
            return True
    return False


@dataclass(slots=True)
class _Slot:
    lock: threading.Lock = field(default_factory=threading.Lock)
    value: Any = None
    error: BaseException | None = None
    done: bool = False
    seconds: float = 0.0


class RunStore:
    """Runs by id, opened on first use and cached with every analysis result computed from them."""

    #: At most this many runs stay open (with their cached analyses); the least recently used is dropped first.
    MAX_OPEN_RUNS = 12

    def __init__(self, roots: Iterable[str | Path], *, opener: Callable[[Path], Any] | None = None,
                 max_open_runs: int | None = None):
        self.max_open_runs = max_open_runs or self.MAX_OPEN_RUNS
        self._recent: list[str] = []
        self._pinned: set[str] = set()
        self.roots = [Path(r).resolve() for r in roots]
        #: What listing the roots left out, one line each (a linked folder leading outside them).
        self.notes: list[str] = []
        self.entries = find_runs(self.roots, notes=self.notes)
        self._by_id = {e.id: e for e in self.entries}
        self._opener = opener
        self._slots: dict[tuple[str, str], _Slot] = {}
        self._headlines: dict[str, _Slot] = {}
        self._default: str | None = None
        self._local = threading.local()
        self._guard = threading.Lock()

    @classmethod
    def preloaded(cls, runs: dict[str, Any]) -> RunStore:
        """A store over runs already opened (notebooks, tests, benchmarks): ``{id: Run}``; nothing is read."""
        store = cls([])
        store.entries = [RunEntry(id=k, path=Path(getattr(r, "path", k)), label=k, is_run_dir=False)
                         for k, r in runs.items()]
        store._by_id = {e.id: e for e in store.entries}
        for k, r in runs.items():
            slot = _Slot(value=r, done=True)
            store._slots[(k, "__run__")] = slot
        store._pinned = set(runs)
        return store

    # -- runs --------------------------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    def default_id(self) -> str | None:
        """The run the app lands on: of the runs that recorded a GPU (by their fingerprints), the one with the most
        ranks (a distributed job is what the workbench is for), else the first run."""
        if not self.entries:
            return None
        if self._default is None or self._default not in self._by_id:
            gpu = [e for e in self.entries if _records_gpu(e)]
            best = max(gpu, key=lambda e: len(list(e.path.glob("rank*/fingerprint.json"))), default=None)
            self._default = best.id if best is not None else self.entries[0].id
        return self._default

    def entry(self, run_id: str | None) -> RunEntry | None:
        return self._by_id.get(run_id or "")

    def run(self, run_id: str):
        """The opened :class:`workbench.Run`; :class:`RunUnavailable` when the id is unknown or the run is broken."""
        entry = self.entry(run_id)
        if entry is None:
            raise RunUnavailable(f"no run {run_id!r}; runs: {', '.join(self.ids()) or 'none'}")
        self._touch(run_id)
        return self.cached(run_id, "__run__", lambda: self._open(entry))

    @contextmanager
    def in_background(self):
        """Runs opened inside this block (the run list's background analysis) do not count as used: they never
        push a run a page is showing out of the cache, and are closed again when more than
        :attr:`max_open_runs` are open."""
        self._local.background = True
        try:
            yield
        finally:
            self._local.background = False

    def release_if_unused(self, run_id: str) -> None:
        """Close ``run_id`` if no page used it and more than :attr:`max_open_runs` runs are open."""
        with self._guard:
            open_ids = {k[0] for k, s in self._slots.items() if k[1] == "__run__" and s.done}
            drop = run_id not in self._recent and run_id not in self._pinned and len(open_ids) > self.max_open_runs
        if drop:
            self.forget(run_id)

    def _touch(self, run_id: str) -> None:
        """Mark ``run_id`` used; close the least recently used runs beyond :attr:`max_open_runs`."""
        if getattr(self._local, "background", False):
            return
        with self._guard:
            if run_id in self._recent:
                self._recent.remove(run_id)
            self._recent.append(run_id)
            evict = [r for r in self._recent[:-self.max_open_runs] if r not in self._pinned]
            self._recent = [r for r in self._recent if r not in evict]
        for r in evict:
            self.forget(r)

    def real_path(self, run_id: str) -> Path:
        """The real path of a listed run, checked again now (a folder swapped for a link since listing is refused):
        :class:`RunUnavailable` when it is unknown or has left the roots."""
        entry = self.entry(run_id)
        if entry is None:
            raise RunUnavailable(f"no run {run_id!r}; runs: {', '.join(self.ids()) or 'none'}")
        if not inside(entry.path, self.roots):
            raise RunUnavailable(f"{entry.path}: its real path ({os.path.realpath(entry.path)}) is outside the "
                                 "folders the app serves: not opened")
        return Path(os.path.realpath(entry.path))

    def _open(self, entry: RunEntry):
        if self._opener is not None:
            return self._opener(entry.path)
        import workbench

        self.real_path(entry.id)
        try:
            return workbench.open(entry.path, on_error="skip")
        except InputError as exc:  # one clear line naming the file
            raise RunUnavailable(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 - an internal error: one line, never a class name
            raise RunUnavailable(one_line(f"{entry.path}: could not be read ({exc or 'an internal error'})")) \
                from exc

    def status(self, run_id: str) -> str:
        """``"not opened"``, ``"ok"`` or the error line: for the runs list, without opening anything."""
        slot = self._slots.get((run_id, "__run__"))
        if slot is None or not slot.done:
            return "not opened"
        return "ok" if slot.error is None else f"error: {slot.error}"

    def headline(self, run_id: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per run, kept for the life of the store (closing a run keeps its run-list line)."""
        with self._guard:
            slot = self._headlines.setdefault(run_id, _Slot())
        with slot.lock:
            if not slot.done:
                slot.value, slot.done = compute(), True
        return slot.value

    def headline_ready(self, run_id: str) -> Any | None:
        """The run-list line of ``run_id`` when it has been computed, else ``None`` (never computes)."""
        slot = self._headlines.get(run_id)
        return slot.value if slot is not None and slot.done else None

    # -- cache -------------------------------------------------------------------------------------------------
    def cached(self, run_id: str, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per (run, key), results and errors both cached; concurrent callers wait for one."""
        with self._guard:
            slot = self._slots.setdefault((run_id, key), _Slot())
        with slot.lock:
            if not slot.done:
                t = time.perf_counter()
                try:
                    slot.value = compute()
                except Exception as exc:  # noqa: BLE001 - shown in the page as an error panel
                    slot.error = exc
                slot.seconds = time.perf_counter() - t
                slot.done = True
        if slot.error is not None:
            raise slot.error
        return slot.value

    def forget(self, run_id: str, key: str | None = None) -> None:
        """Drop cached results of a run (one key, or all with ``key=None``)."""
        with self._guard:
            for k in [k for k in self._slots if k[0] == run_id and (key is None or k[1] == key)]:
                del self._slots[k]
