"""Parquet cache of the tables read from each trace file.

Entries live under ``<input>/.workbench/`` (the input folder, or a single file's folder), or under the
user cache directory (``$XDG_CACHE_HOME/workbench`` or ``~/.cache/workbench``) when the input is
read-only; when neither can be written the run is read uncached (:func:`cache_root` says why).

An entry is keyed by the file's path, size, mtime, ctime and inode, a content fingerprint
(:func:`content_fingerprint`), the rank it was read as, :data:`workbench.schema.SCHEMA_VERSION` and
:data:`workbench.kineto.PARSER_VERSION`; any change makes a new key, so stale tables are never read.

One entry is a folder ``kineto/<key>/`` with one parquet file per table and ``meta.json`` (what the file
says about its rank, plus the per-rank counts :func:`workbench.lazy.part_stats` computes), so a
:class:`workbench.lazy.RankPart` can be built from it without reading the events.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import rundir, schema
from workbench.errors import TraceError
from workbench.kineto import PARSER_VERSION, TraceTables

_TABLES = ("events", "kernels", "collectives", "steps", "skipped")
#: Tables small enough to hold for every rank at once; the others stay in the entry's parquet files.
SMALL_TABLES = ("collectives", "steps", "skipped")
BIG_TABLES = ("events", "kernels")
_SCHEMAS = {
    "events": schema.EVENTS, "kernels": schema.KERNELS, "collectives": schema.COLLECTIVES,
    "steps": schema.STEPS, "skipped": schema.SKIPPED,
}
ENTRY_VERSION = 2  # bump when the entry layout or meta.json changes

_WHOLE_FILE = 1 << 20     # files up to this size are hashed whole
_EDGE = 64 << 10          # else: the first and last 64 KiB ...
_SAMPLES = 32             # ... and this many 4 KiB blocks spread evenly between them
_BLOCK = 4 << 10


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/workbench`` or ``~/.cache/workbench``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench"


def _writable(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    probe = d / f".probe-{os.getpid()}"
    probe.write_bytes(b"")
    probe.unlink()


def cache_root(input_path: Path) -> Path:
    """Where the cache for ``input_path`` lives: beside it if writable, else the user cache dir.

    Raises :class:`OSError` naming both places when neither can be written.
    """
    root, problem = find_cache_root(input_path)
    if root is None:
        raise OSError(problem)
    return root


def _link_leaving(base: Path, local: Path) -> str:
    """The real path of ``local`` (or of its ``kineto/`` folder) when a link takes it outside ``base``, else ``""``."""
    real_base = os.path.realpath(base)
    for p in (local, local / "kineto"):
        if not os.path.lexists(p):
            break
        real = os.path.realpath(p)
        if os.path.commonpath([real, real_base]) != real_base:
            return real
    return ""


def find_cache_root(input_path: Path) -> tuple[Path | None, str]:
    """``(cache folder, "")``; ``(cache folder, one line)`` when the user cache dir is used because ``.workbench``
    is a link that leaves the input folder (the cache never writes outside it through a link); or
    ``(None, one line saying why no cache can be written)``."""
    base = input_path if input_path.is_dir() else input_path.parent
    local = base / rundir.CACHE_DIR
    note = ""
    try:
        outside = _link_leaving(base, local)
        if outside:
            note = f"cache: {local} is a link that leaves {base} (to {outside}): not written through"
            raise PermissionError(note)
        if not local.exists() and not base.stat().st_mode & 0o222:
            raise PermissionError("read-only input folder")  # honoured even for root
        _writable(local)
        return local, ""
    except OSError as exc:
        local_why = exc.strerror or str(exc)
    user = user_cache_dir()
    root = user / hashlib.sha1(str(base.resolve()).encode()).hexdigest()[:16]
    try:
        _writable(root)
        return root, (f"{note}; the cache is kept in {root} instead" if note else "")
    except OSError as exc:
        return None, (f"cache: neither {local} ({local_why}) nor {user} ({exc.strerror or exc}) can be written; "
                      "tables are read uncached")


def content_fingerprint(path: Path, size: int) -> str:
    """A cheap hash of the file's bytes: all of a small file; else its first and last 64 KiB and 32 blocks
    of 4 KiB spread between them. A gzip file's last 8 bytes hold the CRC32 and length of its whole
    content, so for ``.json.gz`` any change of content is caught."""
    h = hashlib.blake2b(digest_size=16)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # never blocks on a FIFO swapped in for the file
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceError(path, "is not a regular file (it changed while being read): not read")
    with os.fdopen(fd, "rb") as f:
        if size <= _WHOLE_FILE:
            h.update(f.read())
        else:
            h.update(f.read(_EDGE))
            step = (size - 2 * _EDGE) // (_SAMPLES + 1)
            for i in range(1, _SAMPLES + 1):
                f.seek(_EDGE + i * step)
                h.update(f.read(_BLOCK))
            f.seek(size - _EDGE)
            h.update(f.read(_EDGE))
    return h.hexdigest()


def entry_key(path: Path, rank: int | None) -> str:
    """Key of one trace file's entry: path, size, mtime, ctime, inode, content fingerprint, rank override,
    schema and parser versions; :class:`TraceError` naming the file when it cannot be read."""
    try:
        st = path.stat()
        raw = (f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|"
               f"{content_fingerprint(path, st.st_size)}|{rank}|{schema.SCHEMA_VERSION}|{PARSER_VERSION}|"
               f"{ENTRY_VERSION}")
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def entry_dir(root: Path, key: str) -> Path:
    """The folder of one entry."""
    return root / "kineto" / key


def load_meta(root: Path, key: str) -> dict[str, Any] | None:
    """``meta.json`` of an entry plus its small tables (``frames``) and the paths of its big ones
    (``files``), or None when absent or damaged (a damaged entry is removed, never trusted)."""
    d = entry_dir(root, key)
    meta_file = d / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        meta = orjson.loads(meta_file.read_bytes())
        if meta.get("entry_version") != ENTRY_VERSION or not all((d / f"{t}.parquet").is_file() for t in BIG_TABLES):
            raise ValueError("old or incomplete entry")
        meta["frames"] = {t: schema.conform(pl.read_parquet(d / f"{t}.parquet"), _SCHEMAS[t]) for t in SMALL_TABLES}
        meta["files"] = {t: d / f"{t}.parquet" for t in BIG_TABLES}
    except Exception:  # noqa: BLE001 - a damaged entry is rebuilt, never trusted
        shutil.rmtree(d, ignore_errors=True)
        return None
    return meta


def load(root: Path, key: str) -> TraceTables | None:
    """The cached tables for ``key`` (all of them in memory), or None when absent or unreadable."""
    meta = load_meta(root, key)
    if meta is None:
        return None
    try:
        big = {t: read_big(meta["files"][t], t) for t in BIG_TABLES}
    except Exception:  # noqa: BLE001
        shutil.rmtree(entry_dir(root, key), ignore_errors=True)
        return None
    return TraceTables(path=meta["path"], rank=meta["rank"], rank_source=meta["rank_source"],
                       meta=meta["meta"], **meta["frames"], **big)


def read_big(path: Path, table: str) -> pl.DataFrame:
    """One entry's ``events`` or ``kernels`` parquet file as a frame of its schema."""
    return schema.conform(pl.read_parquet(path), _SCHEMAS[table])


def store(root: Path, key: str, tables: TraceTables, stats: dict[str, Any] | None = None) -> str:
    """Write an entry; ``""`` when written, else one line saying why not (no partial entry is left)."""
    final = entry_dir(root, key)
    tmp = root / "kineto" / f".{key}.{os.getpid()}.{id(tables):x}.tmp"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for t in _TABLES:
            getattr(tables, t).write_parquet(tmp / f"{t}.parquet", compression="lz4", statistics=False)
        meta: dict[str, Any] = {"path": tables.path, "rank": tables.rank, "rank_source": tables.rank_source,
                                "meta": tables.meta, "schema_version": schema.SCHEMA_VERSION,
                                "entry_version": ENTRY_VERSION, "stats": stats or {}}
        (tmp / "meta.json").write_bytes(orjson.dumps(meta, default=str))
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        return ""
    except Exception as exc:  # noqa: BLE001 - a full disk or a read-only folder must not lose the tables
        shutil.rmtree(tmp, ignore_errors=True)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).strip().splitlines()[0][:160]
        return f"cache: could not write {final} ({why}); {tables.path} is read uncached"


__all__ = ["BIG_TABLES", "SMALL_TABLES", "cache_root", "content_fingerprint", "entry_key", "find_cache_root",
           "load", "load_meta", "read_big", "store", "user_cache_dir"]
