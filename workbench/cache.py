"""Parquet cache of the tables read from each trace file.

Entries live under ``<input>/.workbench/`` (the input folder, or a single file's folder), or under the
user cache directory (``$XDG_CACHE_HOME/workbench`` or ``~/.cache/workbench``) when the input is
read-only. An entry is keyed by the file's path, size and mtime, the rank it was read as and
:data:`workbench.schema.SCHEMA_VERSION` and :data:`workbench.kineto.PARSER_VERSION`; any change makes a new
key, so stale tables are never read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import rundir, schema
from workbench.kineto import PARSER_VERSION, TraceTables

_TABLES = ("events", "kernels", "collectives", "steps", "skipped")
_SCHEMAS = {
    "events": schema.EVENTS, "kernels": schema.KERNELS, "collectives": schema.COLLECTIVES,
    "steps": schema.STEPS, "skipped": schema.SKIPPED,
}


def cache_root(input_path: Path) -> Path:
    """Where the cache for ``input_path`` lives: beside it if writable, else the user cache dir."""
    base = input_path if input_path.is_dir() else input_path.parent
    local = base / rundir.CACHE_DIR
    try:
        if not local.exists() and not base.stat().st_mode & 0o222:
            raise PermissionError("read-only input folder")  # honoured even for root
        local.mkdir(exist_ok=True)
        probe = local / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return local
    except OSError:
        user = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench"
        key = hashlib.sha1(str(base.resolve()).encode()).hexdigest()[:16]
        root = user / key
        root.mkdir(parents=True, exist_ok=True)
        return root


def entry_key(path: Path, rank: int | None) -> str:
    """Key of one trace file's entry: path, size, mtime, rank override, schema version."""
    st = path.stat()
    raw = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{rank}|{schema.SCHEMA_VERSION}|{PARSER_VERSION}"
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def load(root: Path, key: str) -> TraceTables | None:
    """The cached tables for ``key``, or None when absent or unreadable."""
    d = root / "kineto" / key
    meta_file = d / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        meta = orjson.loads(meta_file.read_bytes())
        frames = {t: schema.conform(pl.read_parquet(d / f"{t}.parquet"), _SCHEMAS[t]) for t in _TABLES}
    except Exception:  # a damaged entry is rebuilt, never trusted
        shutil.rmtree(d, ignore_errors=True)
        return None
    return TraceTables(path=meta["path"], rank=meta["rank"], rank_source=meta["rank_source"],
                       meta=meta["meta"], **frames)


def store(root: Path, key: str, tables: TraceTables) -> None:
    """Write an entry; a failure to write leaves no partial entry and is not an error."""
    final = root / "kineto" / key
    tmp = root / "kineto" / f".{key}.{os.getpid()}.tmp"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for t in _TABLES:
            getattr(tables, t).write_parquet(tmp / f"{t}.parquet", compression="lz4", statistics=False)
        meta: dict[str, Any] = {"path": tables.path, "rank": tables.rank, "rank_source": tables.rank_source,
                                "meta": tables.meta, "schema_version": schema.SCHEMA_VERSION}
        (tmp / "meta.json").write_bytes(orjson.dumps(meta, default=str))
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
