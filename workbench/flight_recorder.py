"""Hang evidence readers: Flight Recorder dumps, the collector's hang files, and the collectives in compiled graphs.

* :func:`read_dump` — one Flight Recorder dump (the pickle torch writes to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``
  / ``TORCH_FR_DUMP_TEMP_FILE<rank>``, or ``_dump_fr_trace_json`` JSON) → :class:`FRDump`. Pickles are read with a
  restricted unpickler that builds only plain data (dict, list, tuple, str, numbers, bool, None): a pickle that asks
  for any class or function, or an old protocol 0/1 pickle, is refused with one line naming the file, and nothing
  in it runs. A dump is read only from a regular file and within bounds checked before anything expands it
  (:data:`MAX_DUMP_BYTES`, :data:`MAX_DUMP_OPS`, :data:`MAX_DUMP_ELEMENTS` counting a shared reference each time
  it is reached, :data:`MAX_DUMP_DEPTH`: :func:`check_bounds`).
* :func:`find_dumps` — the dumps under a folder (a run directory's ``rank<R>/hang/`` or a folder of
  ``<prefix><rank>`` files as torch writes them).
* :func:`load_hang_tables` — everything a hang analysis needs from a path, as typed polars frames
  (:class:`HangTables`): Flight Recorder entries and process-group status per rank, the collector's per-rank exit
  state (``rank<R>/hang/events.jsonl``, ``heartbeat.jsonl``, ``fatal.txt``), and the collectives each rank's
  compiled graphs issue (read from the TORCH_TRACE compile logs).

Example:
    >>> tables = load_hang_tables("runs/exp1")          # doctest: +SKIP
    >>> tables.entries.filter(pl.col("rank") == 1)      # doctest: +SKIP
"""

from __future__ import annotations

import gc
import gzip
import io
import os
import pickle
import pickletools
import re
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import polars as pl

from workbench import rundir
from workbench.errors import TraceError
from workbench.regular_file import read_regular, size_text
from workbench.schema import (  # noqa: F401  (the hang tables' schemas, declared with the others)
    FR_ENTRIES, FR_STATUS, GRAPH_COLLECTIVES, RANK_STATE, HangTables, empty_hang_tables,
)

#: Folder of the collector's hang files inside ``rank<R>/``.
HANG_DIR = "rank{rank}/hang"
#: File names inside :data:`HANG_DIR` (none ends in ``.json``, so no reader takes them for a Kineto trace).
DUMP_PREFIX = "fr_trace_rank_"          # our own dumps: fr_trace_rank_<R>
PERIODIC_DIR = "fr"                     # the collector's periodic dumps (no stacks): fr/<n>.pkl.gz
NCCL_DUMP_PREFIX = "nccl_trace_rank_"   # NCCL's dump on timeout, pointed here by the collector
EVENTS_FILE = "events.jsonl"
HEARTBEAT_FILE = "heartbeat.jsonl"
FATAL_FILE = "fatal.txt"

#: Limits on one Flight Recorder dump (docs/hangs.md, "Pickles are never trusted"); torch's own dumps are far below
#: them (20,000 entries with 24-frame stacks: 3.3 MB, 1.8M pickle operations, 4.4M elements, nesting 4).
MAX_DUMP_BYTES = 512 * 1024 * 1024
#: Pickle operations a dump may hold. Each builds at most one object, so this bounds what the unpickler builds
#: before anything looks at it; a file with fewer bytes cannot hold more operations, so only larger ones are counted.
MAX_DUMP_OPS = 16_000_000
#: Elements a dump may expand to, a shared reference counted every time it is reached (what reading every entry
#: in full would visit).
MAX_DUMP_ELEMENTS = 50_000_000
#: Nesting levels a dump may have.
MAX_DUMP_DEPTH = 64
#: Entries read from one dump: the newest (torch writes them oldest first); older ones are counted in a note.
MAX_DUMP_ENTRIES = 200_000
#: ``fatal.txt`` is read up to this size (its end: the last stacks written).
MAX_FATAL_BYTES = 1024 * 1024
#: ``events.jsonl`` larger than this is not read; ``heartbeat.jsonl`` is read from its end up to this size.
MAX_EVENTS_BYTES = 256 * 1024 * 1024
MAX_HEARTBEAT_BYTES = 1024 * 1024
#: Ranks are ids below 2^31.
MAX_RANK = 2**31 - 1
_INT64 = (-(2**63), 2**63 - 1)


def _typed_list(data: Any) -> Any:
    """torch.jit's typed-list rebuilders return their argument (no copy: a copy per reference would let a few
    bytes of pickle build gigabytes)."""
    if not isinstance(data, list):
        raise pickle.UnpicklingError("a torch.jit typed list built from something that is not a list")
    return data


def _ordered_dict(*args: Any) -> dict:
    """``collections.OrderedDict()`` as pickle calls it (no arguments; the items follow): a plain ``dict``."""
    if args:
        raise pickle.UnpicklingError("an OrderedDict built from arguments, which pickle never writes")
    return {}


#: Globals that old dumps (torch.jit pickler) may use to rebuild typed lists: mapped to plain data.
_SAFE_GLOBALS: dict[tuple[str, str], Any] = {
    ("torch.jit._pickle", "build_intlist"): _typed_list,
    ("torch.jit._pickle", "build_doublelist"): _typed_list,
    ("torch.jit._pickle", "build_boollist"): _typed_list,
    ("torch.jit._pickle", "build_strlist"): _typed_list,
    ("collections", "OrderedDict"): _ordered_dict,
}


class UnsafePickleError(TraceError):
    """A pickle that asks for code (a class or function outside the plain-data format), or one of the old
    protocols torch never writes: refused, never run."""


class _PlainDataUnpickler(pickle.Unpickler):
    """Builds only plain data; any class, function or persistent id is refused."""

    def __init__(self, data: bytes, path: str) -> None:
        super().__init__(io.BytesIO(data))
        self._path = path

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        safe = _SAFE_GLOBALS.get((module, name))
        if safe is not None:
            return safe
        raise UnsafePickleError(
            self._path, f"refused: the pickle asks for {module}.{name}, which a Flight Recorder dump never "
                        "contains (not loaded, nothing was run)")

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle hook
        raise UnsafePickleError(self._path, "refused: the pickle uses persistent ids, which a Flight Recorder "
                                            "dump never contains (not loaded, nothing was run)")


def is_old_pickle(data: bytes) -> bool:
    """``data`` starts like a protocol 0 or 1 pickle (no ``PROTO`` header; its first opcodes, up to 8, decode and
    are all of those protocols)."""
    if data[:1] == b"\x80":
        return False
    try:
        for i, (op, _, _) in enumerate(pickletools.genops(io.BytesIO(data))):
            if op.proto > 1:
                return False
            if op.name == "STOP" or i >= 7:
                return True
    except (ValueError, UnicodeDecodeError):
        return False
    return False


def _count_ops(data: bytes, path: str | Path) -> None:
    """Refuse ``data`` holding more than :data:`MAX_DUMP_OPS` pickle operations (decoded, never run)."""
    n = 0
    try:
        for _ in pickletools.genops(io.BytesIO(data)):
            n += 1
            if n > MAX_DUMP_OPS:
                raise TraceError(path, f"refused: more than {MAX_DUMP_OPS:,} pickle operations, more than a Flight "
                                       "Recorder dump holds (not loaded)")
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"not a readable pickle ({exc})") from None


_CONTAINERS = frozenset({dict, list, tuple, set, frozenset})


def _children(c: Any) -> tuple[int, list[Any]]:
    """(elements of ``c`` that are not containers, plus one for ``c`` itself; its containers): a dict's keys and
    values are both elements."""
    if type(c) is dict:
        kids = [v for v in c.values() if type(v) in _CONTAINERS]
        kids += [k for k in c if type(k) in _CONTAINERS]
        return 1 + 2 * len(c) - len(kids), kids
    kids = [v for v in c if type(v) in _CONTAINERS]
    return 1 + len(c) - len(kids), kids


def check_bounds(obj: Any, path: str | Path) -> int:
    """The number of elements ``obj`` expands to (every shared reference counted each time it is reached);
    :class:`TraceError` naming the file when that passes :data:`MAX_DUMP_ELEMENTS`, when it nests deeper than
    :data:`MAX_DUMP_DEPTH` levels, or when it contains itself. The work is linear in the distinct objects (what a
    shared container expands to is computed once) and needs no recursion."""
    if type(obj) not in _CONTAINERS:
        return 1

    def deep() -> TraceError:
        return TraceError(path, f"refused: nested deeper than {MAX_DUMP_DEPTH} levels, deeper than a Flight "
                                "Recorder dump (not read further)")

    def too_many() -> TraceError:
        return TraceError(path, f"refused: expands to more than {MAX_DUMP_ELEMENTS:,} elements counting each "
                                "shared reference, more than a Flight Recorder dump holds (not read further)")

    done: dict[int, tuple[int, int]] = {}     # id → (elements, levels below it) of a container measured already
    active: set[int] = {id(obj)}               # the containers being measured: the path from the root
    parents: list[tuple[Any, int, int, int]] = []   # the path's measurements, saved while a child is measured
    n, kids = _children(obj)
    it, count, below, cur = iter(kids), n, 0, id(obj)   # the container being measured: containers left, ...
    room = MAX_DUMP_DEPTH - 1                  # levels a child of it may have below itself
    while True:
        for child in it:
            cid = id(child)
            got = done.get(cid)
            if got is None:
                n, kids = _children(child)
                if kids:   # measured once its containers are
                    if cid in active:
                        raise TraceError(path, "refused: a container that contains itself, which a Flight Recorder "
                                               "dump never has (not read further)")
                    if room <= 0:
                        raise deep()
                    active.add(cid)
                    parents.append((it, count, below, cur))
                    it, count, below, cur = iter(kids), n, 0, cid
                    room -= 1
                    break
                got = done[cid] = (n, 0)
            if got[1] >= room:
                raise deep()
            count += got[0]
            if got[1] >= below:
                below = got[1] + 1
            if count > MAX_DUMP_ELEMENTS:
                raise too_many()
        else:
            done[cur] = (count, below)
            active.discard(cur)
            if not parents:
                return count
            n, levels = count, below
            it, count, below, cur = parents.pop()
            room += 1
            count += n
            if levels >= below:
                below = levels + 1
            if count > MAX_DUMP_ELEMENTS:
                raise too_many()


def safe_unpickle(data: bytes, path: str | Path = "<bytes>") -> Any:
    """Unpickle ``data`` admitting plain data only, within the dump bounds (:data:`MAX_DUMP_OPS`,
    :data:`MAX_DUMP_ELEMENTS`, :data:`MAX_DUMP_DEPTH`); :class:`UnsafePickleError` for anything that asks for code
    and for protocol 0/1 pickles, :class:`TraceError` for the rest."""
    if data[:1] != b"\x80":
        if is_old_pickle(data):
            raise UnsafePickleError(path, "refused: a protocol 0/1 pickle, which torch never writes for a Flight "
                                          "Recorder dump (not loaded, nothing was run)")
        raise TraceError(path, "not a readable pickle (no protocol 2+ header)")
    if len(data) > MAX_DUMP_OPS:
        _count_ops(data, path)
    with _no_gc():
        try:
            obj = _PlainDataUnpickler(data, str(path)).load()
        except UnsafePickleError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is one line naming the file
            raise TraceError(path, f"not a readable pickle ({str(exc) or 'truncated or corrupt'})") from None
        check_bounds(obj, path)
    return obj


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused (building a million containers otherwise runs it hundreds of times over
    all of them: 7x slower); plain data has no cycles to collect."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---------------------------------------------------------------------------------------------- one dump
@dataclass(frozen=True, slots=True)
class FRDump:
    """One rank's Flight Recorder dump: ``entries`` (dicts as torch writes them), ``pg_config``, ``pg_status``;
    ``notes``: what reading it skipped, one line each."""

    path: Path
    rank: int | None
    version: str
    entries: list[dict[str, Any]]
    pg_config: dict[str, Any]
    pg_status: dict[str, Any]
    notes: tuple[str, ...] = ()


_RANK_SUFFIX = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")


def rank_from_name(path: Path) -> int | None:
    """The rank torch appends to a dump's file name (``nccl_trace_rank_3`` → 3)."""
    m = _RANK_SUFFIX.search(path.name)
    return int(m.group(1)) if m and len(m.group(1)) <= 30 else None


def read_dump(path: str | Path, rank: int | None = None) -> FRDump:
    """Read one Flight Recorder dump (pickle or JSON) within the dump bounds; :class:`TraceError` naming the file
    when it is not one (or not a regular file, or over the limits)."""
    p = Path(path)
    rank = rank if rank is not None else rank_from_name(p)
    if rank is not None and not 0 <= rank <= MAX_RANK:
        raise TraceError(p, f"rank {rank} (from the file name) is not an id below 2^31: not read")
    data = read_regular(p, MAX_DUMP_BYTES, what="Flight Recorder dump").data
    if data[:2] == _GZIP_MAGIC:   # the collector's periodic dumps (rank<R>/hang/fr/<n>.pkl.gz)
        data = _gunzip(data, p)
    if data.lstrip()[:1] == b"{":
        with _no_gc():
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise TraceError(p, f"invalid JSON ({exc})") from None
            check_bounds(obj, p)
    else:   # any other content is read as a pickle, through the plain-data unpickler
        obj = safe_unpickle(data, p)
    if not isinstance(obj, dict) or not isinstance(obj.get("entries", []), list) or "version" not in obj:
        raise TraceError(p, "no 'version' and 'entries': not a Flight Recorder dump")
    raw = obj.get("entries", [])
    notes = []
    if len(raw) > MAX_DUMP_ENTRIES:
        notes.append(f"{p}: {len(raw):,} entries: the oldest {len(raw) - MAX_DUMP_ENTRIES:,} not read (at most "
                     f"{MAX_DUMP_ENTRIES:,} per dump, the newest)")
        raw = raw[-MAX_DUMP_ENTRIES:]
    entries = [e for e in raw if isinstance(e, dict)]
    if len(entries) < len(raw):
        notes.append(f"{p}: {len(raw) - len(entries)} of {len(raw)} entries skipped: not objects (field 'entries', "
                     "wrong type)")
    pg_config = obj.get("pg_config") if isinstance(obj.get("pg_config"), dict) else {}
    pg_status = obj.get("pg_status") if isinstance(obj.get("pg_status"), dict) else {}
    version = obj.get("version")
    return FRDump(p, rank, version if isinstance(version, str) else str(version)[:100], entries, pg_config,
                  pg_status, tuple(notes))


_DUMP_NAMES = (DUMP_PREFIX, NCCL_DUMP_PREFIX)
_GZIP_MAGIC = b"\x1f\x8b"


def _gunzip(data: bytes, path: Path) -> bytes:
    """``data`` unzipped, never past :data:`MAX_DUMP_BYTES` (a bomb is refused in one line naming the file)."""
    z = zlib.decompressobj(wbits=31)
    try:
        out = z.decompress(data, MAX_DUMP_BYTES + 1)
    except zlib.error as exc:
        raise TraceError(path, f"not a valid gzip file ({exc})") from None
    if len(out) > MAX_DUMP_BYTES or z.unconsumed_tail:
        raise TraceError(path, f"unzips to more than {size_text(MAX_DUMP_BYTES)}: not read")
    return out


def named_like_dump(path: Path) -> bool:
    """A name torch gives a dump: ``fr_trace_rank_<R>`` / ``nccl_trace_rank_<R>`` or ``<anything><R>.pkl`` /
    ``.pickle``."""
    return rank_from_name(path) is not None and (path.name.startswith(_DUMP_NAMES)
                                                 or path.suffix in (".pkl", ".pickle"))


def looks_like_dump(path: Path) -> bool:
    """A regular file named with a rank whose first bytes are a pickle header (or, named like a dump, an old
    protocol 0/1 pickle: read_dump refuses it with a note), or a JSON object naming ``entries`` and ``pg_config``."""
    if path.name.startswith(".") or rank_from_name(path) is None:
        return False
    try:
        head = read_regular(path, 4096, keep="head").data
    except TraceError:   # a FIFO or device named like a dump: read_dump refuses it with one line
        return named_like_dump(path) and not path.is_dir()
    if head[:1] == b"\x80":
        return True   # a pickle named like a per-rank dump: read_dump decides (and refuses one that asks for code)
    if named_like_dump(path) and (is_old_pickle(head) or head.lstrip()[:1] == b"{"):
        return True
    return head.lstrip()[:1] == b"{" and b'"entries"' in head and (b'"comm_lib_version"' in head
                                                                  or b'"pg_config"' in head)


def find_dumps(root: str | Path) -> dict[int, list[Path]]:
    """Flight Recorder dumps under ``root`` by rank: ``rank<R>/hang/*`` in a run directory, else every file under
    ``root`` that looks like a dump (rank from the file name)."""
    base = Path(root)
    out: dict[int, list[Path]] = {}
    if base.is_file():
        r = rank_from_name(base)
        return {r: [base]} if r is not None else {}
    if rundir.is_run_dir(base):
        for rank, rdir in rundir.rank_dirs(base).items():
            hang = rdir / "hang"
            if hang.is_dir():
                files = sorted(p for p in hang.iterdir()
                               if p.name.startswith((DUMP_PREFIX, NCCL_DUMP_PREFIX)) and not p.name.endswith(".tmp"))
                periodic = hang / PERIODIC_DIR
                if periodic.is_dir() and not periodic.is_symlink():
                    files += sorted(p for p in periodic.iterdir() if p.name.endswith(".pkl.gz")
                                    and not p.name.startswith("."))
                if files:
                    out[rank] = files
        for p in sorted(base.glob(f"{NCCL_DUMP_PREFIX}*")):   # NCCL dumps pointed at the run folder itself
            r = rank_from_name(p)
            if r is not None and not p.name.endswith(".tmp"):
                out.setdefault(r, []).append(p)
        return out
    for p in sorted(base.rglob("*")):
        if rundir.CACHE_DIR in p.parts:
            continue
        if looks_like_dump(p):
            out.setdefault(rank_from_name(p), []).append(p)  # type: ignore[arg-type]
    return out


def has_dumps(root: str | Path) -> bool:
    """``root`` holds at least one Flight Recorder dump."""
    try:
        return bool(find_dumps(root))
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------- tables
_COLLECTORS = str(Path(__file__).resolve().parents[1] / "collectors").replace("\\", "/") + "/"


def _is_internal(filename: str) -> bool:
    """Frames of torch, of the collectors, of the interpreter: not the user's call site."""
    f = filename.replace("\\", "/")
    return ("/site-packages/torch/" in f or "/dist-packages/torch/" in f or "/workbench/collectors/" in f
            or f.startswith(_COLLECTORS)
            or f.startswith("<") or "/multiprocessing/" in f or f.endswith(("/threading.py", "/typing_extensions.py",
                                                                              "/warnings.py", "/contextlib.py")))


def _frame_text(fr: dict[str, Any]) -> str:
    return f"{_text(fr.get('filename'), '?')}:{_text(fr.get('line'), '?')} in {_text(fr.get('name'), '?')}"


def _text(v: Any, default: str | None = None) -> str | None:
    """A text field: text as is, a number as its digits, anything else ``default``."""
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return str(v) if not isinstance(v, int) or _INT64[0] <= v <= _INT64[1] else default
    return default


def _int(v: Any) -> int | None:
    """An integer field that fits int64 (from an int, or text of digits as torch's JSON dumps write them)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        n = int(v) if isinstance(v, (int, float)) or (isinstance(v, str) and len(v) <= 30) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n is not None and _INT64[0] <= n <= _INT64[1] else None


class _Odd:
    """Counts, per field, the entries of one dump whose value had the wrong type or range (kept as null)."""

    def __init__(self) -> None:
        self.fields: dict[str, int] = {}

    def int(self, e: dict[str, Any], key: str) -> int | None:
        v = e.get(key)
        n = _int(v)
        if n is None and v is not None and not isinstance(v, bool):
            self.fields[key] = self.fields.get(key, 0) + 1
        return n

    def text(self, e: dict[str, Any], key: str) -> str | None:
        v = e.get(key)
        if v is None or isinstance(v, str):
            return v
        t = _text(v)
        self.fields[key] = self.fields.get(key, 0) + 1   # coerced (a number) or dropped: counted either way
        return t

    def json(self, e: dict[str, Any], key: str) -> str | None:
        try:
            return orjson.dumps(e.get(key)).decode()
        except orjson.JSONEncodeError:   # an integer past 64 bits, bytes, a set, a key that is not text
            self.fields[key] = self.fields.get(key, 0) + 1
            return None

    def note(self, path: Path) -> str | None:
        if not self.fields:
            return None
        what = ", ".join(f"'{k}' in {n}" for k, n in sorted(self.fields.items()))
        return f"{path}: fields of the wrong type or out of range kept as null (wrong type): {what} entr(ies)"


def _entry_row(rank: int, e: dict[str, Any], path: Path, odd: _Odd | None = None) -> dict[str, Any]:
    odd = odd or _Odd()
    pg = e.get("process_group")
    if isinstance(pg, (list, tuple)) and len(pg) >= 2:
        pg_name, pg_desc = _text(pg[0], ""), _text(pg[1], "")
    else:
        pg_name, pg_desc = _text(e.get("pg_id"), ""), ""
    name = odd.text(e, "profiling_name") or ""
    backend, _, op = name.rpartition(":")
    raw_frames = e.get("frames")
    frames = [f for f in raw_frames if isinstance(f, dict)] if isinstance(raw_frames, list) else []
    user = [f for f in frames if not _is_internal(_text(f.get("filename"), ""))]
    is_p2p = bool(e.get("is_p2p"))
    retired = e.get("retired")
    return {
        "rank": rank, "pg_name": pg_name, "pg_desc": pg_desc,
        "seq": None if is_p2p else odd.int(e, "collective_seq_id"),
        "p2p_seq": odd.int(e, "p2p_seq_id"), "is_p2p": is_p2p,
        "op": op or name, "backend": backend or None,
        "in_sizes": odd.json(e, "input_sizes"), "in_dtypes": odd.json(e, "input_dtypes"),
        "out_sizes": odd.json(e, "output_sizes"), "out_dtypes": odd.json(e, "output_dtypes"),
        "state": odd.text(e, "state"),
        "retired": bool(retired) if retired is not None else None,
        "created_ns": odd.int(e, "time_created_ns"),
        "started_ns": odd.int(e, "time_discovered_started_ns") or None,
        "completed_ns": odd.int(e, "time_discovered_completed_ns") or None,
        "timeout_ms": odd.int(e, "timeout_ms"),
        "call_site": _frame_text(user[0]) if user else None,
        "stack": orjson.dumps([_frame_text(f) for f in user[:6]]).decode(),
        "record_id": odd.int(e, "record_id"), "file": str(path),
    }


_STATE_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


def _more(row: dict[str, Any], old: dict[str, Any]) -> bool:
    """``row`` says more of one entry than ``old``: a later state, or the same one with the call site (a dump with
    stacks over a periodic dump without)."""
    a, b = _STATE_ORDER.get(row["state"] or "", 0), _STATE_ORDER.get(old["state"] or "", 0)
    return a > b or (a == b and row["call_site"] is not None and old["call_site"] is None)


def dump_tables(dumps: list[FRDump], problems: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(entries, status) frames of ``dumps``; an entry seen in several dumps of one rank is kept once, in its most
    advanced state. Fields of the wrong type or range are kept as null, one line per dump in ``problems``."""
    best: dict[tuple, dict[str, Any]] = {}
    status: dict[tuple[int, str], dict[str, Any]] = {}
    for d in dumps:
        if d.rank is None:
            continue
        odd = _Odd()
        for e in d.entries:
            row = _entry_row(d.rank, e, d.path, odd)
            key = (row["rank"], row["pg_name"], row["is_p2p"], row["seq"] if not row["is_p2p"] else row["p2p_seq"],
                   row["op"], row["created_ns"])
            old = best.get(key)
            if old is None or _more(row, old):
                best[key] = row
        for pg, st in d.pg_status.items():
            if not isinstance(st, dict):
                continue
            k = (d.rank, _text(pg, ""))
            new = {"rank": d.rank, "pg_name": k[1], "last_enqueued": odd.int(st, "last_enqueued_collective"),
                   "last_started": odd.int(st, "last_started_collective"),
                   "last_completed": odd.int(st, "last_completed_collective")}
            old = status.get(k)
            if old is None or (new["last_enqueued"] or -1) >= (old["last_enqueued"] or -1):
                status[k] = new
        note = odd.note(d.path)
        if note and problems is not None:
            problems.append(note)
    entries = pl.DataFrame(list(best.values()), schema=FR_ENTRIES) if best else pl.DataFrame(schema=FR_ENTRIES)
    st = pl.DataFrame(list(status.values()), schema=FR_STATUS) if status else pl.DataFrame(schema=FR_STATUS)
    return entries.sort("rank", "pg_name", "created_ns", nulls_last=True), st.sort("rank", "pg_name")


# ---------------------------------------------------------------------------------------------- collector files
_FATAL_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>\S+)')


def read_fatal(path: Path, problems: list[str] | None = None) -> tuple[str | None, str | None] | None:
    """(call site, torch.distributed function) of the main thread in a faulthandler traceback; None if empty or
    unreadable (a file that is not regular or cannot be read: one line in ``problems``). Only its last
    :data:`MAX_FATAL_BYTES` are read (one line in ``problems`` says so)."""
    try:
        got = read_regular(path, MAX_FATAL_BYTES, what="fatal.txt", keep="tail")
    except TraceError as exc:
        if problems is not None and (path.exists() or path.is_symlink()):
            problems.append(str(exc))
        return None
    if got.truncated and problems is not None:
        problems.append(f"{path}: {got.size:,} bytes: only its last {size_text(MAX_FATAL_BYTES)} read")
    text = got.data.decode(errors="replace")
    if not text.strip():
        return None
    text = text.split("\nExtension modules:")[0]
    blocks = [b for b in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text) if "most recent call first" in b]
    # the main thread: the stack that starts at a module (a signal from a C++ thread has no "Current thread")
    main = next((b for b in blocks if b.rstrip().endswith((" in <module>", " in _run_module_as_main",
                                                             " in _run_code"))), None)
    main = main or next((b for b in blocks if "Current thread" in b), None) or (blocks[0] if blocks else text)
    frames = [m.groupdict() for m in (_FATAL_FRAME.match(line) for line in main.splitlines()) if m]
    site = next((f"{f['file']}:{f['line']} in {f['name']}" for f in frames if not _is_internal(f["file"])), None)
    op = next((f["name"] for f in frames if "/torch/distributed/" in f["file"].replace("\\", "/")
               and f["name"] not in ("wrapper", "_wrap")), None)
    if op is None and any(f["file"].startswith("<eval_with_key>") or "/torch/_inductor/" in f["file"]
                          for f in frames):
        op = "compiled graph"   # inside a compiled graph (its collectives are ops of the graph, not Python calls)
    return site, op


def _read_jsonl(path: Path, limit: int, keep: Literal["refuse", "tail"],
                problems: list[str]) -> list[dict[str, Any]]:
    """The JSON-object lines of one collector file (up to ``limit`` bytes); unreadable lines counted in
    ``problems``; a file that is not regular, or too large, is one line in ``problems``."""
    try:
        got = read_regular(path, limit, what=path.name, keep=keep)
    except TraceError as exc:
        problems.append(str(exc))
        return []
    out: list[dict[str, Any]] = []
    bad = 0
    for line in got.data.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, dict):
            out.append(obj)
        else:
            bad += 1
    if bad:
        problems.append(f"{path}: {bad} unreadable line(s) skipped")
    return out


def _int32(v: Any) -> int | None:
    n = _int(v)
    return n if n is not None and -(2**31) <= n < 2**31 else None


def _rank_state(rank: int, hang: Path, n_dumps: int, problems: list[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"rank": rank, "dumps": n_dumps, "fatal": False}
    events = hang / EVENTS_FILE
    if events.exists() or events.is_symlink():
        for ev in _read_jsonl(events, MAX_EVENTS_BYTES, "refuse", problems):
            kind = ev.get("event")
            if kind == "start":
                row["started_ns"] = _int(ev.get("time_ns"))
                row["pg_before_collector"] = bool(ev.get("pg_before_collector"))
            elif kind == "error" and "error" not in row:
                row["error"] = (_text(ev.get("error")) or "")[:500]
                row["error_step"] = _int32(ev.get("step"))
                row["error_ns"] = _int(ev.get("time_ns"))
            elif kind == "stalled" and "stalled_step" not in row:
                row["stalled_step"] = _int32(ev.get("step"))
            elif kind == "exit":
                row["exit_reason"] = _text(ev.get("reason"), "?")
                row["exit_ns"] = _int(ev.get("time_ns"))
    beat = hang / HEARTBEAT_FILE
    if beat.exists() or beat.is_symlink():
        lines = _read_jsonl(beat, MAX_HEARTBEAT_BYTES, "tail", problems)
        if lines:
            row["heartbeat_ns"] = _int(lines[-1].get("time_ns"))
            row["heartbeat_step"] = _int32(lines[-1].get("step"))
    fatal = read_fatal(hang / FATAL_FILE, problems)
    if fatal is not None:
        row["fatal"] = True
        row["fatal_call_site"], row["fatal_op"] = fatal
    return row


# ---------------------------------------------------------------------------------------------- compiled graphs
_GRAPH_EVENTS = ("dynamo_output_graph", "aot_backward_graph", "inductor_output_code")
_HEAD = re.compile(r'^V\d{4} [\d:.]+ \d+ [^\]]*\] (\{.*\})\s*$')
_FILE_COMMENT = re.compile(r"\s*#\s*File: (?P<file>.+?):(?P<line>\d+) in (?P<name>[^,]+)")
_FUNC_OP = re.compile(
    r'^\s*(?P<var>\w+)(?:: "(?P<dtype>[a-z0-9]+)\[(?P<shape>[^\]]*)\][^"]*")?\s*=\s*'
    r"torch\.ops\._c10d_functional\.(?P<op>\w+)(?:\.default)?\((?P<args>.*)\)")
_NOT_COLLECTIVES = {"wait_tensor"}


def _graph_collectives(payload: str) -> list[dict[str, Any]]:
    if "_c10d_functional" not in payload:
        return []
    out = []
    site = None
    for line in payload.splitlines():
        c = _FILE_COMMENT.match(line)
        if c and not _is_internal(c.group("file")):
            site = f"{c.group('file')}:{c.group('line')} in {c.group('name').strip()}"
            continue
        m = _FUNC_OP.match(line)
        if not m or m.group("op") in _NOT_COLLECTIVES:
            continue
        strs = re.findall(r"'([^']*)'", m.group("args"))
        out.append({"op": m.group("op"), "group": strs[-1] if strs else None, "dtype": m.group("dtype"),
                    "shape": f"[{m.group('shape')}]" if m.group("shape") is not None else None, "call_site": site})
    return out


def _lines(fh: io.TextIOWrapper) -> Iterator[str]:
    """The lines of ``fh``, ending early where compressed data turns out corrupt or cut short."""
    try:
        yield from fh
    except (gzip.BadGzipFile, EOFError, zlib.error):
        return


def read_graph_collectives(path: Path, rank: int | None) -> list[dict[str, Any]]:
    """The ``_c10d_functional`` collectives of every compiled graph in one TORCH_TRACE log, in graph order."""
    rows: list[dict[str, Any]] = []
    if rank is None:
        from workbench.compile_log import rank_from_filename

        rank = rank_from_filename(path)
    try:   # a regular file only, opened without blocking (a FIFO named like a log never hangs the read)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return rows
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return rows
    raw = open(fd, "rb")
    stream = gzip.GzipFile(fileobj=raw) if raw.peek(2)[:2] == b"\x1f\x8b" else raw   # a .log.gz is read as it is
    with raw, io.TextIOWrapper(stream, encoding="utf-8", errors="replace") as fh:
        current: tuple[str, str, int | None] | None = None
        buf: list[str] = []

        def flush() -> None:
            if current is not None and buf:
                graph, cid, r = current
                for i, c in enumerate(_graph_collectives("\n".join(buf))):
                    rows.append({"rank": rank if rank is not None else r, "compile_id": cid, "graph": graph,
                                 "index": i, **c, "log_file": str(path)})

        for line in _lines(fh):
            if line.startswith("\t"):
                if current is not None:
                    buf.append(line[1:])
                continue
            flush()
            current, buf = None, []
            if "_c10d" not in line and not any(g in line for g in _GRAPH_EVENTS):
                continue
            m = _HEAD.match(line)
            if not m:
                continue
            try:
                meta = orjson.loads(m.group(1))
            except orjson.JSONDecodeError:
                continue
            graph = next((g for g in _GRAPH_EVENTS if g in meta), None)
            if graph is None or not meta.get("has_payload"):
                continue
            cid = f"{meta.get('frame_id')}/{meta.get('frame_compile_id')}"
            if meta.get("attempt"):
                cid += f"_{meta['attempt']}"
            current = (graph, cid, _int(meta.get("rank")))
        flush()
    # a graph compiled by inductor shows its collectives twice (aot graph and output code): keep the graph
    seen = {(r["compile_id"], r["graph"]) for r in rows}
    return [r for r in rows if r["graph"] != "inductor_output_code"
            or (r["compile_id"], "dynamo_output_graph") not in seen]


# ---------------------------------------------------------------------------------------------- everything
def load_hang_tables(root: str | Path, compile_logs: list[tuple[Path, int | None]] | None = None) -> HangTables:
    """Hang evidence under ``root`` (a run directory, a folder of Flight Recorder dumps, or one dump).

    ``compile_logs``: (path, rank) of the TORCH_TRACE logs to scan for compiled collectives (what
    :func:`workbench.discover.discover` found); unreadable files are listed in ``problems``, never raised.
    """
    base = Path(root)
    problems: list[str] = []
    dumps: list[FRDump] = []
    found = find_dumps(base)
    for rank, files in found.items():
        for f in files:
            try:
                dumps.append(read_dump(f, rank))
            except TraceError as exc:
                problems.append(str(exc))
    for d in dumps:
        problems.extend(d.notes)
    entries, status = dump_tables(dumps, problems)
    states = []
    if base.is_dir() and rundir.is_run_dir(base):
        for rank, rdir in rundir.rank_dirs(base).items():
            hang = rdir / "hang"
            if hang.is_dir():
                states.append(_rank_state(rank, hang, len(found.get(rank, [])), problems))
    rank_state = pl.DataFrame(states, schema=RANK_STATE) if states else pl.DataFrame(schema=RANK_STATE)
    exports = rundir.trace_exports(base, problems) if base.is_dir() and rundir.is_run_dir(base) else {}
    pauses = rundir.gc_pauses(base, problems) if base.is_dir() and rundir.is_run_dir(base) else {}
    graph_rows: list[dict[str, Any]] = []
    for path, rank in compile_logs or []:
        graph_rows.extend(read_graph_collectives(Path(path), rank))
    graphs = (pl.DataFrame(graph_rows, schema=GRAPH_COLLECTIVES) if graph_rows
              else pl.DataFrame(schema=GRAPH_COLLECTIVES))
    return HangTables(entries, status, rank_state, graphs, problems, exports, pauses)


# ---------------------------------------------------------------------------------------------- a Run's view
def discover_with_dumps(path: str | Path) -> Any:
    """:func:`workbench.discover.discover`, except that a folder holding only Flight Recorder dumps (or one dump)
    is a source too (an empty :class:`~workbench.discover.Sources`: its hang tables come from :func:`run_hangs`)."""
    from workbench.discover import Sources, discover
    from workbench.errors import InputError

    try:
        sources = discover(path)
    except InputError:
        if Path(path).exists() and has_dumps(path):
            return Sources(root=Path(path))
        raise
    # torch's JSON dumps (_dump_fr_trace_json) end in .json like Kineto traces: they are read as dumps instead
    sources.traces = [t for t in sources.traces if not (t.path.name.endswith(".json") and looks_like_dump(t.path))]
    return sources


def run_hangs(run: Any) -> HangTables:
    """The :class:`HangTables` of a :class:`workbench.Run` (read once, then kept on the run): the dumps and hang
    files under ``run.path``, and the compiled collectives of the compile logs its ``compiles`` came from."""
    cached = getattr(run, "_hang_tables", None)
    if isinstance(cached, HangTables):
        return cached
    logs: list[tuple[Path, int | None]] = []
    compiles = getattr(run, "compiles", None)
    if isinstance(compiles, pl.DataFrame) and not compiles.is_empty() and "log_file" in compiles.columns:
        pairs = compiles.select("log_file", "rank").unique().drop_nulls("log_file").sort("log_file")
        seen: set[str] = set()
        for f, r in pairs.iter_rows():
            if f not in seen:
                seen.add(f)
                logs.append((Path(f), r))
    where = getattr(run, "path", None)
    path = Path(where) if isinstance(where, (str, Path)) else None
    try:
        tables = load_hang_tables(path, logs) if path is not None and path.exists() else empty_hang_tables()
    except OSError as exc:
        tables = empty_hang_tables()
        tables.problems.append(f"{path}: hang files unreadable ({exc.strerror or exc})")
    try:
        run._hang_tables = tables
    except AttributeError:   # a run object without a __dict__: read again next time
        pass
    problems = getattr(run, "problems", None)
    if isinstance(problems, list):   # a refused or unreadable dump is one line beside the run's other problems
        problems.extend(p for p in tables.problems if p not in problems)
    return tables
