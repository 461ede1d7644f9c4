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
import re
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
from workbench.errors import TraceError

#: Bump when parsing or classification changes what a trace file yields (the cache key includes it).
PARSER_VERSION = 2

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

_DOCUMENT_SCHEMA: dict[str, pl.DataType] = {
    "schemaVersion": pl.Int64,
    "baseTimeNanoseconds": pl.Int64,
    "traceName": pl.String,
    "deviceProperties": pl.List(pl.Struct({"id": pl.Int64, "name": pl.String, "totalGlobalMem": pl.Int64,
                                           "computeMajor": pl.Int64, "computeMinor": pl.Int64,
                                           "numSms": pl.Int64})),
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
    if value is None:
        return None
    if dtype == pl.String:
        return value if isinstance(value, str) else orjson.dumps(value).decode()
    if dtype == pl.Int64:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if dtype == pl.Float64:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
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
    header = {k: v for k, v in top.items() if k != "traceEvents" and k in _DOCUMENT_SCHEMA}
    di = header.get("distributedInfo")
    if isinstance(di, dict):
        header["distributedInfo"] = {k: di.get(k) for k in _DOCUMENT_SCHEMA["distributedInfo"].to_schema()}
        header["distributedInfo"]["pg_config"] = None
    for k in ("deviceProperties",):
        header.pop(k, None)
    doc = pl.DataFrame([{**header, "traceEvents": []}], schema_overrides={
        k: v for k, v in _DOCUMENT_SCHEMA.items() if k in header or k == "traceEvents"
    }, strict=False)
    if isinstance(top.get("deviceProperties"), list):
        doc = doc.with_columns(pl.Series("deviceProperties", [[
            {f: d.get(f) for f in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms")}
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


def resolve_rank(path: Path, meta: dict[str, Any], override: int | None) -> tuple[int, str]:
    """The rank of this file and where it came from; :class:`TraceError` saying how to supply it."""
    if override is not None:
        return override, "given"
    info = meta.get("distributedInfo") or {}
    if info.get("rank") is not None:
        return int(info["rank"]), "distributedInfo"
    named = rank_from_name(path)
    if named is not None:
        return named, "file name"
    raise TraceError(
        path,
        "cannot tell which rank this trace is: no distributedInfo.rank and no rank in the file name "
        "(rank-3, rank_3, rank3, 3.<ns>.pt.trace.json); pass --rank N (Python: rank=N) or rename the file",
    )


# --- normalising ---------------------------------------------------------------------------------


def _time_origin(meta: dict[str, Any], ts_min: float | None) -> tuple[int, str]:
    """Nanoseconds to add to ``ts*1000`` and the clock kind ("absolute" or "relative")."""
    base = meta.get("baseTimeNanoseconds")
    if base is not None:
        return int(base), "absolute"
    # Before mid-2024 Kineto wrote no base; ts then was usually microseconds since the Unix epoch.
    if ts_min is not None and ts_min > 1e14:
        return 0, "absolute"
    return 0, "relative"


def _skipped_counts(raw: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``raw`` that do not become events, counted by reason (unsorted)."""
    reason = (
        pl.when(pl.col("ph") == "M").then(pl.lit("metadata (process/thread names, kept in ranks)"))
        .when(pl.col("ph").is_in(["s", "f", "t"])).then(pl.lit("flow arrow (link kept as correlation)"))
        .when(pl.col("ph").is_null()).then(pl.lit("no 'ph' field"))
        .when(pl.col("ts").is_null()).then(pl.lit("no 'ts' field"))
        .otherwise(pl.concat_str(pl.lit("unsupported phase '"), pl.col("ph"), pl.lit("'")))
    )
    return (
        raw.lazy().filter(~_is_timed()).select("ph", "ts")
        .group_by(reason.alias("reason"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .collect()
    )


def _is_timed() -> pl.Expr:
    return pl.col("ph").is_in(["X", "i", "I"]) & pl.col("ts").is_not_null()


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
    ts_min: float | None
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
    ts_min = raw.get_column("ts").min()
    return _Part(
        events=ev, calls=ca, skipped=_skipped_counts(raw), threads=th,
        ts_min=ts_min if isinstance(ts_min, float) else None,
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


def _assign_steps(events: pl.DataFrame, steps: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each event's step: the step range containing it on the host; device events take their launch's.

    Also returns the launches (correlation, _host_step, start, end, tid) for :func:`_kernels`.
    """
    if steps.height == 0:
        events = events.with_columns(pl.lit(None, pl.Int32).alias("_host_step"))
    else:
        events = events.with_columns(_host_steps(events.get_column("start"), steps))
    launches = _launches(events)
    events = events.join(
        launches.select("correlation", pl.col("_host_step").alias("_launch_step")), on="correlation", how="left"
    )
    is_dev = pl.col("kind").is_in(_DEVICE_OR_ANNOTATION)
    events = events.with_columns(
        pl.when(is_dev).then(pl.coalesce("_launch_step", "_host_step")).otherwise(pl.col("_host_step"))
        .cast(pl.Int32).alias("step")
    ).drop("_host_step", "_launch_step")
    return events, launches


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

    A large file is parsed in pieces, ``threads`` of them at once.
    """
    path = Path(path)
    data = read_bytes(path)
    parsed = _parse_pieces(data, threads)
    if parsed is None:
        raw, meta = parse_document(path, data)
        del data
        parts = [_digest(raw)]
        del raw
    else:
        del data
        parts, meta = parsed
        if not any(p.has_ph for p in parts):
            raise TraceError(path, "empty trace: 'traceEvents' holds no events")
    rank_value, rank_source = resolve_rank(path, meta, rank)
    mins = [p.ts_min for p in parts if p.ts_min is not None]
    origin, clock = _time_origin(meta, min(mins) if mins else None)
    skipped = (
        pl.concat([p.skipped for p in parts]).group_by("reason").agg(pl.col("count").sum()).sort("reason")
        .with_columns(pl.lit(rank_value, pl.Int32).alias("rank"), pl.lit(str(path)).alias("file"))
    )
    meta["thread_names"] = {
        str(t): str(n) for p in parts for t, n in p.threads.iter_rows() if t is not None and n is not None
    }
    events = pl.concat([p.events for p in parts], rechunk=True).with_columns(
        pl.col("start") + origin, pl.col("end") + origin
    ).select(
        pl.lit(rank_value, pl.Int32).alias("rank"), "kind", "cat", "name", "start", "end",
        (pl.col("end") - pl.col("start")).alias("dur"),
        "pid", "tid", "device", "stream", "correlation", "external_id", "_sync", "_coll",
    )
    calls = pl.concat([p.calls for p in parts]).with_columns(pl.col("start") + origin, pl.col("end") + origin)
    del parts
    steps = _steps(events, rank_value)
    events, launches = _assign_steps(events, steps)
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
    meta.update(clock=clock, origin_ns=origin, rank_source=rank_source)
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
