"""What a path holds: Kineto trace files, TORCH_TRACE compile logs and run-directory files.

Accepted inputs: a run directory (``run.json`` / ``rank<R>/``), a folder of per-rank Kineto traces
(``tensorboard_trace_handler`` output, HTA-style ``rank-N.json.gz``), one trace file, a folder of
``dedicated_log_torch_trace*.log`` files, or one such log.

Example:
    >>> sources = discover("runs/exp1")           # doctest: +SKIP
    >>> [t.path.name for t in sources.traces]      # doctest: +SKIP
"""

from __future__ import annotations

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


def is_compile_log(path: Path) -> bool:
    """A TORCH_TRACE structured log (``dedicated_log_torch_trace*.log`` or a collector's ``compile/*.log``)."""
    return path.suffix == ".log" and (path.name.startswith("dedicated_log_torch_trace") or path.parent.name == "compile")


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for p in sorted(root.iterdir()):
        if p.name in _IGNORED_DIRS or p.name.startswith("."):
            continue
        if p.is_dir():
            out.extend(_walk(p))
        else:
            out.append(p)
    return out


def discover(path: str | Path) -> Sources:
    """The sources under ``path``; :class:`InputError` if there is nothing the workbench can read."""
    root = Path(path)
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    if root.is_file():
        src = Sources(root=root)
        if is_compile_log(root) or root.suffix == ".log":
            src.compile_logs.append((root, None))
        else:
            src.traces.append(TraceSource(root))
        return src
    if rundir.is_run_dir(root):
        return _discover_run_dir(root)
    src = Sources(root=root)
    for p in _walk(root):
        if is_trace_file(p):
            src.traces.append(TraceSource(p))
        elif is_compile_log(p):
            src.compile_logs.append((p, None))
    if not src.traces and not src.compile_logs:
        raise InputError(
            f"{root}: no Kineto traces (*.json, *.json.gz) or TORCH_TRACE logs (dedicated_log_torch_trace*.log) found"
        )
    return src


def _discover_run_dir(root: Path) -> Sources:
    src = Sources(root=root, is_run_dir=True)
    if (root / rundir.RUN_JSON).is_file():
        src.run_json = root / rundir.RUN_JSON
    for rank, rdir in rundir.rank_dirs(root).items():
        for p in _walk(rdir):
            if is_trace_file(p):
                src.traces.append(TraceSource(p, rank))
            elif p.suffix == ".log":
                src.compile_logs.append((p, rank))
        steps = root / rundir.STEPS_JSONL.format(rank=rank)
        if steps.is_file():
            src.steps_files[rank] = steps
        fp = root / rundir.FINGERPRINT.format(rank=rank)
        if fp.is_file():
            src.fingerprint_files[rank] = fp
    return src
