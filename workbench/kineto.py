"""One Kineto (torch.profiler) Chrome-trace file → the workbench tables for its rank.

The JSON is parsed straight into columns by polars (no Python object per event), then events
are normalised: absolute int64 ns times, a ``kind`` per category, kernel classes by name and by
the ``External id`` link to ``record_param_comms`` (never by stream), collectives, steps.

Example:
    >>> tables = read_trace("rank-0.json.gz")          # doctest: +SKIP
    >>> tables.kernels.group_by("kernel_class").len()   # doctest: +SKIP
"""

from __future__ import annotations

import io
import re
import zlib
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from workbench import rundir, schema
from workbench.communication import COMM_CALL, COMM_KERNEL_RE, GLOO_OP_RE
from workbench.errors import InputError, TraceError, one_line
from workbench.regular_file import read_regular

#: Bump when parsing or classification changes what a trace file yields (the cache key includes it).
PARSER_VERSION = 5

#: Largest ``ts`` (µs) taken as a time: past it ``baseTimeNanoseconds + ts * 1000`` would not fit int64 ns
#: (4e15 µs since the epoch is the year 2096). Larger, negative or non-finite values drop the event (SKIPPED).
MAX_TS_US = 4e15
#: Longest ``dur`` (µs) taken as a duration (about 28 hours); longer, or non-finite, drops the event.
MAX_DUR_US = 1e11
#: A stretch this long with no activity at all, longer also than the rest of the trace, is a jump of the clock:
#: the events beyond it are dropped (SKIPPED, ``clock jump``). See :func:`_drop_clock_jumps`.
CLOCK_JUMP_NS = 60 * 10**9
#: The most ranks a ``distributedInfo.world_size`` may claim; more is ignored (noted in SKIPPED).
MAX_WORLD_SIZE = 1_000_000
#: The most bytes a trace file may have, and the most its JSON may have once decompressed.
MAX_TRACE_BYTES = 8 << 30
#: A boolean ``"ts"``/``"dur"`` becomes 0.0 or 1.0, and a number or boolean ``"name"``/``"cat"``/``"ph"`` becomes
#: text, in the columnar parser without a word. These are searched for only when a parsed value could have come
#: from one (a ``ts``/``dur`` of 0 or 1, a name that reads as a number); a file that has one is re-read by the
#: tolerant parser, which counts them. (Text, lists and objects in number fields make the columnar parser fail, so
#: those files are read by the tolerant parser anyway.)
_ODD_TS_RE = re.compile(rb'"ts":\s*[tf]')
_ODD_DUR_RE = re.compile(rb'"dur":\s*[tf]')
_ODD_TEXT_RES = (re.compile(rb'"name":\s*[-0-9tf]'), re.compile(rb'"cat":\s*[-0-9tf]'),
                 re.compile(rb'"ph":\s*[-0-9tf]'))
_NUMBER_LIKE = r"^(?:-?[0-9][0-9.eE+-]*|true|false)$"

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
    "Python id": pl.Int64,        # python_function events: what tells two calls at one time apart (_dedupe)
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

# baseTimeNanoseconds, rank and world_size are read as text and checked by :func:`check_meta`: the columnar parser
# would make a 20-digit number null and a boolean 1 without a word.
_DOCUMENT_SCHEMA: dict[str, pl.DataType] = {
    "schemaVersion": pl.Int64,
    "baseTimeNanoseconds": pl.String,
    "traceName": pl.String,
    "deviceProperties": pl.List(pl.Struct(_DEVICE_FIELDS)),
    "distributedInfo": pl.Struct({"backend": pl.String, "rank": pl.String, "world_size": pl.String,
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

#: Kernels that only synchronise (``cuda_sync`` rows and stream-wait events).
SYNC_CAT = "cuda_sync"

_DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "float64": 8, "double": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "complexfloat": 8, "complexdouble": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}

_STEP_RE = r"^ProfilerStep#(\d+)$"
_GLOO_RE = GLOO_OP_RE
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


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """The decompressed bytes of a ``.json`` or ``.json.gz`` file; :class:`TraceError` if unreadable.

    Only a regular file is opened (a FIFO cannot block the reader), and neither the file nor its decompressed
    JSON may pass ``max_bytes`` (default :data:`MAX_TRACE_BYTES`).
    """
    max_bytes = MAX_TRACE_BYTES if max_bytes is None else max_bytes
    raw = read_regular(path, max_bytes, what="trace file").data
    if raw[:2] == b"\x1f\x8b":
        return gunzip(path, raw, max_bytes)
    if path.suffix == ".gz":
        raise TraceError(path, "named .gz but is not gzip-compressed")
    return raw


def gunzip(path: Path, raw: bytes, max_bytes: int, what: str = "a trace") -> bytes:
    """The gzip members of ``raw`` decompressed, never more than ``max_bytes`` (a gzip bomb is one line)."""
    out: list[bytes] = []
    total = 0
    rest = raw
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(rest, max_bytes - total + 1)
        except zlib.error as exc:
            raise TraceError(path, f"corrupt gzip data ({exc})") from None
        total += len(chunk)
        if total > max_bytes:
            raise TraceError(path, f"decompresses to more than {max_bytes:,} bytes (the limit for {what}): not read")
        out.append(chunk)
        if not d.eof:
            raise TraceError(path, "truncated gzip: the compressed data ends early (copy cut short?)")
        rest = d.unused_data
        if not rest.strip(b"\x00"):
            break  # zero padding after the last member
        if rest[:2] != b"\x1f\x8b":
            raise TraceError(path, "corrupt gzip data (bytes that are not gzip after the compressed data)")
    return out[0] if len(out) == 1 else b"".join(out)


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


def parse_document(path: Path, data: bytes) -> tuple[pl.DataFrame, dict[str, Any], Counter]:
    """The raw ``traceEvents`` frame, the document's top-level fields (the whole document at once), and the fields
    of the wrong type the tolerant parser coerced or dropped, counted by SKIPPED reason."""
    stripped = data.lstrip()
    if not stripped:
        raise TraceError(path, "empty file")
    odd: Counter = Counter()
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
        doc, events, odd = _parse_generic(path, data)
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
    return events, meta, odd


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


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value, in words."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return "list" if isinstance(value, list) else "object" if isinstance(value, dict) else "null"


def _coerce(value: Any, dtype: pl.DataType, field: str, odd: Counter) -> Any:
    """``value`` as ``dtype``, counting in ``odd`` (by SKIPPED reason) every value that was not of its type.

    Numeric text is read as a number, and anything in a text field becomes text (a list or an object as its JSON);
    a ``ts``/``dur`` that is not a number becomes NaN (counted later as "not a number": its event is dropped); a
    value that cannot be read as an integer becomes null. ``pid``/``tid`` are numbers or text alike.
    """
    if value is None:
        return None
    if dtype == pl.String:
        if isinstance(value, str):
            return value
        if field not in ("pid", "tid"):
            odd[f"'{field}' of the wrong type ({_json_type(value)}, not text): read as text"] += 1
        return orjson.dumps(value).decode()
    if dtype == pl.Int64:
        if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        if isinstance(value, str):
            text = value.strip()
            try:
                n = int(text, 16) if text[:2].lower() == "0x" else int(text)
            except ValueError:
                n = None
            if n is not None and -(2**63) <= n < 2**63:
                odd[f"'{field}' of the wrong type (text, not a number): read as a number"] += 1
                return n
        odd[f"'{field}' of the wrong type ({_json_type(value)}, not an integer): ignored"] += 1
        return None
    if dtype == pl.Float64:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                x = float(value.strip())
            except ValueError:
                return float("nan")
            odd[f"'{field}' of the wrong type (text, not a number): read as a number"] += 1
            return x
        return float("nan")
    return value


def _parse_generic(path: Path, data: bytes) -> tuple[pl.DataFrame, pl.DataFrame, Counter]:
    """The slow, tolerant parse: orjson to Python objects, then every field coerced to its column type.

    Returns the document's fields, the raw events and the values that were not of their type, counted by SKIPPED
    reason (``wrong type``): a name that is not text is read as text, ``args`` that are not an object are left
    out (the event is kept), an event that is not an object is dropped.
    """
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
    odd: Counter = Counter()
    columns: dict[str, list[Any]] = {k: [] for k in _EVENT_FIELDS if k != "args"}
    args_rows: list[dict[str, Any] | None] = []
    for ev in raw_events:
        if not isinstance(ev, dict):
            odd[f"event of the wrong type ({_json_type(ev)}, not an object): dropped"] += 1
            continue
        for k in columns:
            columns[k].append(_coerce(ev.get(k), _EVENT_FIELDS[k], k, odd))
        a = ev.get("args")
        if a is not None and not isinstance(a, dict):
            odd[f"'args' of the wrong type ({_json_type(a)}, not an object): left out, the event kept"] += 1
        args_rows.append({k: _coerce(a.get(k), t, f"args.{k}", odd) for k, t in _ARG_FIELDS.items()}
                         if isinstance(a, dict) else None)
    events = pl.DataFrame({**columns, "args": args_rows}, schema=_EVENT_FIELDS)
    header = {k: _coerce(v, _DOCUMENT_SCHEMA[k], k, Counter()) for k, v in top.items()
              if k in ("schemaVersion", "baseTimeNanoseconds", "traceName")}
    di = top.get("distributedInfo")
    if isinstance(di, dict):
        fields = _DOCUMENT_SCHEMA["distributedInfo"].to_schema()  # type: ignore[attr-defined]
        header["distributedInfo"] = {k: _coerce(di.get(k), t, f"distributedInfo.{k}", Counter())
                                     for k, t in fields.items() if k != "pg_config"}
        header["distributedInfo"]["pg_config"] = None
    doc = pl.DataFrame([{**header, "traceEvents": []}], schema_overrides={
        k: v for k, v in _DOCUMENT_SCHEMA.items() if k in header or k == "traceEvents"
    }, strict=False)
    if isinstance(top.get("deviceProperties"), list):
        doc = doc.with_columns(pl.Series("deviceProperties", [[
            {f: _coerce(d.get(f), t, f"deviceProperties.{f}", Counter()) for f, t in _DEVICE_FIELDS.items()}
            for d in top["deviceProperties"] if isinstance(d, dict)]], dtype=_DOCUMENT_SCHEMA["deviceProperties"]))
    return doc, events, odd


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
                 host_pids: int | None = None, notes: list[str] | None = None) -> tuple[int, str]:
    """The rank of this file and where it came from; :class:`TraceError` saying how to supply it.

    A trace with no rank anywhere that is plainly one process (one host pid, and no ``distributedInfo`` world size
    above 1) is rank 0, with ``rank_source`` :data:`ASSUMED_RANK` — unless it states a rank that is not one (one of
    ``notes``, from :func:`check_meta`): then the user is asked which rank it is.
    """
    if override is not None:
        if not 0 <= override < rundir.RANK_LIMIT:
            raise TraceError(path, f"rank {override} given for this file is not a rank (0 to 2**31 - 1)")
        return override, "given"
    info = meta.get("distributedInfo") or {}
    if info.get("rank") is not None:
        return int(info["rank"]), "distributedInfo"
    named = rank_from_name(path)
    if named is not None:
        if named >= rundir.RANK_LIMIT:
            raise TraceError(path, f"the file name claims rank {one_line(str(named), 40)}, which is not a rank "
                                   "(0 to 2**31 - 1); pass --rank N (Python: rank=N) or rename the file")
        return named, "file name"
    bad = next((n.removesuffix(": ignored") for n in notes or [] if n.startswith("distributedInfo.rank =")), None)
    if bad is None and host_pids is not None and host_pids <= 1 and (info.get("world_size") or 1) <= 1:
        return 0, ASSUMED_RANK
    raise TraceError(
        path,
        f"cannot tell which rank this trace is: {bad or 'no distributedInfo.rank'} and no rank in the file name "
        "(rank-3, rank_3, rank3, 3.<ns>.pt.trace.json); pass --rank N (Python: rank=N) or rename the file",
    )


def _whole_number(value: Any) -> int | None:
    """An integer from a header value (a number, or text the columnar parser made of one); None if it is none."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        x = float(text)
    except ValueError:
        return None
    return int(x) if x.is_integer() else None


def check_meta(meta: dict[str, Any], override: int | None = None) -> list[str]:
    """Check the top-level values in place: each becomes an integer, or is dropped with one note (for SKIPPED).

    ``distributedInfo.world_size`` must be an integer from 1 to :data:`MAX_WORLD_SIZE` (nothing may allocate per
    claimed rank), ``distributedInfo.rank`` one from 0 to world size - 1 (and below 2**31), and
    ``baseTimeNanoseconds`` one from 0 to 4e18. A rank that differs from ``override`` (the run directory's folder,
    or ``--rank``) is noted too: the override is used.
    """
    notes: list[str] = []
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        info = meta["distributedInfo"] = dict(info)
        raw = info.get("world_size")
        ws = _whole_number(raw)
        if raw is not None and (ws is None or not 1 <= ws <= MAX_WORLD_SIZE):
            notes.append(f"distributedInfo.world_size = {one_line(str(raw), 40)} is not a world size "
                         f"(an integer from 1 to {MAX_WORLD_SIZE}): ignored")
            ws = None
        info["world_size"] = ws
        raw = info.get("rank")
        rk = _whole_number(raw)
        limit = min(ws or rundir.RANK_LIMIT, rundir.RANK_LIMIT)
        if raw is not None and (rk is None or not 0 <= rk < limit):
            world = f"of a world of {ws}" if ws else "(an integer from 0 to 2**31 - 1)"
            notes.append(f"distributedInfo.rank = {one_line(str(raw), 40)} is not a rank {world}: ignored")
            rk = None
        elif rk is not None and override is not None and rk != override:
            notes.append(f"distributedInfo.rank = {rk} differs from the rank the file is read as ({override}): "
                         f"{override} used")
        info["rank"] = rk
    raw = meta.get("baseTimeNanoseconds")
    if raw is not None:
        base = _whole_number(raw)
        if base is None or not 0 <= base <= 4 * 10**18:
            notes.append(f"baseTimeNanoseconds = {one_line(str(raw), 40)} is not a wall-clock time: ignored")
            del meta["baseTimeNanoseconds"]
        else:
            meta["baseTimeNanoseconds"] = base
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


#: SKIPPED reasons of events dropped for their duration (the stable phrases of docs/security: ``negative 'dur'``,
#: ``no 'dur'``).
NEGATIVE_DUR_REASON = "negative 'dur': event dropped (not clamped to 0)"
NO_DUR_REASON = "no 'dur' (a complete 'X' event without a duration, or a null one): event dropped"


def _skipped_counts(raw: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``raw`` that do not become events, counted by reason (unsorted)."""
    ts, dur = pl.col("ts"), pl.col("dur")
    reason = (
        pl.when(pl.col("ph") == "M").then(pl.lit("metadata (process/thread names, kept in ranks)"))
        .when(pl.col("ph").is_in(["s", "f", "t"])).then(pl.lit("flow arrow (link kept as correlation)"))
        .when(pl.col("ph").is_null()).then(pl.lit("no 'ph' field: event dropped"))
        .when(~pl.col("ph").is_in(["X", "i", "I"]))
        .then(pl.concat_str(pl.lit("unsupported phase '"), pl.col("ph"), pl.lit("'")))
        .when(ts.is_null()).then(pl.lit("no 'ts' field"))
        .when(ts.is_nan()).then(pl.lit("'ts' is not a number (wrong type: text, boolean, list or object): "
                                       "event dropped"))
        .when(ts < 0).then(pl.lit("negative 'ts' (before the trace's start: a clock jump or a corrupt time): event dropped"))
        .when(ts.is_infinite() | (ts > MAX_TS_US)).then(pl.lit(f"'ts' out of range (over {MAX_TS_US:.0e} µs): event dropped"))
        .when(dur.is_null()).then(pl.lit(NO_DUR_REASON))
        .when(dur.is_nan()).then(pl.lit("'dur' is not a number (wrong type: text, boolean, list or object): "
                                        "event dropped"))
        .when(dur < 0).then(pl.lit(NEGATIVE_DUR_REASON))
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
    """Complete events with a usable ``ts`` and ``dur`` and instant events with a usable ``ts`` (never null); the
    rest is counted in SKIPPED."""
    dur = pl.col("dur")
    ok_dur = dur.is_not_null() & dur.is_not_nan() & (dur >= 0) & (dur <= MAX_DUR_US)
    ph = pl.col("ph")
    return (((ph == "X") & ok_dur) | ph.is_in(["i", "I"])).fill_null(False) & _valid_ts().fill_null(False)


_DEVICE_OR_ANNOTATION = list(schema.DEVICE_TIMELINE_KINDS)


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
    suspect: bool       # some ts may be a boolean the columnar parser turned into 0 / 1
    rows: int
    has_ph: bool
    suspect_dur: bool = False   # some dur may be a boolean (0.0 / 1.0)
    suspect_text: bool = False  # some name, cat or ph may be a number or boolean the parser turned into text


def _kind_expr(cats: pl.Series) -> pl.Expr:
    """Each event's kind from its category, looked up once per distinct category."""
    mapping = {c: _KIND_BY_CAT.get(c.lower()) for c in cats.drop_nulls().unique().to_list()}
    kind = pl.col("cat").replace_strict(mapping, default=None, return_dtype=pl.String) if mapping else pl.lit(None, pl.String)
    return pl.when(pl.col("ph") != "X").then(pl.lit("instant")).otherwise(kind.fill_null("other")).cast(schema.EventKindType)


def _us_to_ns(us: pl.Expr) -> pl.Expr:
    """Float microseconds → int64 ns, exact for whole-µs epoch times (``us * 1000`` in float64 is not past 2**53)."""
    whole = us.floor()
    return whole.cast(pl.Int64) * 1000 + ((us - whole) * 1000.0).round().cast(pl.Int64)


#: An event kept without its name: ``name`` missing or JSON null.
NO_NAME_REASON = "'name' missing or null (wrong type: null, not text): kept without a name"


def _digest(raw: pl.DataFrame) -> _Part:
    """Reduce a raw ``traceEvents`` frame to a :class:`_Part` (the raw frame can then be dropped)."""
    args = pl.col("args")
    start = _us_to_ns(pl.col("ts"))
    end = pl.when(pl.col("ph") == "X").then(_us_to_ns(pl.col("ts") + pl.col("dur"))).otherwise(start)
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
        args.struct.field("Python id").alias("_uid"),  # what else tells two events apart (_dedupe); mostly null
    )
    calls = timed.filter(
        (pl.col("name") == COMM_CALL) & (pl.col("kind") == "cpu_op") & coll.is_not_null() & (coll != "wait")
    ).select(
        start.alias("start"),
        end.alias("end"),
        args.struct.field("External id").alias("external_id"),
        coll.alias("collective"),
        args.struct.field("dtype").alias("dtype"),
        args.struct.field("In msg nelems").alias("in_elems"),
        args.struct.field("Out msg nelems").alias("out_elems"),
        args.struct.field("Group size").cast(pl.Int32, strict=False).alias("group_size"),
        args.struct.field("Process Group Name").fill_null("0").alias("pg_name"),
        args.struct.field("Process Group Description").alias("pg_desc"),
        args.struct.field("Process Group Ranks").alias("pg_ranks"),
    )
    threads = raw.lazy().filter((pl.col("ph") == "M") & (pl.col("name") == "thread_name")).select(
        "tid", args.struct.field("name")
    )
    ev, ca, th = pl.collect_all([events, calls, threads])
    # a ts or dur the columnar parser may have made from a boolean (0.0 / 1.0)
    flags = raw.lazy().select(
        (pl.col("ph").is_in(["X", "i", "I"]) & (pl.col("ts").is_null() | pl.col("ts").is_in([0.0, 1.0])))
        .any().alias("ts"),
        ((pl.col("ph") == "X") & pl.col("dur").is_in([0.0, 1.0])).any().alias("dur"),
        (_is_timed() & (pl.col("ts") > 1e14)).sum().alias("epoch"),
        (_is_timed() & pl.col("name").is_null()).sum().alias("no_name"),
    ).collect().row(0, named=True)
    skipped = _skipped_counts(raw)
    if flags["no_name"]:
        skipped = pl.concat([skipped, pl.DataFrame({"reason": [NO_NAME_REASON], "count": [int(flags["no_name"])]},
                                                   schema=skipped.schema)])
    number_like = (pl.col("v").str.contains(_NUMBER_LIKE)).any()
    odd_text = any(
        bool(pl.DataFrame({"v": raw.get_column(c).drop_nulls().unique()}).select(number_like).item())
        for c in ("ph", "cat", "name"))
    return _Part(
        events=ev, calls=ca, skipped=skipped, threads=th,
        timed=ev.height, epoch=int(flags["epoch"] or 0), suspect=bool(flags["ts"]),
        rows=raw.height, has_ph=raw.get_column("ph").null_count() < raw.height,
        suspect_dur=bool(flags["dur"]), suspect_text=odd_text,
    )


#: SKIPPED reason of a ``ProfilerStep#N`` whose N does not fit a step number.
STEP_RANGE_REASON = "ProfilerStep number out of range (2**31 or more): not read as a step (the range stays an event)"


def _steps(events: pl.DataFrame, rank: int) -> tuple[pl.DataFrame, int]:
    """``ProfilerStep#N`` ranges as STEPS rows, and how many named a step number out of range (left out)."""
    named = events.filter(pl.col("kind") == "annotation").select(
        pl.col("name").cast(pl.String).str.extract(_STEP_RE, 1).alias("_n"), "start", "end", "dur",
    ).drop_nulls("_n")
    steps = named.with_columns(pl.col("_n").cast(pl.Int64, strict=False)).filter(pl.col("_n") < 2**31)
    bad = named.height - steps.height
    steps = steps.select(pl.col("_n").cast(pl.Int32).alias("step"), "start", "end", "dur").sort("start")
    return schema.conform(
        steps.with_columns(
            pl.lit(rank, pl.Int32).alias("rank"),
            pl.lit("profiler").alias("source"),
            pl.lit(True).alias("profiled"),
        ),
        schema.STEPS,
    ), bad


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


#: SKIPPED reasons of :func:`_drop_clock_jumps`, :func:`_dedupe` and :func:`_kernels`.
CLOCK_JUMP_REASON = (f"clock jump: 'ts' over {CLOCK_JUMP_NS // 10**9} s away from the rest of the trace with nothing "
                     "in between, further than the rest lasts (a clock outlier or a jump of the clock): event dropped")
DUPLICATE_REASON = "duplicate event (an exact copy of another event of the file): one kept"
BEFORE_LAUNCH_REASON = ("device activity that starts before its launch (host and device clocks disagree): kept, "
                        "without its launch times")


def _drop_clock_jumps(events: pl.DataFrame, calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Events (and collective calls) cut off from the bulk of the trace by a jump of the clock, dropped.

    The trace is split where nothing is running for more than :data:`CLOCK_JUMP_NS`. The part with the most events
    is kept, with each neighbouring part whose gap to it is no longer than what is kept already lasts; the rest
    is dropped. One stray ``ts`` (0, a value from another clock) or a clock that jumped an hour would otherwise
    stretch the trace's span to decades or to that hour. Returns the kept events and calls and how many events
    were dropped.
    """
    if events.height < 2:
        return events, calls, 0
    starts = events.get_column("start")
    if events.get_column("end").max() - starts.min() <= CLOCK_JUMP_NS:  # type: ignore[operator]
        return events, calls, 0
    iv = events.select("start", "end").sort("start")
    reach = iv.get_column("end").cum_max()
    gaps = (iv.get_column("start") - reach.shift(1)).fill_null(0)
    cuts = (gaps > CLOCK_JUMP_NS).arg_true().to_list()
    if not cuts:
        return events, calls, 0
    bounds = [0, *cuts, iv.height]
    first = iv.get_column("start")
    parts = [(int(first[a]), int(reach[b - 1]), b - a, int(first[b - 1])) for a, b in zip(bounds, bounds[1:])]
    best = max(range(len(parts)), key=lambda i: (parts[i][2], -i))
    lo = hi = best
    while True:
        span = parts[hi][1] - parts[lo][0]
        left = parts[lo][0] - parts[lo - 1][1] if lo > 0 else None
        right = parts[hi + 1][0] - parts[hi][1] if hi + 1 < len(parts) else None
        if right is not None and right <= span and (left is None or right <= left or left > span):
            hi += 1
        elif left is not None and left <= span:
            lo -= 1
        else:
            break
    inside = pl.col("start").is_between(parts[lo][0], parts[hi][3])
    kept = events.filter(inside)
    return kept, calls.filter(inside), events.height - kept.height


def _dedupe(events: pl.DataFrame, calls: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Exact duplicates dropped, the first kept: events equal in every column read (times, names, ids; a Python
    call's ``Python id``), and the collective calls they make. Returns both and how many events were dropped.

    Only events sharing their start and end with another are compared column by column (found by one sort of a
    number made of both), so a trace without duplicates costs a sort, not a hash of every column.
    """
    if events.height < 2:
        return events, calls, 0
    key = events.get_column("start").to_numpy() * 1_000_003 + events.get_column("end").to_numpy()  # wraps: fine
    order = np.argsort(key, kind="stable")
    same = key[order][1:] == key[order][:-1]
    if not same.any():
        return events, calls, 0
    rows = np.unique(np.concatenate((order[1:][same], order[:-1][same])))
    shared = events[rows]
    again = rows[~shared.select(pl.struct(pl.all()).is_first_distinct()).to_series().to_numpy()]
    if not len(again):
        return events, calls, 0
    keep = np.ones(events.height, dtype=bool)
    keep[again] = False
    return events.filter(pl.Series(keep)), calls.unique(maintain_order=True), len(again)


def _classify_kernels(events: pl.DataFrame) -> pl.DataFrame:
    """Add ``kernel_class`` to device events: by name, by ``External id`` link to a collective, never by stream."""
    comm_ext = events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("name") == COMM_CALL)
        & pl.col("external_id").is_not_null()
    ).get_column("external_id").unique()
    names = events.filter(pl.col("kind") == "kernel").get_column("name").cast(pl.String).unique()
    comm_names = names.filter(names.str.contains(COMM_KERNEL_RE))   # workbench.communication: the one definition
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


def _kernels(events: pl.DataFrame, launches: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Device activity joined with the runtime/driver launch that has the same correlation, and how many start
    before their launch (impossible on one clock: kept, without the launch's times)."""
    launches = launches.select(
        "correlation",
        pl.col("start").alias("launch_start"),
        pl.col("end").alias("launch_end"),
        pl.col("tid").alias("launch_tid"),
    )
    dev = events.filter(pl.col("kind").is_in(list(schema.DEVICE_KINDS)))
    kernels = dev.join(launches, on="correlation", how="left").sort("start")
    early = (pl.col("start") < pl.col("launch_start")).fill_null(False)
    n_early = int(kernels.select(early.sum()).item() or 0)
    if n_early:
        kernels = kernels.with_columns(pl.when(~early).then(pl.col(c)).alias(c)
                                       for c in ("launch_start", "launch_end", "launch_tid"))
    return schema.conform(kernels, schema.KERNELS), n_early


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
        raise TraceError(path, rundir.unforeseen(exc)) from exc


def _needs_tolerant_parse(data: bytes, parts: list[_Part]) -> bool:
    """Whether the columnar parser may have coerced a value without a word (see :data:`_ODD_TS_RE`): a search of
    the file's bytes, run only for what the parts found suspect."""
    if any(p.suspect for p in parts) and _ODD_TS_RE.search(data):
        return True
    if any(p.suspect_dur for p in parts) and _ODD_DUR_RE.search(data):
        return True
    return any(p.suspect_text for p in parts) and any(rx.search(data) for rx in _ODD_TEXT_RES)


def _reasons(counts: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame({"reason": list(counts), "count": list(counts.values())},
                        schema={"reason": pl.String, "count": pl.Int64})


def _read_trace(path: Path, rank: int | None, threads: int) -> TraceTables:
    data = read_bytes(path)
    parsed = _parse_pieces(data, threads)
    odd: Counter = Counter()
    if parsed is None:
        raw, meta, odd = parse_document(path, data)
        parts = [_digest(raw)]
        del raw
    else:
        parts, meta = parsed
        if not any(p.has_ph for p in parts):
            raise TraceError(path, "empty trace: 'traceEvents' holds no events")
    if not odd and _needs_tolerant_parse(data, parts):
        # the columnar parser turned a boolean ts into 0/1 or a number name into text: re-read tolerantly, to count
        doc, raw, odd = _parse_generic(path, data)
        meta = _doc_meta(doc)
        parts = [_digest(raw)]
        del doc, raw
    del data
    notes = check_meta(meta, rank)
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
    counts: dict[str, int] = dict(odd)
    events, calls, counts[DUPLICATE_REASON] = _dedupe(events, calls)
    events, calls, counts[CLOCK_JUMP_REASON] = _drop_clock_jumps(events, calls)
    pids = events.filter(~pl.col("kind").is_in(_DEVICE_OR_ANNOTATION)).get_column("pid").drop_nulls().unique()
    meta["host_pids"] = sorted(int(x) for x in pids.to_list())[:64]
    rank_value, rank_source = resolve_rank(path, meta, rank, pids.len(), notes)
    events = events.select(
        pl.lit(rank_value, pl.Int32).alias("rank"), "kind", "cat", "name", "start", "end",
        (pl.col("end") - pl.col("start")).alias("dur"),
        "pid", "tid", "device", "stream", "correlation", "external_id", "_sync", "_coll",
    )
    steps, counts[STEP_RANGE_REASON] = _steps(events, rank_value)
    events, launches, counts[EARLY_DEVICE_REASON] = _assign_steps(events, steps)
    events = _classify_kernels(events)
    kernels, counts[BEFORE_LAUNCH_REASON] = _kernels(events, launches)
    del launches
    counts.update((n, 1) for n in notes)
    skipped = (
        pl.concat([*skipped_parts, _reasons({k: n for k, n in counts.items() if n})])
        .group_by("reason").agg(pl.col("count").sum()).sort("reason")
        .with_columns(pl.lit(rank_value, pl.Int32).alias("rank"), pl.lit(str(path)).alias("file"))
    )
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
