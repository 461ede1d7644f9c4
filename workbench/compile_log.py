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

Status: ``ok``; ``graph_break`` (compiled, with graph breaks or restarts); ``eager_fallback`` (recompile limit
hit: the frame then silently runs eager); ``failed`` (any other ``fail_type``); ``incomplete``.

Example:
    >>> from pathlib import Path
    >>> compiles, skipped = read_compile_logs([])   # no files: empty tables with the schemas
    >>> compiles.columns[:3], skipped.height
    (['rank', 'compile_id', 'frame_id'], 0)
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from workbench import schema
from workbench.errors import TraceError

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
    "torch_version",
})
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
_LIMIT = re.compile(r"recompile limit|cache_size_limit|Limit type: ", re.I)
_MAX_TEXT = 4000


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


def _new_row(key: tuple[int | None, int | None, int | None]) -> dict[str, Any]:
    return {
        "compiled_autograd_id": key[0], "frame_id": key[1], "frame_compile_id": key[2], "attempt": 0,
        "recompile_reasons": [], "graph_breaks": [], "restart_reasons": [], "collective_schedule": None,
        "art_hits": 0, "art_misses": 0, "metrics": None, "bwd": None, "stack": None, "dynamo_error": None,
    }


def _text(s: Any) -> str:
    s = str(s)
    return s if len(s) <= _MAX_TEXT else s[:_MAX_TEXT] + "…"


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
            return [str(v) for v in value]
        return [str(value)]
    return [text]


def _read_one(path: Path, forced_rank: int | None) -> tuple[list[dict[str, Any]], Counter, int | None, str | None]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read compile log ({exc.strerror})") from None
    text = data.decode("utf-8", errors="replace")
    skipped: Counter = Counter()
    rows: dict[tuple[int | None, int | None, int | None], dict[str, Any]] = {}
    strings: dict[int, str] = {}
    log_rank: int | None = None
    torch_version: str | None = None

    # payload collection state
    want: list[str] | None = None  # lines of the payload being collected
    pending: tuple[str, dict[str, Any]] | None = None
    loads = orjson.loads

    def finish() -> None:
        nonlocal torch_version
        if pending is None or want is None:
            return
        kind, ev = pending
        payload = "\n".join(want)
        _on_payload(kind, ev, payload)

    def row_for(ev: dict[str, Any]) -> dict[str, Any] | None:
        fid = ev.get("frame_id")
        if fid is None:
            return None
        key = (ev.get("compiled_autograd_id"), fid, ev.get("frame_compile_id"))
        row = rows.get(key)
        if row is None:
            row = rows[key] = _new_row(key)
        att = ev.get("attempt") or 0
        if att > row["attempt"]:
            row["attempt"] = att
        return row

    def _on_payload(kind: str, ev: dict[str, Any], payload: str) -> None:
        nonlocal torch_version
        art = ev["artifact"]
        name = art.get("name")
        if name == "torch_version":
            try:
                torch_version = loads(payload).get("pytorch_version")
            except (orjson.JSONDecodeError, AttributeError):
                pass
            return
        row = row_for(ev)
        if row is None:
            skipped[f"artifact {name} without a compile id"] += 1
            return
        if name == "recompile_reasons":
            row["recompile_reasons"].extend(_decode_reasons(payload, art.get("encoding")))
        elif name == "dynamo_graph_break_reason":
            row["graph_breaks"].append(_text(payload.strip()))
        elif name == "dynamo_error":
            row["dynamo_error"] = _text(payload.strip())
        elif name == "inductor_collective_schedule":
            try:
                sched = loads(payload)
            except orjson.JSONDecodeError:
                sched = [payload]
            row["collective_schedule"] = (row["collective_schedule"] or []) + [str(s) for s in sched]

    lines = text.split("\n")
    for line in lines:
        if not line:
            continue
        if line[0] == "\t":
            if want is not None:
                want.append(line[1:])
            continue
        if want is not None:
            finish()
            want = None
            pending = None
        idx = line.find("] {")
        if idx < 0:
            skipped["malformed line"] += 1
            continue
        body = line[idx + 2:]
        end = body.find('"', 2)
        kind = body[2:end] if body.startswith('{"') and end > 2 else ""
        if kind in ("chromium_event", "describe_tensor", "describe_storage", "describe_source",
                    "dynamo_output_graph", "aot_forward_graph", "aot_backward_graph", "aot_inference_graph",
                    "aot_joint_graph", "inductor_output_code", "dynamo_cpp_guards_str", "create_symbol",
                    "inductor_post_grad_graph", "inductor_pre_grad_graph", "dynamo_guards"):
            continue  # known, not needed: payload lines are skipped by the tab check
        if kind not in KNOWN_EVENTS:
            if kind:
                skipped[f"unknown event type {kind}"] += 1
            else:
                skipped["malformed line"] += 1
            continue
        try:
            ev = loads(body)
        except orjson.JSONDecodeError:
            skipped["malformed json"] += 1
            continue
        if not isinstance(ev, dict):
            skipped["malformed json"] += 1
            continue
        if log_rank is None and isinstance(ev.get("rank"), int):
            log_rank = ev["rank"]
        if kind == "str":
            try:
                s, i = ev["str"]
                strings[int(i)] = str(s)
            except (TypeError, ValueError, KeyError):
                skipped["malformed str event"] += 1
        elif kind == "artifact":
            art = ev.get("artifact") or {}
            name = art.get("name")
            if name in _PAYLOAD_ARTIFACTS and ev.get("has_payload"):
                want, pending = [], (kind, ev)
            elif name in _CACHE_ARTIFACTS:
                row = row_for(ev)
                if row is not None:
                    row["art_hits" if _CACHE_ARTIFACTS[name] == "hit" else "art_misses"] += 1
        elif kind in ("compilation_metrics", "bwd_compilation_metrics"):
            m = ev.get(kind)
            if not isinstance(m, dict):
                skipped[f"malformed {kind}"] += 1
                continue
            if ev.get("frame_id") is None:
                cm = _COMPILE_ID.match(str(m.get("compile_id") or ""))
                if cm is None:
                    skipped[f"{kind} without a compile id"] += 1
                    continue
                ev = {"compiled_autograd_id": int(cm.group(1)) if cm.group(1) else None,
                      "frame_id": int(cm.group(2)), "frame_compile_id": int(cm.group(3)),
                      "attempt": int(cm.group(4) or 0)}
            row = row_for(ev)
            if row is not None:
                row["metrics" if kind == "compilation_metrics" else "bwd"] = m
        elif kind == "dynamo_start":
            row = row_for(ev)
            if row is not None:
                row["stack"] = (ev.get("dynamo_start") or {}).get("stack")
    if want is not None:
        finish()

    name_rank = rank_from_filename(path)
    if forced_rank is not None:
        rank = forced_rank
    elif name_rank is not None:
        rank = name_rank
        if log_rank is not None and log_rank != name_rank:
            skipped[f"rank key in log ({log_rank}) differs from file name ({name_rank}): file name used"] += 1
    else:
        rank = log_rank
    out = [_finish_row(r, strings, torch_version) for r in rows.values()]
    return out, skipped, rank, torch_version


def _finish_row(r: dict[str, Any], strings: dict[int, str], torch_version: str | None) -> dict[str, Any]:
    m: dict[str, Any] = r["metrics"] or {}
    bwd: dict[str, Any] = r["bwd"] or {}
    co_name, co_file, co_line = m.get("co_name"), m.get("co_filename"), m.get("co_firstlineno")
    stack = r["stack"]
    if (co_name is None or co_file is None) and stack:
        top = stack[-1]
        co_name = co_name or top.get("name")
        fidx = top.get("filename")
        co_file = co_file or (strings.get(fidx, str(fidx)) if isinstance(fidx, int) else fidx)
        co_line = co_line if co_line is not None else top.get("line")
    start_us, end_us = m.get("start_time_us"), m.get("end_time_us")
    if start_us is None and m.get("start_time") is not None:
        start_us = int(float(m["start_time"]) * 1e6)
    dur_us = m.get("duration_us")
    if dur_us is None and m.get("entire_frame_compile_time_s") is not None:
        dur_us = int(m["entire_frame_compile_time_s"] * 1e6)
    if end_us is None and start_us is not None and dur_us is not None:
        end_us = start_us + dur_us
    start = int(start_us) * 1000 if start_us is not None else None
    end = int(end_us) * 1000 if end_us is not None else None
    duration = int(dur_us) * 1000 if dur_us is not None else (end - start if start is not None and end is not None
                                                                else None)
    reasons = r["recompile_reasons"]
    if not reasons and m.get("recompile_reason"):
        reasons = [str(m["recompile_reason"])]
    restarts = [str(x) for x in (m.get("restart_reasons") or [])]
    fail_type, fail_reason = m.get("fail_type"), m.get("fail_reason")
    if r["metrics"] is None:
        status = "incomplete"
    elif fail_type and _LIMIT.search(str(fail_reason or "")):
        status = "eager_fallback"
    elif fail_type:
        status = "failed"
    elif r["graph_breaks"] or restarts:
        status = "graph_break"
    else:
        status = "ok"
    hits = sum(int(m.get(k) or 0) + int(bwd.get(k) or 0) for k in _CACHE_HIT_KEYS)
    misses = sum(int(m.get(k) or 0) + int(bwd.get(k) or 0) for k in _CACHE_MISS_KEYS)
    if not hits and not misses:
        hits, misses = r["art_hits"], r["art_misses"]
    ctx = m.get("recompile_user_contexts")
    ctx_text = None
    step = None
    if ctx:
        ctx_text = " | ".join(str(c) for c in ctx) if isinstance(ctx, (list, tuple)) else str(ctx)
        sm = _STEP.search(ctx_text)
        step = int(sm.group(1)) if sm else None
    cfg_blob = f"{m.get('dynamo_config') or ''}\x00{m.get('inductor_config') or ''}"
    config_hash = hashlib.sha256(cfg_blob.encode()).hexdigest()[:16] if cfg_blob != "\x00" else None
    fail_file = m.get("fail_user_frame_filename")
    fail_line = m.get("fail_user_frame_lineno")
    bwd_s = bwd.get("entire_frame_compile_time_s")
    if bwd_s is None and bwd.get("duration_us") is not None:
        bwd_s = bwd["duration_us"] / 1e6
    return {
        "compile_id": format_compile_id(r["frame_id"], r["frame_compile_id"], r["attempt"],
                                        r["compiled_autograd_id"]),
        "frame_id": r["frame_id"], "frame_compile_id": r["frame_compile_id"], "attempt": r["attempt"],
        "compiled_autograd_id": r["compiled_autograd_id"],
        "co_name": co_name, "co_filename": co_file, "co_firstlineno": co_line,
        "start": start, "end": end, "duration_ns": duration,
        "entire_frame_compile_s": m.get("entire_frame_compile_time_s"),
        "backend_compile_s": m.get("backend_compile_time_s"),
        "inductor_compile_s": m.get("inductor_compile_time_s"),
        "bwd_compile_s": bwd_s,
        "status": status, "fail_type": fail_type,
        "fail_reason": _text(fail_reason) if fail_reason else (r["dynamo_error"] if fail_type else None),
        "fail_user_frame": f"{fail_file}:{fail_line}" if fail_file else None,
        "recompile_reasons": [_text(x) for x in reasons],
        "graph_breaks": r["graph_breaks"],
        "restart_reasons": [_text(x) for x in restarts],
        "collective_schedule": r["collective_schedule"],
        "cache_hits": hits, "cache_misses": misses,
        "guard_count": m.get("guard_count"),
        "step": step, "user_context": ctx_text,
        "config_hash": config_hash,
        "torch_version": m.get("pytorch_version") or torch_version,
    }


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(x for x in p.glob("*.log") if x.is_file()))
        else:
            out.append(p)
    return out


def read_compile_logs(paths: list[Path], *, rank: int | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Read TORCH_TRACE logs (files, or folders of ``*.log``) into (COMPILES, SKIPPED) frames.

    The rank of each file is ``rank`` when given, else ``_rank_<N>_`` in the file name (what torch named the file
    after; tlparse uses it too), else the ``rank`` key in the log, else 0 (a single-process run). A rank key that
    disagrees with the file name is noted in SKIPPED. ``cause``/``cause_source`` are left null here: see
    ``workbench.analyses.recompiles.classify_compiles``. Raises :class:`TraceError` for an unreadable file.
    """
    frames: list[pl.DataFrame] = []
    skipped_rows: list[dict[str, Any]] = []
    for path in _expand(list(paths)):
        rows, skipped, r, _ = _read_one(path, rank)
        r = 0 if r is None else r
        if rows:
            df = pl.DataFrame(rows, schema_overrides={k: v for k, v in schema.COMPILES.items()
                                                       if k in rows[0]}, infer_schema_length=None)
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
        compiles = compiles.sort(["rank", "start", "frame_id", "frame_compile_id"], nulls_last=True)
    else:
        compiles = schema.empty(schema.COMPILES)
    skipped_df = (schema.conform(pl.DataFrame(skipped_rows), schema.SKIPPED) if skipped_rows
                  else schema.empty(schema.SKIPPED))
    return compiles, skipped_df
