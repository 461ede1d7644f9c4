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

RUN_JSON = "run.json"
RANK_DIR = "rank{rank}"
FINGERPRINT = "rank{rank}/fingerprint.json"
STEPS_JSONL = "rank{rank}/steps.jsonl"
TRACE_DIR = "rank{rank}/trace"
COMPILE_DIR = "rank{rank}/compile"
CACHE_DIR = ".workbench"
COMPILE_CONFIG_FILE = "compile_config.toml"   # written by the app's "Apply" inside a run directory

RANK_DIR_RE = re.compile(r"^rank(\d+)$")


def is_run_dir(path: Path) -> bool:
    """True when ``path`` looks like a run directory (``run.json`` or ``rank<R>/`` folders)."""
    if not path.is_dir():
        return False
    if (path / RUN_JSON).is_file():
        return True
    return any(RANK_DIR_RE.match(p.name) and p.is_dir() for p in path.iterdir())


def rank_dirs(path: Path) -> dict[int, Path]:
    """``rank<R>`` sub-folders of a run directory by rank."""
    found = {}
    for p in path.iterdir():
        m = RANK_DIR_RE.match(p.name)
        if m and p.is_dir():
            found[int(m.group(1))] = p
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


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object; raises :class:`~workbench.errors.TraceError` naming the file if it is not one."""
    from workbench.errors import TraceError

    try:
        obj = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise TraceError(path, "expected a JSON object")
    return obj


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of ``path`` and the number of lines that were unreadable (e.g. cut by a kill)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    for line in path.read_bytes().splitlines():
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
