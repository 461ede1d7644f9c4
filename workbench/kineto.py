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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import schema
from workbench.errors import TraceError

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
    """The raw ``traceEvents`` frame and the document's top-level fields."""
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
        row = doc.drop("traceEvents").row(0, named=True)
        meta = {k: v for k, v in row.items() if v is not None}
        if events is None:
            if doc.get_column("traceEvents")[0] is None:
                raise TraceError(path, "JSON without 'traceEvents': not a Kineto/Chrome trace")
            events = doc.select(pl.col("traceEvents").explode()).unnest("traceEvents")
    assert events is not None
    if events.height == 0 or events.get_column("ph").null_count() == events.height:
        raise TraceError(path, "empty trace: 'traceEvents' holds no events")
    return events, meta


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
    """Rows of ``raw`` that do not become events, counted by reason."""
    reason = (
        pl.when(pl.col("ph") == "M").then(pl.lit("metadata (process/thread names, kept in ranks)"))
        .when(pl.col("ph").is_in(["s", "f", "t"])).then(pl.lit("flow arrow (link kept as correlation)"))
        .when(pl.col("ph").is_null()).then(pl.lit("no 'ph' field"))
        .when(pl.col("ts").is_null()).then(pl.lit("no 'ts' field"))
        .otherwise(pl.concat_str(pl.lit("unsupported phase '"), pl.col("ph"), pl.lit("'")))
    )
    return (
        raw.filter(~_is_timed())
        .group_by(reason.alias("reason"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort("reason")
    )


def _is_timed() -> pl.Expr:
    return pl.col("ph").is_in(["X", "i", "I"]) & pl.col("ts").is_not_null()


def _normalise(raw: pl.DataFrame, rank: int, origin: int) -> pl.DataFrame:
    """Timed events as EVENTS rows (without steps and kernel classes yet)."""
    cat_lower = pl.col("cat").str.to_lowercase()
    kind = cat_lower.replace_strict(_KIND_BY_CAT, default=None, return_dtype=pl.String)
    kind = pl.when(pl.col("ph") != "X").then(pl.lit("instant")).otherwise(kind.fill_null("other"))
    ts_ns = pl.col("ts") * 1000.0
    start = ts_ns.round().cast(pl.Int64) + origin
    end = (ts_ns + pl.col("dur").fill_null(0.0).clip(lower_bound=0.0) * 1000.0).round().cast(pl.Int64) + origin
    args = pl.col("args")
    is_device = kind.is_in(list(schema.DEVICE_KINDS) + ["gpu_annotation"])
    pid = pl.col("pid").cast(pl.Int64, strict=False)
    tid = pl.col("tid").cast(pl.Int64, strict=False)
    return raw.filter(_is_timed()).select(
        pl.lit(rank, pl.Int32).alias("rank"),
        kind.alias("kind"),
        pl.col("cat").fill_null(""),
        pl.col("name").fill_null(""),
        start.alias("start"),
        end.alias("end"),
        (end - start).alias("dur"),
        pid.alias("pid"),
        tid.alias("tid"),
        pl.when(is_device).then(args.struct.field("device").fill_null(pid)).alias("device"),
        pl.when(is_device).then(args.struct.field("stream").fill_null(tid)).alias("stream"),
        args.struct.field("correlation").alias("correlation"),
        args.struct.field("External id").alias("external_id"),
        pl.col("args"),
        (pl.col("cat") == SYNC_CAT).alias("_sync"),
    )


def _steps(events: pl.DataFrame, rank: int) -> pl.DataFrame:
    """``ProfilerStep#N`` ranges as STEPS rows."""
    steps = events.filter(pl.col("kind") == "annotation").select(
        pl.col("name").str.extract(_STEP_RE, 1).cast(pl.Int32).alias("step"),
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


def _assign_steps(events: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Each event's step: the step range containing it on the host; device events take their launch's."""
    if steps.height == 0:
        return events.with_columns(pl.lit(None, pl.Int32).alias("step"))
    ranges = steps.select(pl.col("start").alias("_s_start"), pl.col("end").alias("_s_end"), "step").sort("_s_start")
    order = events.with_row_index("_row").sort("start")
    host_step = order.join_asof(ranges, left_on="start", right_on="_s_start", strategy="backward").select(
        "_row",
        pl.when(pl.col("start") < pl.col("_s_end")).then(pl.col("step")).alias("_host_step"),
    )
    events = events.with_row_index("_row").join(host_step, on="_row", how="left").drop("_row")
    is_dev = pl.col("kind").is_in(list(schema.DEVICE_KINDS) + ["gpu_annotation"])
    launches = events.filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null()).select(
        "correlation", pl.col("_host_step").alias("_launch_step")
    ).unique("correlation", keep="first")
    events = events.join(launches, on="correlation", how="left")
    return events.with_columns(
        pl.when(is_dev).then(pl.coalesce("_launch_step", "_host_step")).otherwise(pl.col("_host_step"))
        .cast(pl.Int32).alias("step")
    ).drop("_host_step", "_launch_step")


def _classify_kernels(events: pl.DataFrame) -> pl.DataFrame:
    """Add ``kernel_class`` to device events: by name, by ``External id`` link to a collective, never by stream."""
    comm_ext = events.filter(
        (pl.col("kind") == "cpu_op") & (pl.col("name") == "record_param_comms")
        & pl.col("external_id").is_not_null()
    ).get_column("external_id").unique()
    has_coll_args = pl.col("args").struct.field("Collective name").is_not_null()
    is_comm = pl.col("name").str.contains(COMM_KERNEL_RE) | pl.col("external_id").is_in(comm_ext.implode()) | has_coll_args
    klass = (
        pl.when(pl.col("kind") == "memcpy").then(pl.lit("memcpy"))
        .when(pl.col("kind") == "memset").then(pl.lit("memset"))
        .when(pl.col("kind") != "kernel").then(pl.lit(None))
        .when(pl.col("_sync")).then(pl.lit("sync"))
        .when(is_comm).then(pl.lit("communication"))
        .otherwise(pl.lit("compute"))
    )
    return events.with_columns(klass.alias("kernel_class"))


def _kernels(events: pl.DataFrame) -> pl.DataFrame:
    """Device activity joined with the runtime/driver launch that has the same correlation."""
    launches = events.filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null()).select(
        "correlation",
        pl.col("start").alias("launch_start"),
        pl.col("end").alias("launch_end"),
        pl.col("tid").alias("launch_tid"),
    ).unique("correlation", keep="first")
    dev = events.filter(pl.col("kind").is_in(list(schema.DEVICE_KINDS)))
    return schema.conform(dev.join(launches, on="correlation", how="left").sort("start"), schema.KERNELS)


def _dtype_bytes() -> pl.Expr:
    return pl.col("dtype").str.to_lowercase().replace_strict(_DTYPE_BYTES, default=None, return_dtype=pl.Int64)


def _collectives_nccl(events: pl.DataFrame, kernels: pl.DataFrame, rank: int, backend: str) -> pl.DataFrame:
    """Collectives from ``record_param_comms`` rows with collective args, with their kernels' times."""
    args = pl.col("args")
    calls = events.filter(
        (pl.col("name") == "record_param_comms") & (pl.col("kind") == "cpu_op")
        & args.struct.field("Collective name").is_not_null()
        & (args.struct.field("Collective name") != "wait")
    ).select(
        "start", "end", "external_id", "step",
        args.struct.field("Collective name").alias("collective"),
        args.struct.field("dtype").alias("dtype"),
        args.struct.field("In msg nelems").alias("in_elems"),
        args.struct.field("Out msg nelems").alias("out_elems"),
        args.struct.field("Group size").cast(pl.Int32).alias("group_size"),
        args.struct.field("Process Group Name").fill_null("0").alias("pg_name"),
        args.struct.field("Process Group Description").alias("pg_desc"),
        args.struct.field("Process Group Ranks").alias("pg_ranks"),
    )
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
    gloo = events.filter(pl.col("name").str.contains(_GLOO_RE) & (pl.col("kind") == "annotation")).sort("start")
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


def read_trace(path: str | Path, *, rank: int | None = None) -> TraceTables:
    """Read one Kineto trace file into tables; :class:`TraceError` names the file and the problem."""
    path = Path(path)
    data = read_bytes(path)
    raw, meta = parse_document(path, data)
    del data
    rank_value, rank_source = resolve_rank(path, meta, rank)
    ts_min = raw.get_column("ts").min()
    origin, clock = _time_origin(meta, ts_min if isinstance(ts_min, float) else None)
    skipped = _skipped_counts(raw).with_columns(
        pl.lit(rank_value, pl.Int32).alias("rank"), pl.lit(str(path)).alias("file")
    )
    events = _normalise(raw, rank_value, origin)
    meta["thread_names"] = _thread_names(raw)
    del raw
    steps = _steps(events, rank_value)
    events = _assign_steps(events, steps)
    events = _classify_kernels(events)
    kernels = _kernels(events)
    backend = _backend(meta)
    if backend == "gloo" or events.filter(pl.col("name").str.starts_with("gloo:")).height:
        collectives = _collectives_gloo(events, rank_value)
    else:
        collectives = _collectives_nccl(events, kernels, rank_value, backend)
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


def _thread_names(raw: pl.DataFrame) -> dict[str, str]:
    """``tid`` → thread name from the metadata events (e.g. ``pt_gloo_runloop``)."""
    rows = raw.filter((pl.col("ph") == "M") & (pl.col("name") == "thread_name")).select(
        "tid", pl.col("args").struct.field("name")
    )
    return {str(t): str(n) for t, n in rows.iter_rows() if t is not None and n is not None}
