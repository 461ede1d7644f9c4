"""What a path holds: Kineto trace files, TORCH_TRACE compile logs and run-directory files.

Accepted inputs: a run directory (``run.json`` / ``rank<R>/``), a folder of per-rank Kineto traces
(``tensorboard_trace_handler`` output, HTA-style ``rank-N.json.gz``), one trace file, a folder of
TORCH_TRACE logs, or one such log. A TORCH_TRACE log is found by name (``dedicated_log_torch_trace*.log``, a
collector's ``compile/*.log``, either also as ``.log.gz``) or, whatever its name, by its first line (as tlparse
reads any file).

The walk is safe on hostile trees: it lists only regular files (never opens a FIFO, socket or device), follows a
linked folder only when it resolves inside the root and was not seen before, and skips a folder it cannot list,
with one line in :attr:`Sources.notes`.

Example:
    >>> sources = discover("runs/exp1")           # doctest: +SKIP
    >>> [t.path.name for t in sources.traces]      # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from workbench import rundir
from workbench.errors import InputError

TRACE_SUFFIXES = (".json", ".json.gz")
_IGNORED_DIRS = {rundir.CACHE_DIR, "__pycache__", ".git"}
_NOT_TRACES = {rundir.RUN_JSON, "fingerprint.json"}


@dataclass(slots=True)
class TraceSource:
    """One Kineto trace file and the rank its location fixes (run directories), if any."""

    path: Path
    rank: int | None = None


@dataclass(slots=True)
class Sources:
    """Everything found under an input path."""

    root: Path
    is_run_dir: bool = False
    traces: list[TraceSource] = field(default_factory=list)
    compile_logs: list[tuple[Path, int | None]] = field(default_factory=list)
    steps_files: dict[int, Path] = field(default_factory=dict)
    fingerprint_files: dict[int, Path] = field(default_factory=dict)
    run_json: Path | None = None
    notes: list[str] = field(default_factory=list)  # what the walk skipped and why, one line each

    def files(self) -> list[Path]:
        """Every source file (the cache is keyed on them)."""
        out = [t.path for t in self.traces] + [p for p, _ in self.compile_logs]
        out += list(self.steps_files.values()) + list(self.fingerprint_files.values())
        if self.run_json:
            out.append(self.run_json)
        return out


def is_trace_file(path: Path) -> bool:
    """A ``.json`` / ``.json.gz`` file that is not one of the run directory's own JSON files."""
    name = path.name
    return name.endswith(TRACE_SUFFIXES) and name not in _NOT_TRACES and not name.startswith(".")


#: The first line of a TORCH_TRACE log: ``V<MMDD hh:mm:ss.us> <tid> <file>:<line>] {json}`` (glog prefix).
_TORCH_TRACE_HEAD = re.compile(rb"^[VIWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\s\]]+:\d+\] \{")
_SNIFF_BYTES = 512
#: At most this many unnamed files are opened to sniff their first bytes (a huge tree stays cheap).
MAX_SNIFFED = 10_000


def is_log_name(path: Path) -> bool:
    """A ``.log`` or ``.log.gz`` file name."""
    return path.name.endswith((".log", ".log.gz"))


def is_compile_log(path: Path) -> bool:
    """A TORCH_TRACE structured log by name (``dedicated_log_torch_trace*.log`` or a collector's ``compile/*.log``;
    either gzip-compressed as ``.log.gz``)."""
    return is_log_name(path) and (path.name.startswith("dedicated_log_torch_trace") or path.parent.name == "compile")


def looks_like_compile_log(path: Path) -> bool:
    """True when the file's first bytes are a TORCH_TRACE line (read only :data:`_SNIFF_BYTES` bytes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in after the walk cannot block
    except OSError:
        return False
    try:
        head = os.read(fd, _SNIFF_BYTES) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return False
    finally:
        os.close(fd)
    return bool(_TORCH_TRACE_HEAD.match(head))


def _regular(path: Path, notes: list[str]) -> bool:
    """True for a regular file (a link counts when its target is one); a dangling link is kept so reading it
    reports the problem; FIFOs, sockets and devices are noted and left alone."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return path.is_symlink()
    except OSError as exc:
        notes.append(f"{path}: cannot stat ({exc.strerror or exc}): skipped")
        return False
    if stat.S_ISREG(st.st_mode):
        return True
    if not stat.S_ISDIR(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
        notes.append(f"{path}: {kind}, not a file: skipped")
    return False


def _walk(root: Path, notes: list[str]) -> list[Path]:
    """Regular files under ``root``, sorted; linked folders only inside ``root``, each folder once."""
    out: list[Path] = []
    try:
        top = root.resolve()
        seen = {(os.stat(top).st_dev, os.stat(top).st_ino)}
    except OSError as exc:
        notes.append(f"{root}: cannot list the folder ({exc.strerror or exc}): skipped")
        return out
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError as exc:
            notes.append(f"{folder}: cannot list the folder ({exc.strerror or exc}): skipped")
            continue
        subdirs: list[Path] = []
        for p in entries:
            if p.name in _IGNORED_DIRS or p.name.startswith("."):
                continue
            try:
                is_dir = p.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                if p.is_symlink():
                    target = p.resolve()
                    if target != top and top not in target.parents:
                        notes.append(f"{p}: a link to a folder outside {root} ({target}): not followed")
                        continue
                st = os.stat(p)
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue  # a link back to a folder already walked (a loop)
                seen.add(key)
                subdirs.append(p)
            elif _regular(p, notes):
                out.append(p)
        stack.extend(reversed(subdirs))
    return sorted(out)


def _classify(p: Path, src: Sources, sniffed: list[int], rank: int | None = None, any_log: bool = False) -> None:
    """Add ``p`` to ``src`` as a trace or a compile log when it is one."""
    if is_trace_file(p):
        src.traces.append(TraceSource(p, rank))
    elif is_compile_log(p) or (any_log and is_log_name(p)):
        src.compile_logs.append((p, rank))
    elif sniffed[0] < MAX_SNIFFED:
        sniffed[0] += 1
        if looks_like_compile_log(p):
            src.compile_logs.append((p, rank))


def discover(path: str | Path) -> Sources:
    """The sources under ``path``; :class:`InputError` if there is nothing the workbench can read."""
    root = Path(path)
    if not root.exists():
        if root.is_symlink():
            raise InputError(f"{root}: a link to something that does not exist")
        raise InputError(f"{root}: no such file or directory")
    notes: list[str] = []
    if not root.is_dir():
        if not _regular(root, notes):
            raise InputError(notes[0].removesuffix(": skipped") if notes else f"{root}: not a regular file")
        src = Sources(root=root)
        if is_log_name(root) or looks_like_compile_log(root):
            src.compile_logs.append((root, None))
        else:
            src.traces.append(TraceSource(root))
        return src
    try:
        run_dir = rundir.is_run_dir(root)
    except OSError as exc:
        raise InputError(f"{root}: cannot list the folder ({exc.strerror or exc})") from None
    if run_dir:
        return _discover_run_dir(root)
    src = Sources(root=root, notes=notes)
    sniffed = [0]
    for p in _walk(root, notes):
        _classify(p, src, sniffed)
    if not src.traces and not src.compile_logs:
        extra = f" ({notes[0]}{' …' if len(notes) > 1 else ''})" if notes else ""
        raise InputError(
            f"{root}: no Kineto traces (*.json, *.json.gz) or TORCH_TRACE logs found{extra}"
        )
    return src


def _discover_run_dir(root: Path) -> Sources:
    src = Sources(root=root, is_run_dir=True)
    run_json = root / rundir.RUN_JSON
    if run_json.is_dir():
        src.notes.append(f"{run_json}: a folder, not a file: skipped")
    elif os.path.lexists(run_json) and _regular(run_json, src.notes):   # a FIFO or a device: one note
        src.run_json = run_json
    sniffed = [0]
    top = root.resolve()
    for rank, rdir in rundir.rank_dirs(root, src.notes).items():
        target = rdir.resolve()
        if rdir.is_symlink() and top not in target.parents:
            src.notes.append(f"{rdir}: a link to a folder outside {root} ({target}): not followed")
            continue
        for p in _walk(rdir, src.notes):
            _classify(p, src, sniffed, rank, any_log=True)
        steps = root / rundir.STEPS_JSONL.format(rank=rank)
        if steps.is_file():
            src.steps_files[rank] = steps
        fp = root / rundir.FINGERPRINT.format(rank=rank)
        if fp.is_file():
            src.fingerprint_files[rank] = fp
    return src
