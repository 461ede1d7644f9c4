"""One Kineto (torch.profiler) Chrome-trace file → the workbench tables for its rank.

The JSON is parsed straight into columns by polars (no Python object per event), then events
are normalised: absolute int64 ns times, a ``kind`` per category, kernel classes by name and by
the ``External id`` link to ``record_param_comms`` (never by stream), collectives, steps.

Example:
    >>> tables = read_trace("rank-0.json.gz")          # doctest: +SKIP
    >>> tables.kernels.group_by("kernel_class").len()   # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import schema
from workbench.errors import InputError, TraceError

#: Bump when parsing or classification changes what a trace file yields (the cache key includes it).
PARSER_VERSION = 4

#: Largest ``ts`` (µs) taken as a time: past it ``baseTimeNanoseconds + ts * 1000`` would not fit int64 ns
#: (4e15 µs since the epoch is the year 2096). Larger, negative or non-finite values drop the event (SKIPPED).
MAX_TS_US = 4e15
#: Longest ``dur`` (µs) taken as a duration (about 28 hours); longer, or non-finite, drops the event.
MAX_DUR_US = 1e11
#: Events whose start lies further than this from the trace's median start are clock outliers (dropped).
OUTLIER_NS = 7 * 24 * 3600 * 10**9
#: The most ranks a ``distributedInfo.world_size`` may claim; more is ignored (noted in SKIPPED).
MAX_WORLD_SIZE = 1 << 20
#: ``"ts"``/``"dur"`` written as text, a boolean, a list or an object: the columnar parser turns them into null or
#: 1.0 without a word. Searched for only when a parsed ``ts`` is null, 0 or 1 (the scan is slow on big files); a
#: file that has one is re-read by the tolerant parser, which counts them.
_ODD_TIME_RE = re.compile(rb'"(?:ts|dur)"\s*:\s*["tf\[{]')

# --- what we ask the JSON parser for ------------------------------------------------------------

_ARG_FIELDS: dict[str, pl.DataType] = {
    "External id": pl.Int64,
    "correlation": pl.Int64,
    "device": pl.Int64,
    "stream": pl.Int64,
    "Collective name": pl.String,
    "dtype": pl.String,
    "In msg nelems": pl.Int64,
    "Out msg nelems": pl.Int64,
    "Group size": pl.Int64,
    "Process Group Name": pl.String,
    "Process Group Description": pl.String,
    "Process Group Ranks": pl.String,
    "name": pl.String,            # metadata events: process/thread names
    "labels": pl.String,          # metadata events: process labels ("GPU 0")
}

_EVENT_FIELDS: dict[str, pl.DataType] = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "args": pl.Struct(_ARG_FIELDS),
}

_PG_CONFIG = pl.Struct({"pg_name": pl.String, "pg_desc": pl.String, "backend_config": pl.String,
                        "pg_size": pl.Int64, "ranks": pl.List(pl.Int64)})

_DEVICE_FIELDS: dict[str, pl.DataType] = {"id": pl.Int64, "name": pl.String, "totalGlobalMem": pl.Int64,
                                           "computeMajor": pl.Int64, "computeMinor": pl.Int64, "numSms": pl.Int64}

_DOCUMENT_SCHEMA: dict[str, pl.DataType] = {
    "schemaVersion": pl.Int64,
    "baseTimeNanoseconds": pl.Int64,
    "traceName": pl.String,
    "deviceProperties": pl.List(pl.Struct(_DEVICE_FIELDS)),
    "distributedInfo": pl.Struct({"backend": pl.String, "rank": pl.Int64, "world_size": pl.Int64,
                                  "nccl_version": pl.String, "pg_count": pl.Int64,
                                  "pg_config": pl.List(_PG_CONFIG)}),
    "traceEvents": pl.List(pl.Struct(_EVENT_FIELDS)),
}

# --- classification ------------------------------------------------------------------------------

#: Kineto category (lower-cased) → event kind. Older traces use capitalised names.
_KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "cuda_sync": "kernel",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime", "runtime": "runtime",
    "cuda_driver": "driver",
    "python_function": "python",
    "cpu_instant_event": "instant",
    "trace": "trace",
}

#: Communication kernels by name: NCCL (``ncclDevKernel_*``, older ``ncclKernel_*``), RCCL, and the
#: one-rank reduce kernels NCCL runs for a world of one.
COMM_KERNEL_RE = r"(?i)^(nccl|rccl)|ncclDevKernel|ncclKernel|rcclKernel|onerank"
#: Kernels that only synchronise (``cuda_sync`` rows and stream-wait events).
SYNC_CAT = "cuda_sync"

_DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "float64": 8, "double": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}

_STEP_RE = r"^ProfilerStep#(\d+)$"
_GLOO_RE = r"^gloo:(.+)$"
_C10D_RE = r"^c10d::_?([a-z_]+?)_?$"


@dataclass(slots=True)
class TraceTables:
    """The tables read from one trace file, plus what the file says about its rank."""

    path: str
    rank: int
    rank_source: str
    events: pl.DataFrame
    kernels: pl.DataFrame
    collectives: pl.DataFrame
    steps: pl.DataFrame
    skipped: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)


# --- reading -------------------------------------------------------------------------------------


def read_bytes(path: Path) -> bytes:
    """The decompressed bytes of a ``.json`` or ``.json.gz`` file; :class:`TraceError` if unreadable."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            kind = "a directory" if path.is_dir() else "not a regular file (a FIFO, socket or device)"
            raise TraceError(path, f"is {kind}, not a trace file")
        raw = path.read_bytes()
    except IsADirectoryError as exc:
        raise TraceError(path, "is a directory, not a trace file") from exc
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except EOFError as exc:
            raise TraceError(path, "truncated gzip: the compressed data ends early (copy cut short?)") from exc
        except (zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise TraceError(path, f"corrupt gzip data ({exc})") from exc
    if path.suffix == ".gz":
        raise TraceError(path, "named .gz but is not gzip-compressed")
    return raw


def _json_problem(data: bytes) -> str:
    """Say, in a few words, why ``data`` is not a JSON trace (only called on the error path)."""
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        shown = data.lstrip()[:20].decode("utf-8", "replace")
        return f"not JSON (starts with {shown!r})"
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        msg = str(exc)
        if "EOF" in msg or "end of" in msg.lower() or exc.pos >= len(data.rstrip()) - 1:
            return f"truncated JSON: the document ends at byte {len(data)} before it is complete"
        return f"malformed JSON at byte {exc.pos} ({msg.split(':')[0]})"
    return "JSON that does not have the shape of a Chrome trace"


def parse_document(path: Path, data: bytes) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The raw ``traceEvents`` frame and the document's top-level fields (the whole document at once)."""
    stripped = data.lstrip()
    if not stripped:
        raise TraceError(path, "empty file")
    try:
        if stripped[:1] == b"[":  # the Chrome "JSON array" format: a bare list of events
            doc = None
            events = pl.read_json(io.BytesIO(data), schema=_EVENT_FIELDS)
        else:
            doc = pl.read_json(io.BytesIO(data), schema=_DOCUMENT_SCHEMA)
            events = None
    except (pl.exceptions.PolarsError, ValueError, OSError):
        # Valid JSON whose field types the columnar parser cannot take (e.g. an arg that is a
        # number in one event and a list in another): parse it generically and coerce.
        doc, events = _parse_generic(path, data)
    meta: dict[str, Any] = {}
    if doc is not None:
        if doc.height != 1:
            raise TraceError(path, "expected one JSON object at the top level")
        meta = _doc_meta(doc)
        if events is None:
            if doc.get_column("traceEvents")[0] is None:
                raise TraceError(path, "JSON without 'traceEvents': not a Kineto/Chrome trace")
            events = _doc_events(doc)
    assert events is not None
    if events.height == 0 or events.get_column("ph").null_count() == events.height:
        raise TraceError(path, "empty trace: 'traceEvents' holds no events")
    return events, meta


def _doc_meta(doc: pl.DataFrame) -> dict[str, Any]:
    row = doc.drop("traceEvents").row(0, named=True)
    return {k: v for k, v in row.items() if v is not None}


def _doc_events(doc: pl.DataFrame) -> pl.DataFrame:
    return doc.select(pl.col("traceEvents").explode()).unnest("traceEvents")


# --- parsing a large trace in pieces ------------------------------------------------------------

#: A trace bigger than twice this is parsed in pieces of about this many bytes, cut between two
#: events. The JSON parser needs several times its input in memory while it works; pieces bound
#: that, and each piece is reduced to compact columns before the next is parsed.
PIECE_BYTES = 4 << 20

_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_SEP_RE = re.compile(rb"\}\s*,\s*\{")
_LEADING_WS_RE = re.compile(rb"\s*")
_PARSE_ERRORS = (pl.exceptions.PolarsError, ValueError, OSError)


def _pieces(data: bytes) -> Iterator[tuple[str, bytes]] | None:
    """Generator of ``(kind, json)`` pieces of a large trace, or None to parse it whole.

    Kinds: ``"head"`` is ``{<fields before traceEvents>, "traceEvents": []}``; ``"events"`` is
    ``[event, ...]``; ``"tail"`` is the last events with the rest of the document
    (``{"traceEvents": [event, ...], <fields after>}``, or ``[event, ...]`` for the array format).
    A cut at a ``},{`` that is not between two events (inside a string or a nested value) leaves the
    piece before it invalid JSON, so a wrong cut always fails to parse and the caller then parses
    the whole document instead.
    """
    if len(data) < 2 * PIECE_BYTES:
        return None
    begin = _LEADING_WS_RE.match(data).end()  # type: ignore[union-attr]
    if data[begin:begin + 1] == b"[":
        head = None
        first = begin + 1
    elif data[begin:begin + 1] == b"{":
        m = _EVENTS_KEY_RE.search(data, begin)
        if m is None:
            return None
        head = data[:m.end()] + b"]}"
        first = m.end()
    else:
        return None
    cuts: list[tuple[int, int]] = []  # (end of a piece, start of the next)
    pos = first
    while True:
        m = _EVENT_SEP_RE.search(data, pos + PIECE_BYTES)
        if m is None:
            break
        cuts.append((m.start() + 1, m.end() - 1))
        pos = m.end() - 1
    if not cuts:
        return None
    return _piece_iter(data, head, first, cuts)


def _piece_iter(data: bytes, head: bytes | None, first: int,
                cuts: list[tuple[int, int]]) -> Iterator[tuple[str, bytes]]:
    mv = memoryview(data)
    if head is not None:
        yield "head", head
    start = first
    for end, nxt in cuts:
        yield "events", b"".join((b"[", mv[start:end], b"]"))
        start = nxt
    yield "tail", b"".join((b'{"traceEvents":[' if head is not None else b"[", mv[start:]))


def _parse_piece(kind: str, piece: bytes) -> tuple[str, dict[str, Any], _Part | None]:
    """One piece → (kind, the document fields it holds, its events reduced to a :class:`_Part`)."""
    if kind == "head":
        return kind, _doc_meta(pl.read_json(io.BytesIO(piece), schema=_DOCUMENT_SCHEMA)), None
    meta: dict[str, Any] = {}
    if kind == "tail" and piece[:1] == b"{":
        doc = pl.read_json(io.BytesIO(piece), schema=_DOCUMENT_SCHEMA)
        del piece
        meta = _doc_meta(doc)
        raw = _doc_events(doc)
        del doc
    else:
        raw = pl.read_json(io.BytesIO(piece), schema=_EVENT_FIELDS)
        del piece
    return kind, meta, _digest(raw)


def _parse_pieces(data: bytes, threads: int = 1) -> tuple[list[_Part], dict[str, Any]] | None:
    """Parse a large trace piece by piece into compact parts; None when it must be parsed whole.

    With ``threads`` > 1, that many pieces are parsed at once (polars releases the GIL); at most
    ``2 * threads`` pieces are cut ahead of the parser, which bounds the memory in use.
    """
    pieces = _pieces(data)
    if pieces is None:
        return None
    results: list[tuple[str, dict[str, Any], _Part | None]] = []
    try:
        if threads <= 1:
            results = [_parse_piece(kind, piece) for kind, piece in pieces]
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                pending: deque[Future[tuple[str, dict[str, Any], _Part | None]]] = deque()
                try:
                    for kind, piece in pieces:
                        pending.append(pool.submit(_parse_piece, kind, piece))
                        del piece
                        while len(pending) >= 2 * threads:
                            results.append(pending.popleft().result())
                    while pending:
                        results.append(pending.popleft().result())
                finally:
                    for f in pending:
                        f.cancel()
    except _PARSE_ERRORS:
        return None
    head_meta = next((m for k, m, _ in results if k == "head"), {})
    tail_meta = next((m for k, m, _ in results if k == "tail"), {})
    meta = {}
    for k in _DOCUMENT_SCHEMA:
        v = head_meta.get(k)
        if v is None:
            v = tail_meta.get(k)
        if v is not None:
            meta[k] = v
    return [p for _, _, p in results if p is not None], meta


def _coerce(value: Any, dtype: pl.DataType) -> Any:
    """``value`` as ``dtype``; numeric text is read as a number. A ``ts``/``dur`` that is not a number becomes NaN
    (so it is counted as "not a number", not as missing); other fields that are not of their type become null."""
    if value is None:
        return None
    if dtype == pl.String:
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    if dtype == pl.Int64:
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                return None
        return value if isinstance(value, int) and -(2**63) <= value < 2**63 else None
    if dtype == pl.Float64:
        if isinstance(value, bool):
            return float("nan")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                return float("nan")
        return float("nan")
    return value


def _parse_generic(path: Path, data: bytes) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The slow, tolerant parse: orjson to Python objects, then every field coerced to its column type."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, _json_problem(data)) from exc
    if isinstance(obj, list):
        top: dict[str, Any] = {"traceEvents": obj}
    elif isinstance(obj, dict):
        top = obj
    else:
        raise TraceError(path, "JSON that is neither an object nor a list of events")
    raw_events = top.get("traceEvents")
    if raw_events is None:
        raise TraceError(path, "JSON without 'traceEvents': not a Kineto/Chrome trace")
    if not isinstance(raw_events, list):
        raise TraceError(path, "'traceEvents' is not a list")
    columns: dict[str, list[Any]] = {k: [] for k in _EVENT_FIELDS if k != "args"}
    args_rows: list[dict[str, Any] | None] = []
    for ev in raw_events:
        if not isinstance(ev, dict):
            ev = {}
        for k in columns:
            columns[k].append(_coerce(ev.get(k), _EVENT_FIELDS[k]))
        a = ev.get("args")
        args_rows.append({k: _coerce(a.get(k), t) for k, t in _ARG_FIELDS.items()} if isinstance(a, dict) else None)
    events = pl.DataFrame({**columns, "args": args_rows}, schema=_EVENT_FIELDS)
    header = {k: _coerce(v, _DOCUMENT_SCHEMA[k]) for k, v in top.items()
              if k in ("schemaVersion", "baseTimeNanoseconds", "traceName")}
    di = top.get("distributedInfo")
    if isinstance(di, dict):
        fields = _DOCUMENT_SCHEMA["distributedInfo"].to_schema()  # type: ignore[attr-defined]
        header["distributedInfo"] = {k: _coerce(di.get(k), t) for k, t in fields.items() if k != "pg_config"}
        header["distributedInfo"]["pg_config"] = None
    for k in ("deviceProperties",):
        header.pop(k, None)
    doc = pl.DataFrame([{**header, "traceEvents": []}], schema_overrides={
        k: v for k, v in _DOCUMENT_SCHEMA.items() if k in header or k == "traceEvents"
    }, strict=False)
    if isinstance(top.get("deviceProperties"), list):
        doc = doc.with_columns(pl.Series("deviceProperties", [[
            {f: _coerce(d.get(f), t) for f, t in _DEVICE_FIELDS.items()}
            for d in top["deviceProperties"] if isinstance(d, dict)]], dtype=_DOCUMENT_SCHEMA["deviceProperties"]))
    return doc, events


# --- rank ----------------------------------------------------------------------------------------

_RANK_NAME_RES = (
    re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"^(\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$"),
)


def rank_from_name(path: Path) -> int | None:
    """The rank a file name claims (``rank-3``, ``rank3``, ``rank_3``, ``3.<ns>.pt.trace.json``), if any."""
    for rx in _RANK_NAME_RES:
        m = rx.search(path.name)
        if m:
            return int(m.group(1))
    return None


#: ``rank_source`` of a trace that names no rank but is plainly one process (opened as rank 0).
ASSUMED_RANK = "assumed: one process, no rank recorded"


def resolve_rank(path: Path, meta: dict[str, Any], override: int | None,
                 host_pids: int | None = None) -> tuple[int, str]:
    """The rank of this file and where it came from; :class:`TraceError` saying how to supply it.

    A trace with no rank anywhere that is plainly one process (one host pid, and no ``distributedInfo`` world size
    above 1) is rank 0, with ``rank_source`` :data:`ASSUMED_RANK`.
    """
    if override is not None:
        return override, "given"
    info = meta.get("distributedInfo") or {}
    if info.get("rank") is not None:
        return int(info["rank"]), "distributedInfo"
    named = rank_from_name(path)
    if named is not None:
        return named, "file name"
    if host_pids is not None and host_pids <= 1 and (info.get("world_size") or 1) <= 1:
        return 0, ASSUMED_RANK
    raise TraceError(
        path,
        "cannot tell which rank this trace is: no distributedInfo.rank and no rank in the file name "
        "(rank-3, rank_3, rank3, 3.<ns>.pt.trace.json); pass --rank N (Python: rank=N) or rename the file",
    )


def check_meta(meta: dict[str, Any]) -> list[str]:
    """Drop top-level values no real trace has, in place; one note per value dropped (for SKIPPED).

    ``distributedInfo.world_size`` outside 1…:data:`MAX_WORLD_SIZE` (nothing may allocate per claimed rank),
    ``distributedInfo.rank`` outside 0…world size - 1, and a ``baseTimeNanoseconds`` outside 0…4e18.
    """
    notes: list[str] = []
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        info = meta["distributedInfo"] = dict(info)
        ws = info.get("world_size")
        if ws is not None and not (1 <= ws <= MAX_WORLD_SIZE):
            notes.append(f"distributedInfo.world_size = {ws} is not a plausible world size "
                         f"(1…{MAX_WORLD_SIZE}): ignored")
            info["world_size"] = ws = None
        rk = info.get("rank")
        if rk is not None and not (0 <= rk < (ws or MAX_WORLD_SIZE)):
            notes.append(f"distributedInfo.rank = {rk} is not a rank of a world of {ws or MAX_WORLD_SIZE}: ignored")
            info["rank"] = None
    base = meta.get("baseTimeNanoseconds")
    if base is not None and not (0 <= base <= 4 * 10**18):
        notes.append(f"baseTimeNanoseconds = {base} is not a wall-clock time: ignored")
        del meta["baseTimeNanoseconds"]
    return notes


# --- normalising ---------------------------------------------------------------------------------


def _time_origin(meta: dict[str, Any], epoch_share: float | None) -> tuple[int, str]:
    """Nanoseconds to add to ``ts*1000`` and the clock kind ("absolute" or "relative").

    ``epoch_share``: the share of timed events whose ``ts`` looks like µs since the Unix epoch (> 1e14).
    """
    base = meta.get("baseTimeNanoseconds")
    if base is not None:
        return int(base), "absolute"
    # Before mid-2024 Kineto wrote no base; ts then was usually microseconds since the Unix epoch.
    if epoch_share is not None and epoch_share > 0.5:
        return 0, "absolute"
    return 0, "relative"


def _is_number(c: str) -> pl.Expr:
    return pl.col(c).is_not_nan()


def _skipped_counts(raw: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``raw`` that do not become events, counted by reason (unsorted)."""
    ts, dur = pl.col("ts"), pl.col("dur")
    reason = (
        pl.when(pl.col("ph") == "M").then(pl.lit("metadata (process/thread names, kept in ranks)"))
        .when(pl.col("ph").is_in(["s", "f", "t"])).then(pl.lit("flow arrow (link kept as correlation)"))
        .when(pl.col("ph").is_null()).then(pl.lit("no 'ph' field"))
        .when(~pl.col("ph").is_in(["X", "i", "I"]))
        .then(pl.concat_str(pl.lit("unsupported phase '"), pl.col("ph"), pl.lit("'")))
        .when(ts.is_null()).then(pl.lit("no 'ts' field"))
        .when(ts.is_nan()).then(pl.lit("'ts' is not a number (text, boolean, list or object): event dropped"))
        .when(ts < 0).then(pl.lit("negative 'ts': event dropped"))
        .when(ts.is_infinite() | (ts > MAX_TS_US)).then(pl.lit(f"'ts' out of range (over {MAX_TS_US:.0e} µs): event dropped"))
        .when(dur.is_nan()).then(pl.lit("'dur' is not a number (text, boolean, list or object): event dropped"))
        .otherwise(pl.lit(f"'dur' out of range (over {MAX_DUR_US:.0e} µs): event dropped"))
    )
    return (
        raw.lazy().filter(~_is_timed()).select("ph", "ts", "dur")
        .group_by(reason.alias("reason"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .collect()
    )


def _valid_ts() -> pl.Expr:
    ts = pl.col("ts")
    return ts.is_not_null() & ts.is_not_nan() & (ts >= 0) & (ts <= MAX_TS_US)


def _is_timed() -> pl.Expr:
    """Complete and instant events with a usable ``ts`` and (if any) ``dur``; the rest is counted in SKIPPED."""
    dur = pl.col("dur")
    ok_dur = dur.is_null() | (dur.is_not_nan() & (dur <= MAX_DUR_US))
    return pl.col("ph").is_in(["X", "i", "I"]) & _valid_ts() & ok_dur


_DEVICE_OR_ANNOTATION = [*schema.DEVICE_KINDS, "gpu_annotation"]


@dataclass(slots=True)
class _Part:
    """What one piece of ``traceEvents`` holds, reduced to compact columns.

    ``events`` are the timed events with times relative to the clock origin (added once every piece
    is read) and without rank; ``calls`` the ``record_param_comms`` rows with their collective args.
    """

    events: pl.DataFrame
    calls: pl.DataFrame
    skipped: pl.DataFrame
    threads: pl.DataFrame
    timed: int          # events kept
    epoch: int          # of them, those whose ts looks like µs since the Unix epoch
    suspect: bool       # some ts may be text or a boolean the columnar parser turned into null / 0 / 1
    rows: int
    has_ph: bool


def _kind_expr(cats: pl.Series) -> pl.Expr:
    """Each event's kind from its category, looked up once per distinct category."""
    mapping = {c: _KIND_BY_CAT.get(c.lower()) for c in cats.drop_nulls().unique().to_list()}
    kind = pl.col("cat").replace_strict(mapping, default=None, return_dtype=pl.String) if mapping else pl.lit(None, pl.String)
    return pl.when(pl.col("ph") != "X").then(pl.lit("instant")).otherwise(kind.fill_null("other")).cast(schema.EventKindType)


def _us_to_ns(us: pl.Expr) -> pl.Expr:
    """Float microseconds → int64 ns, exact for whole-µs epoch times (``us * 1000`` in float64 is not past 2**53)."""
    whole = us.floor()
    return whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000.0).round().cast(pl.Int64)


def _digest(raw: pl.DataFrame) -> _Part:
    """Reduce a raw ``traceEvents`` frame to a :class:`_Part` (the raw frame can then be dropped)."""
    args = pl.col("args")
    start = _us_to_ns(pl.col("ts"))
    end = _us_to_ns(pl.col("ts") + pl.col("dur").fill_null(0.0).clip(lower_bound=0.0))
    pid = pl.col("pid").cast(pl.Int64, strict=False)
    tid = pl.col("tid").cast(pl.Int64, strict=False)
    timed = raw.lazy().filter(_is_timed()).with_columns(_kind_expr(raw.get_column("cat")).alias("kind"))
    is_device = pl.col("kind").is_in(_DEVICE_OR_ANNOTATION)
    coll = args.struct.field("Collective name")
    events = timed.select(
        "kind",
        pl.col("cat").fill_null("").cast(pl.Categorical()),
        pl.col("name").fill_null("").cast(pl.Categorical()),
        start.alias("start"),
        end.alias("end"),
        pid.alias("pid"),
        tid.alias("tid"),
        pl.when(is_device).then(args.struct.field("device").fill_null(pid)).alias("device"),
        pl.when(is_device).then(args.struct.field("stream").fill_null(tid)).alias("stream"),
        args.struct.field("correlation").alias("correlation"),
        args.struct.field("External id").alias("external_id"),
        (pl.col("cat") == SYNC_CAT).alias("_sync"),
        coll.is_not_null().alias("_coll"),
    )
    calls = timed.filter(
        (pl.col("name") == "record_param_comms") & (pl.col("kind") == "cpu_op") & coll.is_not_null() & (coll != "wait")
    ).select(
        start.alias("start"),
        end.alias("end"),
        args.struct.field("External id").alias("external_id"),
        coll.alias("collective"),
        args.struct.field("dtype").alias("dtype"),
        args.struct.field("In msg nelems").alias("in_elems"),
        args.struct.field("Out msg nelems").alias("out_elems"),
        args.struct.field("Group size").cast(pl.Int32).alias("group_size"),
        args.struct.field("Process Group Name").fill_null("0").alias("pg_name"),
        args.struct.field("Process Group Description").alias("pg_desc"),
        args.struct.field("Process Group Ranks").alias("pg_ranks"),
    )
    threads = raw.lazy().filter((pl.col("ph") == "M") & (pl.col("name") == "thread_name")).select(
        "tid", args.struct.field("name")
    )
    ev, ca, th = pl.collect_all([events, calls, threads])
    # a ts the columnar parser may have made from text (null) or a boolean (0.0 / 1.0)
    suspect = raw.lazy().filter(pl.col("ph").is_in(["X", "i", "I"]) & (
        pl.col("ts").is_null() | pl.col("ts").is_in([0.0, 1.0]))).select(pl.len()).collect().item() > 0
    n_epoch = raw.lazy().filter(_is_timed() & (pl.col("ts") > 1e14)).select(pl.len()).collect().item()
    return _Part(
        events=ev, calls=ca, skipped=_skipped_counts(raw), threads=th,
        timed=ev.height, epoch=int(n_epoch), suspect=suspect,
        rows=raw.height, has_ph=raw.get_column("ph").null_count() < raw.height,
    )


def _steps(events: pl.DataFrame, rank: int) -> pl.DataFrame:
    """``ProfilerStep#N`` ranges as STEPS rows."""
    steps = events.filter(pl.col("kind") == "annotation").select(
        pl.col("name").cast(pl.String).str.extract(_STEP_RE, 1).cast(pl.Int32).alias("step"),
        "start", "end", "dur",
    ).drop_nulls("step").sort("start")
    return schema.conform(
        steps.with_columns(
            pl.lit(rank, pl.Int32).alias("rank"),
            pl.lit("profiler").alias("source"),
            pl.lit(True).alias("profiled"),
        ),
        schema.STEPS,
    )


def _host_steps(starts: pl.Series, steps: pl.DataFrame) -> pl.Series:
    """The step whose host range holds each start: the last step starting at or before it, if it has not ended."""
    ranges = steps.select("start", "end", "step").sort("start")
    at = ranges.get_column("start").search_sorted(starts, side="right").cast(pl.Int64) - 1
    idx = pl.select(pl.when(at >= 0).then(at)).to_series()
    step = ranges.get_column("step").gather(idx)
    s_end = ranges.get_column("end").gather(idx)
    return pl.select(pl.when(starts < s_end).then(step)).to_series().alias("_host_step")


def _launches(events: pl.DataFrame) -> pl.DataFrame:
    """The first runtime/driver row (in file order) of each correlation: the launch of a device row."""
    return events.filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null()).select(
        "correlation", "_host_step", "start", "end", "tid",
    ).unique("correlation", keep="first")


#: SKIPPED reason for device rows launched before the profiler started (see :func:`_assign_steps`).
EARLY_DEVICE_REASON = ("device activity launched before the profiler started (launch not in the trace, correlation "
                       "below the first recorded launch): dropped, as HTA does")


def _assign_steps(events: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Each event's step: the step range containing it on the host; device events take their launch's.

    Device activity whose launch is not in the trace and whose correlation is below the first recorded launch's
    was queued before the profiler started: it is dropped (HTA keeps only kernels whose launch it has), so it is
    put in no step window; the caller counts it in SKIPPED. Returns the events, the launches (correlation,
    _host_step, start, end, tid) for :func:`_kernels`, and how many device rows were dropped.
    """
    if steps.height == 0:
        events = events.with_columns(pl.lit(None, pl.Int32).alias("_host_step"))
    else:
        events = events.with_columns(_host_steps(events.get_column("start"), steps))
    launches = _launches(events)
    events = events.join(
        launches.select("correlation", pl.col("_host_step").alias("_launch_step"), pl.lit(True).alias("_launched")),
        on="correlation", how="left",
    )
    is_dev = pl.col("kind").is_in(_DEVICE_OR_ANNOTATION)
    first_launch = launches.get_column("correlation").min()
    early = pl.lit(False)
    if first_launch is not None:
        early = (pl.col("kind").is_in(list(schema.DEVICE_KINDS)) & pl.col("_launched").is_null()
                 & (pl.col("correlation") < first_launch)).fill_null(False)
    n_all = events.height
    events = events.filter(~early).with_columns(
        pl.when(is_dev).then(pl.coalesce("_launch_step", "_host_step")).otherwise(pl.col("_host_step"))
        .cast(pl.Int32).alias("step")
    ).drop("_host_step", "_launch_step", "_launched")
    return events, launches, n_all - events.height


def _drop_clock_outliers(events: pl.DataFrame, calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Events (and collective calls) whose start is more than :data:`OUTLIER_NS` from the median start, dropped.

    One stray ``ts`` (0, 1.0 from a boolean, a value from another clock) would otherwise stretch the trace's span
    to decades. Returns the kept events and calls and how many events were dropped.
    """
    if events.height == 0:
        return events, calls, 0
    median = events.get_column("start").median()
    if median is None:
        return events, calls, 0
    lo, hi = int(median) - OUTLIER_NS, int(median) + OUTLIER_NS
    inside = pl.col("start").is_between(lo, hi)
    kept = events.filter(inside)
    return kept, calls.filter(inside), events.height - kept.height


def _classify_kernels(events: pl.DataFrame) -> pl.DataFrame:
    """Add ``kernel_class`` to device events: by name, by ``External id`` link to a collective, never by stream."""
    comm_ext = events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("name") == "record_param_comms")
        & pl.col("external_id").is_not_null()
    ).get_column("external_id").unique()
    names = events.filter(pl.col("kind") == "kernel").get_column("name").cast(pl.String).unique()
    comm_names = names.filter(names.str.contains(COMM_KERNEL_RE))
    is_comm = (pl.col("name").cast(pl.String).is_in(comm_names.implode()) | pl.col("external_id").is_in(comm_ext.implode())
               | pl.col("_coll"))
    klass = (
        pl.when(pl.col("kind") == "memcpy").then(pl.lit("memcpy"))
        .when(pl.col("kind") == "memset").then(pl.lit("memset"))
        .when(pl.col("kind") != "kernel").then(pl.lit(None))
        .when(pl.col("_sync")).then(pl.lit("sync"))
        .when(is_comm).then(pl.lit("communication"))
        .otherwise(pl.lit("compute"))
    )
    return events.with_columns(klass.cast(schema.KernelClassType).alias("kernel_class"))


def _kernels(events: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Device activity joined with the runtime/driver launch that has the same correlation."""
    launches = launches.select(
        "correlation",
        pl.col("start").alias("launch_start"),
        pl.col("end").alias("launch_end"),
        pl.col("tid").alias("launch_tid"),
    )
    dev = events.filter(pl.col("kind").is_in(list(schema.DEVICE_KINDS)))
    return schema.conform(dev.join(launches, on="correlation", how="left").sort("start"), schema.KERNELS)


def _dtype_bytes() -> pl.Expr:
    return pl.col("dtype").str.to_lowercase().replace_strict(_DTYPE_BYTES, default=None, return_dtype=pl.Int64)


def _collectives_nccl(calls: pl.DataFrame, kernels: pl.DataFrame, rank: int, backend: str) -> pl.DataFrame:
    """Collectives from ``record_param_comms`` rows with collective args, with their kernels' times."""
    if calls.height == 0:
        return schema.empty(schema.COLLECTIVES)
    comm_kernels = kernels.filter(pl.col("kernel_class") == "communication").group_by("external_id").agg(
        pl.col("name").first().cast(pl.String).alias("kernel_name"),
        pl.col("start").min().alias("kernel_start"),
        pl.col("end").max().alias("kernel_end"),
    )
    out = calls.join(comm_kernels, on="external_id", how="left").sort("start").with_columns(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.lit(backend).alias("backend"),
        (pl.int_range(pl.len()).over("pg_name")).cast(pl.Int64).alias("seq"),
        (pl.max_horizontal("in_elems", "out_elems") * _dtype_bytes()).alias("bytes"),
    )
    return schema.conform(out, schema.COLLECTIVES)


def _collectives_from_kernels(kernels: pl.DataFrame, rank: int, backend: str) -> pl.DataFrame:
    """Collectives read from NCCL kernel names alone (old traces whose ``record_param_comms`` carry no args)."""
    comm = kernels.filter((pl.col("kernel_class") == "communication") & (pl.col("kind") == "kernel")).sort("start")
    if comm.height == 0:
        return schema.empty(schema.COLLECTIVES)
    name = pl.col("name").cast(pl.String)
    out = comm.with_columns(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.lit(backend).alias("backend"),
        pl.lit("0").alias("pg_name"),
        name.str.extract(r"(?i)nccl(?:Dev)?Kernel_([A-Za-z]+)", 1).str.to_lowercase().alias("collective"),
        name.str.extract(r"_(f32|f16|bf16|f64|i8|u8|i32|i64|int8_t|uint8_t|float|half|double)\b", 1).alias("dtype"),
        name.alias("kernel_name"),
        pl.col("start").alias("kernel_start"),
        pl.col("end").alias("kernel_end"),
    ).with_columns(pl.int_range(pl.len()).cast(pl.Int64).alias("seq"))
    return schema.conform(out, schema.COLLECTIVES)


def _collectives_gloo(events: pl.DataFrame, rank: int) -> pl.DataFrame:
    """Gloo collectives: ``gloo:<op>`` annotations on the gloo threads (there is no ``record_param_comms``)."""
    gloo = events.filter(pl.col("kind") == "annotation").with_columns(pl.col("name").cast(pl.String)).filter(
        pl.col("name").str.contains(_GLOO_RE)
    ).sort("start")
    if gloo.height == 0:
        return schema.empty(schema.COLLECTIVES)
    out = gloo.with_columns(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.lit("gloo").alias("backend"),
        pl.lit("0").alias("pg_name"),
        pl.col("name").str.extract(_GLOO_RE, 1).str.replace_all("_", "").alias("collective"),
        pl.col("name").alias("kernel_name"),
        pl.col("start").alias("kernel_start"),
        pl.col("end").alias("kernel_end"),
    ).with_columns(pl.int_range(pl.len()).cast(pl.Int64).alias("seq"))
    return schema.conform(out, schema.COLLECTIVES)


def _backend(meta: dict[str, Any]) -> str:
    info = meta.get("distributedInfo") or {}
    return str(info.get("backend") or "nccl")


def read_trace(path: str | Path, *, rank: int | None = None, threads: int = 1) -> TraceTables:
    """Read one Kineto trace file into tables; :class:`TraceError` names the file and the problem.

    A large file is parsed in pieces, ``threads`` of them at once. Events whose ``ts``/``dur`` is not a usable
    number, and clock outliers, are dropped and counted in ``skipped`` with the reason.
    """
    path = Path(path)
    try:
        return _read_trace(path, rank, threads)
    except TraceError:
        raise
    except MemoryError:
        raise TraceError(path, "not enough memory to read this trace") from None
    except Exception as exc:  # a shape no real trace has: one line naming the file, never a traceback
        raise TraceError(path, f"could not be read ({type(exc).__name__}: {exc})") from exc


def _read_trace(path: Path, rank: int | None, threads: int) -> TraceTables:
    data = read_bytes(path)
    parsed = _parse_pieces(data, threads)
    if parsed is None:
        raw, meta = parse_document(path, data)
        parts = [_digest(raw)]
        del raw
    else:
        parts, meta = parsed
        if not any(p.has_ph for p in parts):
            raise TraceError(path, "empty trace: 'traceEvents' holds no events")
    if any(p.suspect for p in parts) and _ODD_TIME_RE.search(data):
        # the columnar parser turned a text/boolean ts into null or 1.0: re-read tolerantly, to count them
        doc, raw = _parse_generic(path, data)
        meta = _doc_meta(doc)
        parts = [_digest(raw)]
        del doc, raw
    del data
    notes = check_meta(meta)
    timed = sum(p.timed for p in parts)
    origin, clock = _time_origin(meta, sum(p.epoch for p in parts) / timed if timed else None)
    skipped_parts = [p.skipped for p in parts]
    meta["thread_names"] = {
        str(t): str(n) for p in parts for t, n in p.threads.iter_rows() if t is not None and n is not None
    }
    events = pl.concat([p.events for p in parts], rechunk=True).with_columns(
        pl.col("start") + origin, pl.col("end") + origin
    )
    calls = pl.concat([p.calls for p in parts]).with_columns(pl.col("start") + origin, pl.col("end") + origin)
    del parts
    events, calls, outliers = _drop_clock_outliers(events, calls)
    if outliers:
        notes.append(f"'ts' more than {OUTLIER_NS // 86_400_000_000_000} days from the trace's median time "
                     f"(a clock outlier): event dropped")
    pids = events.filter(~pl.col("kind").is_in(_DEVICE_OR_ANNOTATION)).get_column("pid").drop_nulls().unique()
    meta["host_pids"] = sorted(int(x) for x in pids.to_list())[:64]
    rank_value, rank_source = resolve_rank(path, meta, rank, pids.len())
    note_rows = pl.DataFrame(
        {"reason": notes, "count": [outliers if n.startswith("'ts' more") else 1 for n in notes]},
        schema={"reason": pl.String, "count": pl.Int64},
    )
    events = events.select(
        pl.lit(rank_value, pl.Int32).alias("rank"), "kind", "cat", "name", "start", "end",
        (pl.col("end") - pl.col("start")).alias("dur"),
        "pid", "tid", "device", "stream", "correlation", "external_id", "_sync", "_coll",
    )
    steps = _steps(events, rank_value)
    events, launches, early = _assign_steps(events, steps)
    if early:
        skipped_parts.append(pl.DataFrame({"reason": [EARLY_DEVICE_REASON], "count": [early]},
                                          schema={"reason": pl.String, "count": pl.Int64}))
    skipped = (
        pl.concat([*skipped_parts, note_rows]).group_by("reason").agg(pl.col("count").sum()).sort("reason")
        .with_columns(pl.lit(rank_value, pl.Int32).alias("rank"), pl.lit(str(path)).alias("file"))
    )
    events = _classify_kernels(events)
    kernels = _kernels(events, launches)
    del launches
    backend = _backend(meta)
    if backend == "gloo" or any(n.startswith("gloo:") for n in events.get_column("name").cast(pl.String).unique().to_list()):
        collectives = _collectives_gloo(events, rank_value)
    else:
        calls = calls.select(
            "start", "end", "external_id",
            (_host_steps(calls.get_column("start"), steps) if steps.height else pl.lit(None)).cast(pl.Int32).alias("step"),
            pl.exclude("start", "end", "external_id"),
        )
        collectives = _collectives_nccl(calls, kernels, rank_value, backend)
        if collectives.height == 0:
            collectives = _collectives_from_kernels(kernels, rank_value, backend)
    span = [int(events.get_column("start").min()), int(events.get_column("end").max())] if events.height else None
    meta.update(clock=clock, origin_ns=origin, rank_source=rank_source, span_ns=span)
    return TraceTables(
        path=str(path),
        rank=rank_value,
        rank_source=rank_source,
        events=schema.conform(events.sort("start"), schema.EVENTS),
        kernels=kernels,
        collectives=collectives,
        steps=steps,
        skipped=schema.conform(skipped, schema.SKIPPED),
        meta=meta,
    )


def same_rank_windows(parts: list[Any], problems: list[str] | None = None) -> tuple[list[Any], list[str]]:
    """Check that files claiming one rank are successive profiler windows of one process: (parts kept, notes).

    ``parts``: anything with ``rank``, ``path``, ``rank_source`` and the ``meta`` :func:`read_trace` writes
    (``host_pids``, ``span_ns``). Two files of one rank are windows of one process (``tensorboard_trace_handler``
    writes one file per profiler cycle) when they share a host pid and their time spans do not overlap: both are
    kept, as a run directory's windows are, with a note. Anything else is two processes claiming one rank: an
    :class:`InputError` naming both files — or, with ``problems`` given (``on_error="skip"``), that line appended
    there and the second file left out. A file whose rank 0 was only assumed (:data:`ASSUMED_RANK`) always gives
    way to a file that names its rank.
    """
    by_rank: dict[int, list[Any]] = {}
    for p in parts:
        by_rank.setdefault(p.rank, []).append(p)
    notes: list[str] = []
    dropped: set[int] = set()
    for rank, group in sorted(by_rank.items()):
        if len(group) < 2:
            continue
        named = [p for p in group if p.rank_source != ASSUMED_RANK]
        if named:  # a rankless file beside files that name rank 0: it is not rank 0
            for p in group:
                if p.rank_source == ASSUMED_RANK:
                    msg = (f"{p.path}: no rank recorded, and rank {rank} is {named[0].path}'s: "
                           "pass --rank N (Python: rank=N) or rename it rank-N.json(.gz)")
                    if problems is None:
                        raise InputError(msg)
                    problems.append(msg)
                    dropped.add(id(p))
            group = named
        kept: list[Any] = []
        for span, p in sorted(((tuple(p.meta.get("span_ns") or (0, 0)), p) for p in group), key=lambda sp: sp[0]):
            prev = kept[-1] if kept else None
            if prev is not None:
                prev_end = (prev.meta.get("span_ns") or (0, 0))[1]
                shared_pid = set(prev.meta.get("host_pids") or []) & set(p.meta.get("host_pids") or [])
                if not (shared_pid and prev_end <= span[0]):
                    why = "one process" if shared_pid else "different processes"
                    hint = ("; neither names its rank: rename them rank-N.json(.gz) or open them one at a time "
                            "with --rank" if prev.rank_source == ASSUMED_RANK == p.rank_source else "")
                    msg = (f"two trace files claim rank {rank}: {prev.path} and {p.path} "
                           f"({why}, {'overlapping' if prev_end > span[0] else 'successive'} time spans){hint}")
                    if problems is None:
                        raise InputError(msg)
                    problems.append(msg + f": {Path(p.path).name} left out")
                    dropped.add(id(p))
                    continue
            kept.append(p)
        if len(kept) > 1:
            notes.append(f"rank {rank}: {len(kept)} profiler windows of one process "
                         f"({', '.join(Path(p.path).name for p in kept)}): read as successive windows")
    return [p for p in parts if id(p) not in dropped], notes
