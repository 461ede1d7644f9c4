"""The run directory: names, path templates, atomic writes and readers.

The contract between the collectors (writers) and everything else (readers)::

    <run>/
      run.json                 written by rank 0
      rank<R>/fingerprint.json
      rank<R>/steps.jsonl      one JSON object per line, appended per step
      rank<R>/trace/*.json.gz  Kineto traces of the profiled windows
      rank<R>/compile/*.log    TORCH_TRACE structured log
      .workbench/              cached tables

Example:
    >>> RANK_DIR.format(rank=3)
    'rank3'
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import orjson

from workbench.regular_file import read_regular

RUN_JSON = "run.json"
RANK_DIR = "rank{rank}"
FINGERPRINT = "rank{rank}/fingerprint.json"
STEPS_JSONL = "rank{rank}/steps.jsonl"
TRACE_DIR = "rank{rank}/trace"
COMPILE_DIR = "rank{rank}/compile"
CACHE_DIR = ".workbench"
COMPILE_CONFIG_FILE = "compile_config.toml"   # written by the app's "Apply" inside a run directory

RANK_DIR_RE = re.compile(r"^rank(\d+)$")
#: Ranks are non-negative integers below this (they are stored as int32).
RANK_LIMIT = 1 << 31
#: The most bytes read from ``run.json``, ``fingerprint.json`` or ``steps.jsonl``.
MAX_JSON_BYTES = 256 << 20


def is_run_dir(path: Path) -> bool:
    """True when ``path`` looks like a run directory (``run.json`` or ``rank<R>/`` folders)."""
    if not path.is_dir():
        return False
    if (path / RUN_JSON).is_file():
        return True
    return any(RANK_DIR_RE.match(p.name) and p.is_dir() for p in path.iterdir())


def rank_dirs(path: Path, notes: list[str] | None = None) -> dict[int, Path]:
    """``rank<R>`` sub-folders of a run directory by rank.

    Two folders naming one rank (``rank0/`` and ``rank00/``) raise :class:`~workbench.errors.InputError` naming
    both; a folder whose number is not a rank (2**31 or more) is left out, with a line in ``notes`` when given.
    """
    from workbench.errors import InputError

    found: dict[int, Path] = {}
    for p in sorted(path.iterdir()):
        m = RANK_DIR_RE.match(p.name)
        if not (m and p.is_dir()):
            continue
        rank = int(m.group(1))
        if rank >= RANK_LIMIT:
            if notes is not None:
                notes.append(f"{p}: {p.name} names no rank (ranks are below 2**31): skipped")
            continue
        if rank in found:
            raise InputError(f"{found[rank]} and {p}: two folders claim rank {rank}; rename or remove one")
        found[rank] = p
    return dict(sorted(found.items()))


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file and a rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; run files are meant to be read by others
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON."""
    write_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str))


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one JSON line in a single ``write`` of a complete line (a reader sees whole lines or none)."""
    line = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def unforeseen(exc: BaseException) -> str:
    """The problem text for an error no check foresaw: its message on one line, never the exception's class name
    (that means nothing to a user; ``workbench --debug`` shows the traceback)."""
    from workbench.errors import one_line

    text = one_line(str(exc), 200) or "no message"
    return f"could not be read: an input this reader did not foresee ({text})"


def read_json(path: Path, max_bytes: int | None = None) -> dict[str, Any]:
    """Read a JSON object; raises :class:`~workbench.errors.TraceError` naming the file if it is not one
    (or not a regular file, or over ``max_bytes``, default :data:`MAX_JSON_BYTES`)."""
    from workbench.errors import TraceError

    data = read_regular(path, MAX_JSON_BYTES if max_bytes is None else max_bytes, what="JSON file").data
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise TraceError(path, "expected a JSON object")
    return obj


def read_jsonl(path: Path, max_bytes: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of ``path`` and the number of lines that were unreadable (e.g. cut by a kill).

    Only a regular file is read (else :class:`~workbench.errors.TraceError`), and only its first ``max_bytes``
    (default :data:`MAX_JSON_BYTES`); the part past them counts as one unreadable line.
    """
    limit = MAX_JSON_BYTES if max_bytes is None else max_bytes
    got = read_regular(path, limit, what="JSON-lines file", keep="head")
    data, was_cut = got.data, got.truncated
    if was_cut:
        data = data[: data.rfind(b"\n") + 1]
    rows, bad = parse_jsonl(data)
    return rows, bad + int(was_cut)


def parse_jsonl(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of ``data``, one a line, and the number of lines that were not one."""
    rows: list[dict[str, Any]] = []
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            bad += 1
    return rows, bad


#: When each profiler window's trace was exported (``collectors/profiling.py``), per rank.
TRACE_EXPORTS = "rank{rank}/trace/exports.jsonl"
#: The rank's garbage collections of 1 ms or more (``collectors/gc_pauses.py``).
GC_PAUSES = "rank{rank}/gc.jsonl"


def _ns_of(row: dict[str, Any], key: str) -> int | None:
    return int(row[key]) if isinstance(row.get(key), int) and row[key] >= 0 else None


def _span_lines(path: Path, template: str, extra: tuple[str, ...], problems: list[str] | None
                ) -> dict[int, list[tuple[int | None, ...]]]:
    """Per rank of the run directory ``path``: (start_ns, end_ns, *``extra``) of each line of the rank's
    ``template`` file that has integer ``start_ns <= end_ns`` (an ``extra`` field not a non-negative integer is
    None); an unreadable file, or the lines left out, one line each in ``problems``, the rest kept."""
    from workbench.errors import TraceError

    out: dict[int, list[tuple[int | None, ...]]] = {}
    for rank in rank_dirs(path):
        f = path / template.format(rank=rank)
        if not f.is_file():
            continue
        try:
            rows, bad = read_jsonl(f, 16 << 20)
        except TraceError as exc:
            if problems is not None:
                problems.append(str(exc))
            continue
        spans = [(r["start_ns"], r["end_ns"], *(_ns_of(r, k) for k in extra)) for r in rows
                 if isinstance(r.get("start_ns"), int) and isinstance(r.get("end_ns"), int)
                 and r["end_ns"] >= r["start_ns"]]
        if (bad or len(spans) < len(rows)) and problems is not None:
            problems.append(f"{f}: {bad + len(rows) - len(spans)} line(s) without start_ns/end_ns integers: "
                            "skipped")
        if spans:
            out[rank] = spans
    return out


def trace_exports(path: Path, problems: list[str] | None = None
                  ) -> dict[int, list[tuple[int, int, int | None, int | None]]]:
    """Per rank of the run directory ``path``: (start, end, CPU time holding the GIL, whole CPU time) ns of each
    background trace export (``collectors/profiling.py``; CPU times None when not recorded); an unreadable file or
    line is one line in ``problems`` and the rest is kept."""
    return _span_lines(path, TRACE_EXPORTS, ("gil_cpu_ns", "cpu_ns"), problems)  # type: ignore[return-value]


def gc_pauses(path: Path, problems: list[str] | None = None) -> dict[int, list[tuple[int, int, int | None]]]:
    """Per rank of the run directory ``path``: (start, end, generation) ns of each garbage collection the collector
    kept (``collectors/gc_pauses.py``; generation None when not recorded); an unreadable file or line is one line
    in ``problems`` and the rest is kept."""
    return _span_lines(path, GC_PAUSES, ("generation",), problems)  # type: ignore[return-value]
