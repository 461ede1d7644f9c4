"""TORCH_TRACE structured logs → the ``compiles`` table (one row per frame compile, all ranks stacked).

A log line is ``V<MMDD hh:mm:ss.us> <tid> <file>:<line>] {json}``; when the JSON has ``"has_payload"``, the payload
follows on lines starting with a tab. Only the events that feed the table are JSON-decoded
(``compilation_metrics``, ``bwd_compilation_metrics``, ``artifact``, ``dynamo_start``, ``str``); the rest are
counted by their type without decoding, and their payloads are skipped without being joined. Unknown event types
and malformed lines are counted in the SKIPPED table, never fatal.

Rows are keyed by (compiled autograd id, frame id, frame compile id); ``attempt`` is the last attempt seen (a
restart after a graph break makes attempt 1) and ``compile_id`` is written as tlparse does: ``0/1``, ``0/0_1``
(attempt 1), ``!2/0/0`` (compiled autograd 2). A compile that started (``dynamo_start``) but has no
``compilation_metrics`` (a crash or a cut log) gets status ``incomplete``.

Status: ``ok``; ``graph_break`` (compiled, with graph breaks or restarts); ``skipped_frame`` (dynamo gave the frame
up without raising into user code: it runs eagerly from then on — a graph break inside a loop, or an error under
``suppress_errors``); ``eager_fallback`` (recompile limit hit: the frame then silently runs eager for each new input;
tlparse lists it as a failure); ``failed`` (any other ``fail_type``: the error reached user code); ``incomplete``.
A skipped frame is written three ways (docs/compile-logs.md): torch 2.11+ a ``fail_type`` whose reason says
"Skipping the frame"; 2.7–2.9 no ``fail_type``, no graph and no guards, a graph-break artifact and no restart;
2.5 the same with no artifact at all (``skip_reason`` then says torch logged no reason).

``generation``: how many times dynamo was reset (``torch._dynamo.reset()``) before this compile in its log: a reset
leaves no mark but frame ids starting again at ``0/0``, so a compile id seen again after it finished starts a new
generation, not a recompile. A compilation repeated with identical content and times (a duplicated block) is
collapsed into one and counted in SKIPPED.

Example:
    >>> from pathlib import Path
    >>> compiles, skipped = read_compile_logs([])   # no files: empty tables with the schemas
    >>> compiles.columns[:3], skipped.height
    (['rank', 'compile_id', 'frame_id'], 0)
"""

from __future__ import annotations

import hashlib
import io
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import rundir, schema
from workbench.errors import TraceError, one_line
from workbench.regular_file import read_regular

#: Event types torch (2.x up to 2.13) writes; read or deliberately ignored. Anything else is counted as unknown.
KNOWN_EVENTS: frozenset[str] = frozenset({
    "chromium_event", "str", "dynamo_start", "compilation_metrics", "bwd_compilation_metrics",
    "compilation_metrics_runtime", "describe_tensor", "describe_storage", "describe_source", "create_symbol",
    "create_unbacked_symbol", "unbacked_symbol", "expression_created", "symbolic_shape_specialization",
    "guard_added", "guard_added_fast", "propagate_real_tensors", "propagate_real_tensors_provenance",
    "dynamo_output_graph", "dynamo_guards", "dynamo_cpp_guards_str", "aot_forward_graph",
    "aot_backward_graph", "aot_inference_graph", "aot_joint_graph", "aot_graph_name", "inductor_output_code",
    "inductor_pre_grad_graph", "inductor_post_grad_graph", "optimize_ddp_split_graph", "optimize_ddp_split_child",
    "compiled_autograd_graph", "dump_file", "artifact", "link", "graph_dump", "missing_fake_kernel",
    "mismatched_fake_kernel", "freeze_runtime_asserts", "exported_program", "inductor_metrics",
    "stack", "dynamo_error", "bwd_compilation_metrics_runtime", "provenance_tracking", "graph_break",
})
#: Artifacts whose payload is read.
_PAYLOAD_ARTIFACTS = frozenset({
    "recompile_reasons", "dynamo_graph_break_reason", "dynamo_error", "inductor_collective_schedule",
    "torch_version", "aotautograd_cache_bypass", "fx_graph_cache_hash", "aotautograd_cache_hash",
})
#: torch 2.5 logs no cache hit/miss artifact: the ``*_cache_hash`` payload's ``cache_state`` says it.
_CACHE_STATE = re.compile(r'"cache_state"\s*:\s*"(hit|miss)"')
_CACHE_ARTIFACTS = {
    "fx_graph_cache_hit": "hit", "fx_graph_cache_miss": "miss",
    "aotautograd_cache_hit": "hit", "aotautograd_cache_miss": "miss",
}
_CACHE_HIT_KEYS = ("inductor_fx_local_cache_hit_count", "inductor_fx_remote_cache_hit_count",
                   "aotautograd_local_cache_hit_count", "aotautograd_remote_cache_hit_count")
_CACHE_MISS_KEYS = ("inductor_fx_local_cache_miss_count", "inductor_fx_remote_cache_miss_count",
                    "aotautograd_local_cache_miss_count", "aotautograd_remote_cache_miss_count")
_RANK_IN_NAME = re.compile(r"_rank_(\d+)(?=[_.]|$)")
_COMPILE_ID = re.compile(r"^(?:!(\d+)/)?(\d+)/(\d+)(?:_(\d+))?$")
_STEP = re.compile(r"step\s*[=:]\s*(-?\d+)")
_LIMIT = re.compile(r"recompile[ _]limit|cache_size_limit|Limit type: |RecompileLimitExceeded", re.I)
_GRAPH_BREAK = re.compile(r"graph break", re.I)
_MAX_TEXT = 4000
#: The largest compile log read (bytes, compressed or not); a bigger one is one line naming it.
MAX_LOG_BYTES = 4 << 30
#: Names a folder's compile logs end with (gzip-compressed logs are read as they are).
LOG_SUFFIXES = (".log", ".log.gz")
_INT32 = 1 << 31
_INT64 = 1 << 63


def rank_from_filename(path: str | Path) -> int | None:
    """``dedicated_log_torch_trace_rank_3_ab12.log`` → 3; None when the name carries no rank."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def format_compile_id(frame_id: int | None, frame_compile_id: int | None, attempt: int | None = 0,
                      compiled_autograd_id: int | None = None) -> str:
    """tlparse's spelling: ``0/1``, ``0/0_1`` for attempt 1, ``!2/0/0`` under compiled autograd 2."""
    base = f"{frame_id}/{frame_compile_id}"
    if attempt:
        base += f"_{attempt}"
    if compiled_autograd_id is not None:
        base = f"!{compiled_autograd_id}/{base}"
    return base


class _BadField(ValueError):
    """A field that is not of its type; ``str()`` is the SKIPPED reason."""


def _int(value: Any, field: str, notes: Counter | None = None) -> int | None:
    """``value`` as an int (numeric text is read, and noted); :class:`_BadField` for anything else."""
    if type(value) is int and -_INT32 <= value < _INT32:
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        raise _BadField(f"'{field}' is a boolean, not an integer")
    if isinstance(value, int):
        if -_INT32 <= value < _INT32 or field in _WIDE_INTS:
            return value
        raise _BadField(f"'{field}' = {one_line(str(value), 40)} is out of range")
    if isinstance(value, float) and value.is_integer():
        return _int(int(value), field)
    if isinstance(value, str):
        try:
            n = int(value.strip())
        except ValueError:
            raise _BadField(f"'{field}' is text that is not a number") from None
        if notes is not None:
            notes[f"'{field}' written as text: read as a number"] += 1
        return _int(n, field)
    raise _BadField(f"'{field}' is a {type(value).__name__}, not an integer")


def _num(value: Any, field: str, notes: Counter) -> float | None:
    """``value`` as a finite float, else None with a note."""
    if value is None:
        return None
    if type(value) is float and 0 <= value <= 1e17:  # the common case (NaN fails the comparison)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        notes[f"compilation_metrics.{field} is not a number: ignored"] += 1
        return None
    try:
        x = float(value)
    except ValueError:
        notes[f"compilation_metrics.{field} is not a number: ignored"] += 1
        return None
    if x != x or x in (float("inf"), float("-inf")) or abs(x) > 1e17:
        notes[f"compilation_metrics.{field} is out of range: ignored"] += 1
        return None
    if x < 0 and field.endswith(("_s", "_us")):   # times and durations are never negative
        notes[f"compilation_metrics.{field} is negative: ignored"] += 1
        return None
    return x


#: Integer fields that hold wall-clock microseconds (wider than int32).
_WIDE_INTS = frozenset({"start_time_us", "end_time_us", "duration_us"})
_CONTEXT_INTS = ("frame_id", "frame_compile_id", "attempt", "compiled_autograd_id")


def _new_row(key: tuple[int | None, int | None, int | None], sequence: int) -> dict[str, Any]:
    return {
        "compiled_autograd_id": key[0], "frame_id": key[1], "frame_compile_id": key[2], "attempt": 0,
        "sequence": sequence, "started": False,
        "recompile_reasons": [], "graph_breaks": [], "restart_reasons": [], "collective_schedule": None,
        "art_hits": 0, "art_misses": 0, "hash_hits": 0, "hash_misses": 0, "bypasses": 0, "bypass_reason": None,
        "metrics": None, "bwd": None, "stack": None, "dynamo_error": None,
    }


def _text(s: Any) -> str:
    s = s if isinstance(s, str) else orjson.dumps(s, default=str).decode()
    return s if len(s) <= _MAX_TEXT else s[:_MAX_TEXT] + "…"


def _texts(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [_text(v) for v in value]
    return [_text(value)]


def _decode_reasons(payload: str, encoding: str | None) -> list[str]:
    """``recompile_reasons`` payload: one reason as a bare string, several as a JSON list."""
    text = payload.strip()
    if not text:
        return []
    if encoding == "json" or text[:1] in "[\"":
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return [text]
        if isinstance(value, list):
            return [_text(v) for v in value]
        return [_text(value)]
    return [text]


class _LogReader:
    """The state of reading one TORCH_TRACE log: compilations in log order, the string table, what was skipped.

    A compilation is keyed by (compiled autograd id, frame id, frame compile id). When a key comes back after its
    compilation finished (a second ``dynamo_start``, or a second ``compilation_metrics``), that is a new
    compilation under the same id (``sequence`` 1, 2, …), never merged into the first. Every line costs the same
    whatever the log's length (the log is read in time linear in its size).
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.current: dict[tuple[int | None, int | None, int | None], dict[str, Any]] = {}
        self.per_key: Counter = Counter()   # compilations so far under each key
        self.strings: dict[int, str] = {}
        self.skipped: Counter = Counter()
        self.log_rank: int | None = None
        self.torch_version: str | None = None

    def context(self, ev: dict[str, Any]) -> dict[str, int | None]:
        """The typed context keys of a line; :class:`_BadField` when one is not an integer."""
        skipped = self.skipped
        ctx = {k: _int(ev.get(k), k, skipped) for k in _CONTEXT_INTS}
        for k, v in ctx.items():
            if v is not None and v < 0:   # ids and attempts count from 0
                skipped[f"'{k}' is negative: read as {'0' if k == 'attempt' else 'absent'}"] += 1
                ctx[k] = 0 if k == "attempt" else None
        return ctx

    def row_for(self, ctx: dict[str, int | None], *, starts: bool = False, finishes: str | None = None
                ) -> dict[str, Any] | None:
        """The compilation a line belongs to (None without a frame id); a new one when the key's last finished."""
        fid = ctx.get("frame_id")
        if fid is None:
            return None
        key = (ctx.get("compiled_autograd_id"), fid, ctx.get("frame_compile_id"))
        row = self.current.get(key)
        if row is not None and ((starts and (row["started"] or row["metrics"] is not None) and row["metrics"] is not None)
                                or (finishes is not None and row[finishes] is not None)):
            row = None  # the same id again after a finished compilation: a new compilation
        if row is None:
            row = _new_row(key, self.per_key[key])
            self.per_key[key] += 1
            self.rows.append(row)
            self.current[key] = row
        if starts:
            row["started"] = True
        att = ctx.get("attempt") or 0
        if att > row["attempt"]:
            row["attempt"] = att
        return row

    def on_payload(self, ev: dict[str, Any], ctx: dict[str, int | None], payload: str) -> None:
        art = ev["artifact"]
        name = art.get("name")
        if name == "torch_version":
            try:
                v = orjson.loads(payload)
                self.torch_version = _text(v.get("pytorch_version")) if isinstance(v, dict) and v.get("pytorch_version") else None
            except orjson.JSONDecodeError:
                pass
            return
        # a recompile's reasons come before its dynamo_start: after a finished compilation under the same id
        # (a reset, or a repeated block) they open the next one
        row = self.row_for(ctx, finishes="metrics" if name == "recompile_reasons" else None)
        if row is None:
            self.skipped[f"artifact {name} without a compile id"] += 1
            return
        if name in ("fx_graph_cache_hash", "aotautograd_cache_hash"):
            state = _CACHE_STATE.search(payload[-400:]) or _CACHE_STATE.search(payload)
            if state:
                row["hash_hits" if state.group(1) == "hit" else "hash_misses"] += 1
        elif name == "recompile_reasons":
            row["recompile_reasons"].extend(_decode_reasons(payload, art.get("encoding")))
        elif name == "dynamo_graph_break_reason":
            row["graph_breaks"].append(_text(payload.strip()))
        elif name == "dynamo_error":
            row["dynamo_error"] = _text(payload.strip())
        elif name == "inductor_collective_schedule":
            try:
                sched = orjson.loads(payload)
            except orjson.JSONDecodeError:
                sched = [payload]
            row["collective_schedule"] = (row["collective_schedule"] or []) + _texts(sched)
        elif name == "aotautograd_cache_bypass":
            row["bypasses"] += 1
            try:
                info = orjson.loads(payload)
            except orjson.JSONDecodeError:
                info = None
            reason = info.get("cache_bypass_reason") if isinstance(info, dict) else None
            if reason and row["bypass_reason"] is None:
                row["bypass_reason"] = _text(str(reason).strip())

    def on_event(self, kind: str, ev: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int | None]] | None:
        """Handle one decoded line; returns (event, context) when its payload must be collected."""
        ctx = self.context(ev)
        rk = ev.get("rank")
        if self.log_rank is None and rk is not None:
            try:
                value = _int(rk, "rank", self.skipped)
            except _BadField as exc:
                value, why = None, str(exc)
            else:
                why = f"'rank' = {value} is not a rank (0 to 2**31 - 1)"
            if value is not None and 0 <= value < _INT32:
                self.log_rank = value
            else:
                self.skipped[f"{kind} line with {why}: the rank key ignored"] += 1
        if kind == "str":
            try:
                sv, i = ev["str"]
                self.strings[int(i)] = str(sv)
            except (TypeError, ValueError, KeyError):
                self.skipped["malformed str event"] += 1
        elif kind == "artifact":
            art = ev.get("artifact")
            if not isinstance(art, dict):
                self.skipped["artifact that is not an object"] += 1
                return None
            name = art.get("name")
            if name in _PAYLOAD_ARTIFACTS and ev.get("has_payload"):
                return ev, ctx
            if name in _CACHE_ARTIFACTS:
                row = self.row_for(ctx)
                if row is not None:
                    row["art_hits" if _CACHE_ARTIFACTS[name] == "hit" else "art_misses"] += 1
            elif name == "aotautograd_cache_bypass":
                row = self.row_for(ctx)
                if row is not None:
                    row["bypasses"] += 1
        elif kind in ("compilation_metrics", "bwd_compilation_metrics"):
            m = ev.get(kind)
            if not isinstance(m, dict):
                self.skipped[f"malformed {kind}"] += 1
                return None
            if ctx.get("frame_id") is None:
                cm = _COMPILE_ID.match(str(m.get("compile_id") or ""))
                if cm is None:
                    self.skipped[f"{kind} without a compile id"] += 1
                    return None
                ids = [int(g) if g else None for g in cm.groups()]
                if any(i is not None and i >= _INT32 for i in ids):
                    raise _BadField("'compile_id' with a number out of range (2**31 or more)")
                ctx = {"compiled_autograd_id": ids[0], "frame_id": ids[1], "frame_compile_id": ids[2],
                       "attempt": ids[3] or 0}
            if kind == "compilation_metrics":
                row = self.row_for(ctx, finishes="metrics")
                if row is not None:
                    row["metrics"] = _slim(m)
            else:
                row = self.row_for(ctx)
                if row is not None and row["bwd"] is not None:
                    self.skipped["a second bwd_compilation_metrics for one compilation: the first kept"] += 1
                elif row is not None:
                    row["bwd"] = _slim(m)
        elif kind == "dynamo_start":
            row = self.row_for(ctx, starts=True)
            if row is not None:
                ds = ev.get("dynamo_start")
                stack = ds.get("stack") if isinstance(ds, dict) else None
                row["stack"] = stack[-1:] if isinstance(stack, list) else None  # only its innermost frame is read
        return None


#: The ``compilation_metrics`` fields a row is built from (:func:`_finish_row`); the rest is let go when the line is
#: read, so a log of many compilations holds only these (the config texts, ~38 KB a compile, are hashed first).
_METRICS_KEYS = frozenset({
    "co_name", "co_filename", "co_firstlineno", "start_time_us", "end_time_us", "duration_us", "start_time",
    "entire_frame_compile_time_s", "recompile_reason", "restart_reasons", "fail_type", "fail_reason",
    "backend_compile_time_s", "aot_autograd_cumulative_compile_time_us", "inductor_compile_time_s",
    "inductor_cumulative_compile_time_us", *_CACHE_HIT_KEYS, *_CACHE_MISS_KEYS, "recompile_user_contexts",
    "fail_user_frame_filename", "fail_user_frame_lineno", "num_graph_breaks", "guard_count", "pytorch_version",
    "graph_op_count", "has_guarded_code", "dynamo_time_before_restart_s",
})
_SUPPRESS = re.compile(r"""["']suppress_errors["']\s*:\s*true""")


def _slim(m: dict[str, Any]) -> dict[str, Any]:
    """The fields of a metrics line :func:`_finish_row` reads, plus ``_config_hash`` (of its config texts)."""
    out = {k: v for k, v in m.items() if k in _METRICS_KEYS}
    blob = f"{m.get('dynamo_config') or ''}\x00{m.get('inductor_config') or ''}"
    out["_config_hash"] = hashlib.sha256(blob.encode()).hexdigest()[:16] if blob != "\x00" else None
    out["_suppress_errors"] = bool(_SUPPRESS.search(str(m.get("dynamo_config") or "")))
    return out


_SKIP_KINDS = frozenset({
    "chromium_event", "describe_tensor", "describe_storage", "describe_source", "dynamo_output_graph",
    "aot_forward_graph", "aot_backward_graph", "aot_inference_graph", "aot_joint_graph", "inductor_output_code",
    "dynamo_cpp_guards_str", "create_symbol", "inductor_post_grad_graph", "inductor_pre_grad_graph",
    "dynamo_guards",
})


_SKIP_KINDS_B = frozenset(k.encode() for k in _SKIP_KINDS)
_KNOWN_B = frozenset(k.encode() for k in KNOWN_EVENTS)


def read_log_bytes(path: Path, max_bytes: int = MAX_LOG_BYTES) -> bytes:
    """The bytes of a TORCH_TRACE log, decompressed when it is gzip (``*.log.gz``); :class:`TraceError` naming
    the file when it cannot be read, is over ``max_bytes`` (compressed or not), or is named ``.gz`` but is not."""
    from workbench.kineto import gunzip

    data = read_regular(path, max_bytes, what="compile log").data
    if data[:2] == b"\x1f\x8b":
        return gunzip(path, data, max_bytes, "a compile log")
    if path.name.endswith(".gz"):
        raise TraceError(path, "named .gz but is not gzip-compressed")
    return data


def _read_one(path: Path, forced_rank: int | None) -> tuple[list[dict[str, Any]], Counter, int | None, str | None]:
    """One log → (rows, skipped counts, rank, torch version); :class:`TraceError` if the file cannot be read.

    Only a regular file of at most :data:`MAX_LOG_BYTES` is read. The lines are visited once, as bytes; only the
    lines of the events the table needs are decoded.
    """
    name_rank = rank_from_filename(path)
    if name_rank is not None and name_rank >= _INT32:
        raise TraceError(path, f"the file name claims rank {one_line(str(name_rank), 40)}, which is not a rank "
                               "(0 to 2**31 - 1): rename the file")
    data = read_log_bytes(path)
    rd = _LogReader()
    want: list[bytes] | None = None  # lines of the payload being collected
    pending: tuple[dict[str, Any], dict[str, int | None]] | None = None
    loads = orjson.loads
    for line in io.BytesIO(data):
        if line[-1:] == b"\n":
            line = line[:-1]
        if not line:
            continue
        if line[:1] == b"\t":
            if want is not None:
                want.append(line[1:])
            continue
        if want is not None and pending is not None:
            rd.on_payload(pending[0], pending[1], b"\n".join(want).decode("utf-8", "replace"))
            want = pending = None
        idx = line.find(b"] {")
        if idx < 0:
            rd.skipped["malformed line"] += 1
            continue
        body = line[idx + 2:]
        end = body.find(b'"', 2)
        kind_b = body[2:end] if body[:2] == b'{"' and end > 2 else b""
        if kind_b in _SKIP_KINDS_B:
            continue  # known, not needed: payload lines are skipped by the tab check
        kind = kind_b.decode("utf-8", "replace")
        if kind_b not in _KNOWN_B:
            rd.skipped[f"unknown event type {one_line(kind, 80)}" if kind else "malformed line"] += 1
            continue
        try:
            ev = loads(body)
        except orjson.JSONDecodeError:
            try:
                ev = loads(body.decode("utf-8", "replace"))
            except orjson.JSONDecodeError:
                rd.skipped["malformed json"] += 1
                continue
        if not isinstance(ev, dict):
            rd.skipped["malformed json"] += 1
            continue
        try:
            got = rd.on_event(kind, ev)
        except _BadField as exc:
            rd.skipped[f"{kind} line with {exc}: line skipped"] += 1
            continue
        if got is not None:
            want, pending = [], got
    if want is not None and pending is not None:
        rd.on_payload(pending[0], pending[1], b"\n".join(want).decode("utf-8", "replace"))
    del data

    if forced_rank is not None:
        rank = forced_rank
    elif name_rank is not None:
        rank = name_rank
        if rd.log_rank is not None and rd.log_rank != name_rank:
            rd.skipped[f"rank key in log ({rd.log_rank}) differs from file name ({name_rank}): file name used"] += 1
    else:
        rank = rd.log_rank
    out = [_finish_row(r, rd.strings, rd.torch_version, rd.skipped) for r in _generations(rd.rows, rd.skipped)]
    _breaks_from_resume_frames(out)
    return out, rd.skipped, rank, rd.torch_version


def _generations(rows: list[dict[str, Any]], notes: Counter) -> list[dict[str, Any]]:
    """The compilations with repeated identical blocks collapsed and ``generation`` set (see the module docstring).

    A compilation of a frame whose metrics (start and duration included) and artifacts equal an earlier
    compilation's of the same frame is that block written again, under the same id or a renumbered one (two real
    compiles never share a start time): it is dropped, never a compile id of its own. Otherwise a key seen again
    starts a new generation when its frame compile id is 0 (dynamo numbers frames from 0/0 again after a reset);
    the generation only grows in log order.
    """
    per_key: Counter = Counter()
    bodies: dict[tuple, list[tuple]] = {}
    out: list[dict[str, Any]] = []
    generation = 0
    for r in rows:
        key = (r["compiled_autograd_id"], r["frame_id"], r["frame_compile_id"])
        m = r["metrics"]
        body = (m, r["bwd"], r["recompile_reasons"], r["graph_breaks"], r["dynamo_error"])
        frame = bodies.setdefault(key[:2], [])
        timed = m is not None and (m.get("start_time_us") is not None or m.get("start_time") is not None)
        if timed and body in frame:
            notes["a compilation block repeated with identical content and times: collapsed into one"] += 1
            continue
        if per_key[key] and r["frame_compile_id"] == 0 and r["compiled_autograd_id"] is None:
            generation = max(generation, per_key[key])
        per_key[key] += 1
        frame.append(body)
        r["generation"] = generation
        out.append(r)
    return out


_RESUME_AT = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_(\d+)$")


def _breaks_from_resume_frames(rows: list[dict[str, Any]]) -> None:
    """A frame whose resume frame (``torch_dynamo_resume_in_<fn>_at_<line>``) was compiled broke at that line, even
    when its log says nothing else (torch 2.5 without a restart): such an ``ok`` row becomes ``graph_break``."""
    for i, r in enumerate(rows):
        m = _RESUME_AT.match(r["co_name"] or "")
        if not m:
            continue
        for p in reversed(rows[:i]):
            if p["co_name"] == m.group(1) and p["generation"] == r["generation"]:
                if p["status"] == "ok" and not p["graph_breaks"] and not p["restart_reasons"]:
                    p["status"] = "graph_break"
                    p["graph_break_count"] = 1
                    p["break_reason"] = (f"graph break at line {m.group(2)} (the log gives no reason: seen from the "
                                         "resume frame)")
                break


def _first_known(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


_GB_AT = re.compile(r"Graph break in user code at (\S+?):(\d+)")
_GAVE_UP = re.compile(r"^Failed to handle graph break gracefully\..*?Graph break encountered::\s*", re.I)
_BREAK_NOISE = ("graph break in user code at", "encountered graph break when attempting",
                "failed to handle graph break gracefully", "*** while handling this graph break")


def _break_summary(text: str | None) -> str | None:
    """A graph-break reason in one line: what dynamo could not trace, and its explanation when it gives one."""
    if not text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [_GAVE_UP.sub("", ln.removeprefix("Graph Break Reason:")).strip() for ln in lines]
    heads = [ln for ln in lines if ln and not ln.lower().startswith(_BREAK_NOISE)
             and not ln.lower().startswith(("explanation:", "hint:"))]
    head = heads[0] if heads else (lines[0] if lines else "")
    expl = next((ln for ln in lines if ln.lower().startswith("explanation:")), None)
    out = f"{head}: {expl.split(':', 1)[1].strip()}" if expl else head
    return out[:300] or None


_SKIPPING = re.compile(r"Skipping the frame|frame skipped:", re.I)
_RESUME = "torch_dynamo_resume_in_"


def skip_reason(r: dict[str, Any], fail_type: Any, fail_reason: Any, restarts: list[str]) -> str | None:
    """Why dynamo gave a frame up without raising (it then runs eagerly), or None: ``graph_break_in_loop``,
    ``suppressed_error``, ``no_reason_logged`` (torch 2.5 writes neither the reason nor the line)."""
    m = r["metrics"]
    if m is None:
        return None
    if fail_type and _SKIPPING.search(str(fail_reason or "")):
        return "graph_break_in_loop"
    if fail_type and m.get("_suppress_errors") and not _LIMIT.search(str(fail_reason or "")):
        return "suppressed_error"
    no_graph = m.get("guard_count") is None and m.get("graph_op_count") is None
    if fail_type or not no_graph or restarts or not m.get("dynamo_time_before_restart_s"):
        return None
    if r["graph_breaks"]:
        return "graph_break_in_loop"   # 2.7-2.9: the break's artifact, and dynamo neither restarted nor compiled
    name = str(m.get("co_name") or "")
    if (m.get("has_guarded_code") is False and "entire_frame_compile_time_s" in m
            and m.get("entire_frame_compile_time_s") is None and not name.startswith(_RESUME)):
        return "no_reason_logged"      # 2.5: no artifacts exist; a resume frame with nothing to compile looks alike
    return None


def _status(r: dict[str, Any], fail_type: Any, fail_reason: Any, restarts: list[str]) -> str:
    """ok, graph_break, skipped_frame, eager_fallback, failed or incomplete (see the module docstring)."""
    if r["metrics"] is None:
        # torch 2.5 writes a refused recompile (the limit) as a bare recompile_reasons artifact: no dynamo_start
        return "eager_fallback" if r["recompile_reasons"] and not r["started"] else "incomplete"
    if fail_type and (_LIMIT.search(str(fail_reason or "")) or _LIMIT.search(str(fail_type))):
        return "eager_fallback"
    if skip_reason(r, fail_type, fail_reason, restarts):
        return "skipped_frame"
    broke = bool(r["graph_breaks"] or restarts or _GRAPH_BREAK.search(str(fail_reason or "")))
    if fail_type and (r["dynamo_error"] is not None or not broke):
        return "failed"  # an error reached the user (dynamo_error), or nothing says dynamo carried on
    if broke:
        return "graph_break"
    return "ok"


def _finish_row(r: dict[str, Any], strings: dict[int, str], torch_version: str | None,
                notes: Counter) -> dict[str, Any]:
    m: dict[str, Any] = r["metrics"] or {}
    bwd: dict[str, Any] = r["bwd"] or {}

    def num(d: dict[str, Any], k: str) -> float | None:
        return _num(d.get(k), k, notes)

    def integer(d: dict[str, Any], k: str) -> int | None:
        try:
            return _int(d.get(k), k)
        except _BadField as exc:
            notes[f"compilation_metrics: {exc}: ignored"] += 1
            return None

    def string(d: dict[str, Any], k: str) -> str | None:
        v = d.get(k)
        return None if v is None else _text(v)

    co_name, co_file, co_line = string(m, "co_name"), string(m, "co_filename"), integer(m, "co_firstlineno")
    stack = r["stack"]
    if (co_name is None or co_file is None) and stack and isinstance(stack[-1], dict):
        top = stack[-1]
        co_name = co_name or (None if top.get("name") is None else _text(top.get("name")))
        fidx = top.get("filename")
        co_file = co_file or (strings.get(fidx, str(fidx)) if isinstance(fidx, int) else
                              (None if fidx is None else _text(fidx)))
        if co_line is None:
            co_line = integer(top, "line")
    def ns(k: str, scale: float = 1000.0) -> int | None:
        """A time field in ns: integer µs stay exact (wall-clock µs * 1000 is past float precision)."""
        v = m.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53:
            out = v * int(scale)
        else:
            x = num(m, k)
            out = None if x is None else int(round(x * scale))
        if out is not None and not -_INT64 <= out < _INT64:
            notes[f"compilation_metrics.{k} is out of range: ignored"] += 1
            return None
        return out

    entire_s = num(m, "entire_frame_compile_time_s")
    start, end, dur = ns("start_time_us"), ns("end_time_us"), ns("duration_us")
    if start is None:
        start = ns("start_time", 1e9)
    if dur is None and entire_s is not None:
        dur = int(round(entire_s * 1e9))
    if end is None and start is not None and dur is not None and -_INT64 <= start + dur < _INT64:
        end = start + dur
    if dur is not None and dur >= 0:
        duration: int | None = dur
    elif start is not None and end is not None and end >= start:
        duration = end - start
    else:
        duration = None  # unknown, never 0
    reasons = r["recompile_reasons"]
    if not reasons and m.get("recompile_reason"):
        reasons = _texts(m["recompile_reason"])
    restarts = _texts(m.get("restart_reasons"))
    fail_type, fail_reason = string(m, "fail_type"), string(m, "fail_reason")
    fail_file = string(m, "fail_user_frame_filename")
    fail_line = integer(m, "fail_user_frame_lineno")
    status = _status(r, fail_type, fail_reason, restarts)
    skipped = skip_reason(r, fail_type, fail_reason, restarts) if status == "skipped_frame" else None
    failed = status in ("failed", "eager_fallback", "skipped_frame")
    break_reason = None
    if status == "graph_break" or skipped == "graph_break_in_loop":
        break_reason = _break_summary(r["graph_breaks"][0] if r["graph_breaks"] else
                                      restarts[0] if restarts else fail_reason)
    if fail_file is None and skipped and r["graph_breaks"]:   # 2.7-2.9: the line is only in the artifact
        gb = _GB_AT.search(r["graph_breaks"][0])
        if gb:
            fail_file, fail_line = gb.group(1), int(gb.group(2))
    hits = sum(integer(d, k) or 0 for k in _CACHE_HIT_KEYS for d in (m, bwd) if k in d)
    misses = sum(integer(d, k) or 0 for k in _CACHE_MISS_KEYS for d in (m, bwd) if k in d)
    if not hits and not misses:
        hits, misses = r["art_hits"], r["art_misses"]
    if not hits and not misses:
        hits, misses = r["hash_hits"], r["hash_misses"]
    if hits >= _INT32 or misses >= _INT32:
        notes["compilation_metrics cache hit/miss counts out of range: ignored"] += 1
        hits = misses = None
    ctx = m.get("recompile_user_contexts")
    ctx_text = None
    step = None
    if ctx:
        ctx_text = _text(" | ".join(str(c) for c in ctx) if isinstance(ctx, (list, tuple)) else str(ctx))
        sm = _STEP.search(ctx_text)
        step = int(sm.group(1)) if sm and abs(int(sm.group(1))) < 2**31 else None
    config_hash = m.get("_config_hash")
    bwd_s = num(bwd, "entire_frame_compile_time_s")
    if bwd_s is None and num(bwd, "duration_us") is not None:
        bwd_s = num(bwd, "duration_us") / 1e6  # type: ignore[operator]
    n_breaks = integer(m, "num_graph_breaks")
    return {
        "compile_id": format_compile_id(r["frame_id"], r["frame_compile_id"], r["attempt"],
                                        r["compiled_autograd_id"]),
        "frame_id": r["frame_id"], "frame_compile_id": r["frame_compile_id"], "attempt": r["attempt"],
        "sequence": r["sequence"],
        "compiled_autograd_id": r["compiled_autograd_id"],
        "co_name": co_name, "co_filename": co_file, "co_firstlineno": co_line,
        "start": start, "end": end, "duration_ns": duration,
        "entire_frame_compile_s": entire_s,
        "backend_compile_s": _first_known(num(m, "backend_compile_time_s"),
                                          _scaled(num(m, "aot_autograd_cumulative_compile_time_us"), 1e-6)),
        "inductor_compile_s": _first_known(num(m, "inductor_compile_time_s"),
                                           _scaled(num(m, "inductor_cumulative_compile_time_us"), 1e-6)),
        "bwd_compile_s": bwd_s,
        "status": status,
        "fail_type": fail_type if failed else None,
        "fail_reason": (fail_reason or r["dynamo_error"]) if failed else None,
        "fail_user_frame": f"{fail_file}:{fail_line}" if fail_file and failed else None,
        "skip_reason": skipped, "generation": r.get("generation", 0),
        "break_reason": break_reason,
        "graph_break_count": max(len(r["graph_breaks"]), len(restarts), n_breaks or 0) if status == "graph_break" else 0,
        "recompile_reasons": reasons,
        "graph_breaks": r["graph_breaks"],
        "restart_reasons": restarts,
        "collective_schedule": r["collective_schedule"],
        "cache_hits": hits, "cache_misses": misses,
        "cache_bypasses": r["bypasses"], "cache_bypass_reason": r["bypass_reason"],
        "guard_count": integer(m, "guard_count"),
        "step": step, "user_context": ctx_text,
        "config_hash": config_hash,
        "torch_version": string(m, "pytorch_version") or torch_version,
    }


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(x for x in p.iterdir() if x.name.endswith(LOG_SUFFIXES) and x.is_file()))
        else:
            out.append(p)
    return out


def read_compile_logs(paths: list[Path], *, rank: int | None = None,
                      problems: list[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read TORCH_TRACE logs (files, or folders of ``*.log`` / ``*.log.gz``) into (COMPILES, SKIPPED) frames.

    The rank of each file is ``rank`` when given, else ``_rank_<N>_`` in the file name (what torch named the file
    after; tlparse uses it too), else the ``rank`` key in the log, else 0 (a single-process run). A rank key that
    disagrees with the file name is noted in SKIPPED. ``cause``/``cause_source`` are left null here: see
    ``workbench.analyses.recompiles.classify_compiles``.

    A field of the wrong type skips its line (or, in ``compilation_metrics``, is read as null), counted in
    SKIPPED with the field's name. A file that cannot be read raises :class:`TraceError` naming it; with
    ``problems`` given, its one-line message is appended there instead and the other files are still read.
    """
    frames: list[pl.DataFrame] = []
    skipped_rows: list[dict[str, Any]] = []
    for path in _expand(list(paths)):
        try:
            rows, skipped, r, _ = _read_one(path, rank)
            r = 0 if r is None else r
            df = None
            if rows:  # built column by column (a list of dicts converts row by row)
                columns = {k: [row[k] for row in rows] for k in rows[0]}
                del rows
                df = pl.DataFrame(columns, schema_overrides={k: v for k, v in schema.COMPILES.items()
                                                              if k in columns})
        except TraceError as exc:
            if problems is None:
                raise
            problems.append(str(exc))
            continue
        except Exception as exc:  # an unforeseen shape in one log must not take the other ranks down
            err = TraceError(path, "compile log " + rundir.unforeseen(exc))
            if problems is None:
                raise err from exc
            problems.append(str(err))
            continue
        if df is not None:
            frames.append(df.with_columns(pl.lit(r, pl.Int32).alias("rank"), pl.lit(str(path)).alias("log_file")))
        for reason, count in sorted(skipped.items()):
            skipped_rows.append({"rank": r, "file": str(path), "reason": reason, "count": count})
    if frames:
        compiles = pl.concat([schema.conform(f, schema.COMPILES) for f in frames], how="vertical")
        # a compile stopped before dynamo_start (recompile limit hit) has no code name: take the frame's
        fill = ["co_name", "co_filename", "co_firstlineno"]
        compiles = compiles.with_columns(
            pl.col(c).fill_null(pl.col(c).drop_nulls().first().over(["log_file", "compiled_autograd_id", "frame_id"]))
            for c in fill
        )
        compiles = compiles.sort(["rank", "start", "frame_id", "frame_compile_id", "sequence"], nulls_last=True,
                                 maintain_order=True)
    else:
        compiles = schema.empty(schema.COMPILES)
    skipped_df = (schema.conform(pl.DataFrame(skipped_rows), schema.SKIPPED) if skipped_rows
                  else schema.empty(schema.SKIPPED))
    return compiles, skipped_df
