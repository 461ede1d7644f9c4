"""Recompiles: why each compile happened, which ranks compiled what, and what it cost the others.

Pure functions over the ``compiles`` table (``workbench.schema.COMPILES``), optionally with ``steps`` and
``collectives``:

- :func:`classify_reason` / :func:`classify_graph_break`: one reason text → (cause, detail, source);
- :func:`classify_compiles`: fill ``cause``, ``cause_detail``, ``cause_source`` on every row;
- :func:`divergent_compiles`: compile ids present on some ranks only (with step, time, cause);
- :func:`divergence_cost`: the recompiling rank's compile time matched with the others' wait in the next
  collective (from ``collectives``) or their step time (from ``steps``), else the compile time itself;
- :func:`recompile_findings`: FINDINGS rows for all of it (``kind`` contains ``divergen`` for rank divergence).

Example:
    >>> classify_reason("0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8")
    ('shape', 'dim 0', "L['x'] dim 0: 4 -> 8")
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from workbench import schema

#: Causes ``classify_compiles`` writes.
CAUSES: tuple[str, ...] = (
    "first", "shape", "stride", "dtype", "device", "requires_grad", "grad_mode", "global_state", "tensor_meta",
    "int_arg", "float_arg", "constant", "global", "module", "object_id", "type", "length", "backend", "limit",
    "graph_break", "compile_error", "cache_miss", "other",
)
#: Graph-break types (``cause_detail`` when ``cause == "graph_break"``).
GRAPH_BREAK_TYPES: tuple[str, ...] = (
    "print", "logging", "data_dependent_branch", "item", "dynamic_output_shape", "explicit", "skipped_function",
    "unsupported_call", "other",
)
DEFAULT_TIMEOUT_S = 600.0  # NCCL's default process-group timeout (10 min) in torch 2.x

_PREFIX = re.compile(r"^\s*(?:!\d+/)?\d+/\d+(?:_\d+)?:\s*")
_TENSOR = re.compile(
    r"tensor '(?P<name>[^']+)' (?P<what>size|stride) mismatch at index (?P<dim>-?\d+)\. "
    r"expected (?P<exp>[^,]+), actual (?P<act>\S+)")
_DTYPE = re.compile(r"tensor '(?P<name>[^']+)' dtype mismatch\. expected (?P<exp>\w+), actual (?P<act>\w+)")
_RG = re.compile(r"tensor '(?P<name>[^']+)' requires_grad mismatch\. expected requires_grad=(?P<exp>\d)")
_NDIM = re.compile(r"tensor '(?P<name>[^']+)' (?:rank|ndim) mismatch\. expected (?P<exp>\d+), actual (?P<act>\d+)")
_DEVICE = re.compile(r"tensor '(?P<name>[^']+)' device (?:index )?mismatch")
_TMETA = re.compile(r"tensor '(?P<name>[^']+)' (?P<what>[\w ]+?) mismatch")
_GLOBAL_STATE = re.compile(r"GLOBAL_STATE changed: (?P<what>[\w, ]+)")
_USER_LOC = re.compile(r"#\s*(?P<file>[^\s#]+\.py):(?P<line>\d+) in (?P<fn>[\w<>]+)")
_STACK_LOC = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_GB_LOC = re.compile(r"Graph break in user code at (?P<file>\S+?):(?P<line>\d+)")
_EQ = re.compile(r"^(?P<src>.+?) == (?P<val>.+)$")
_SIZE_EXPR = re.compile(r"(?P<src>L\[[^\]]+\](?:\[[^\]]+\]|\.\w+)*)\.size\(\)\[(?P<dim>\d+)\]")


def _source(name: str) -> str:
    """A tensor name in a guard message (``x``, ``args[0]``, ``self._modules['a']``) as a Dynamo source."""
    if name.startswith(("L[", "G[")):
        return name
    m = re.match(r"^(\w+)(.*)$", name)
    return f"L['{m.group(1)}']{m.group(2)}" if m else name


def user_location(text: str) -> str | None:
    """``file:line`` of the user code a guard or graph-break message points at, if it names one."""
    for rx in (_GB_LOC, _STACK_LOC):
        m = rx.search(text)
        if m:
            return f"{m.group('file')}:{m.group('line')}"
    m = _USER_LOC.search(text)
    return f"{m.group('file')}:{m.group('line')}" if m else None


def classify_reason(reason: str) -> tuple[str, str | None, str]:
    """One recompile reason (a failed guard) → (cause, detail, source with dim and values)."""
    text = _PREFIX.sub("", reason or "").strip()
    first = text.splitlines()[0] if text else ""
    guard = first.split("#", 1)[0].strip()
    loc = user_location(text)
    at = f" ({loc})" if loc else ""
    if m := _TENSOR.search(first):
        src = _source(m.group("name"))
        what = "shape" if m.group("what") == "size" else "stride"
        return what, f"dim {m.group('dim')}", f"{src} dim {m.group('dim')}: {m.group('exp')} -> {m.group('act')}"
    if m := _NDIM.search(first):
        return "shape", "ndim", f"{_source(m.group('name'))} ndim: {m.group('exp')} -> {m.group('act')}"
    if m := _DTYPE.search(first):
        return "dtype", None, f"{_source(m.group('name'))}: {m.group('exp')} -> {m.group('act')}"
    if m := _RG.search(first):
        exp = m.group("exp") == "1"
        return "requires_grad", None, f"{_source(m.group('name'))}: requires_grad {exp} -> {not exp}"
    if m := _DEVICE.search(first):
        return "device", None, f"{_source(m.group('name'))}: {first}"
    if m := _GLOBAL_STATE.search(first):
        what = m.group("what").strip()
        return ("grad_mode" if "grad_mode" in what else "global_state"), what, f"global state: {what}"
    if "BACKEND_MATCH" in first:
        return "backend", None, "a different backend callable than the cached entry (BACKEND_MATCH)" + at
    if ".training" in guard:
        src = guard.split(" == ")[0].strip()
        val = guard.split(" == ")[1].strip() if " == " in guard else "?"
        return "module", "training", f"{src} == {val} (train/eval switch){at}"
    if m := _SIZE_EXPR.search(guard):
        return "shape", f"dim {m.group('dim')} (dynamic range)", f"{m.group('src')} dim {m.group('dim')}: {guard}{at}"
    if "___check_obj_id" in guard or "ID_MATCH" in first:
        cause = "global" if "G[" in guard else "object_id"
        return cause, "identity", guard + at
    if "___check_type_id" in guard or "TYPE_MATCH" in first:
        return "type", None, guard + at
    if guard.startswith("len("):
        return "length", None, guard + at
    if m := _EQ.match(guard):
        src, val = m.group("src").strip(), m.group("val").strip()
        if "G[" in src:
            return "global", None, f"{src} == {val}{at}"
        shown = _source(src) if re.fullmatch(r"[\w.\[\]']+", src) else src
        if re.fullmatch(r"-?\d+", val):
            return "int_arg", None, f"{shown} == {val}{at}"
        if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+e-?\d+|inf|nan)", val):
            return "float_arg", None, f"{shown} == {val}{at}"
        return "constant", None, f"{shown} == {val}{at}"
    if "G[" in guard:
        return "global", None, guard + at
    if m := _TMETA.search(first):
        return "tensor_meta", m.group("what"), f"{_source(m.group('name'))}: {first}"
    return "other", None, first[:300]


def classify_graph_break(text: str) -> tuple[str, str | None]:
    """A graph-break (or fullgraph failure) message → (type, ``file:line`` or None)."""
    t = text or ""
    loc = user_location(t)
    low = t.lower()
    if "`print`" in t or "builtin operator print" in low or "function print" in low:
        kind = "print"
    elif re.search(r"logging|logger|\.warning\(|warnings\.warn", t, re.I):
        kind = "logging"
    elif "data-dependent branching" in low or "data dependent branching" in low:
        kind = "data_dependent_branch"
    elif ".item()" in t or "capture_scalar_outputs" in t or "tolist" in t:
        kind = "item"
    elif "capture_dynamic_output_shape_ops" in t or "dynamic shape operator" in low:
        kind = "dynamic_output_shape"
    elif "graph_break()" in t or "torch._dynamo.graph_break" in t:
        kind = "explicit"
    elif "marked as skipped" in low or "skipped" in low and "trace_rules" in low:
        kind = "skipped_function"
    elif "unsupported" in low or "failed to trace" in low or "call_function" in low:
        kind = "unsupported_call"
    else:
        kind = "other"
    return kind, loc


def classify_compile(row: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(cause, detail, source) for one ``compiles`` row (as a dict)."""
    reasons = row.get("recompile_reasons") or []
    fail_reason = row.get("fail_reason") or ""
    if row.get("status") == "eager_fallback":
        m = re.search(r"Limit type: (\w+)", fail_reason)
        lim = re.search(r"currently set to (\d+)", fail_reason)
        detail = m.group(1) if m else "recompile_limit"
        last = ""
        if reasons:
            c, _, s = classify_reason(reasons[0])
            last = f"; last guard failure: {c} {s}"
        limit = f"={lim.group(1)}" if lim else ""
        return "limit", detail, f"{detail}{limit} hit: frame now runs eager{last}"
    if reasons:
        return classify_reason(reasons[0])
    if row.get("fail_type"):
        kind, loc = classify_graph_break(fail_reason)
        loc = loc or row.get("fail_user_frame")
        if kind != "other" or str(row.get("fail_type")) == "Unsupported":
            return "graph_break", kind, f"{kind} at {loc}" if loc else kind
        return "compile_error", str(row.get("fail_type")), (fail_reason.splitlines() or [""])[0][:300]
    breaks = list(row.get("graph_breaks") or []) + list(row.get("restart_reasons") or [])
    if breaks:
        kind, loc = classify_graph_break(breaks[0])
        return "graph_break", kind, f"{kind} at {loc}" if loc else kind
    if (row.get("frame_compile_id") or 0) == 0:
        hits, misses = row.get("cache_hits") or 0, row.get("cache_misses") or 0
        detail = "cache_miss" if misses else ("cache_hit" if hits else None)
        return "first", detail, None
    return "other", None, "recompile with no recorded reason"


def classify_compiles(compiles: pl.DataFrame) -> pl.DataFrame:
    """``compiles`` with ``cause``, ``cause_detail`` and ``cause_source`` filled on every row."""
    if compiles.height == 0:
        return compiles
    out = [classify_compile(r) for r in compiles.iter_rows(named=True)]
    return compiles.with_columns(
        pl.Series("cause", [o[0] for o in out], pl.String),
        pl.Series("cause_detail", [o[1] for o in out], pl.String),
        pl.Series("cause_source", [o[2] for o in out], pl.String),
    )


def _ensure_classified(compiles: pl.DataFrame) -> pl.DataFrame:
    if compiles.height and compiles["cause"].null_count() == compiles.height:
        return classify_compiles(compiles)
    return compiles


def _base_id(c: pl.Expr | None = None) -> pl.Expr:
    """Compile id without the attempt suffix (ranks may restart differently)."""
    return pl.col("compile_id").str.replace(r"_\d+$", "")


DIVERGENT: dict[str, pl.DataType] = {
    "compile_id": pl.String,
    "co_name": pl.String,
    "location": pl.String,              # co_filename:co_firstlineno
    "ranks": pl.List(pl.Int32),         # ranks that compiled it
    "missing_ranks": pl.List(pl.Int32),  # ranks that did not
    "step": pl.Int32,                   # step of the compile on the compiling ranks (null when unknown)
    "start": pl.Int64,                  # earliest start among the compiling ranks
    "end": pl.Int64,
    "duration_ns": pl.Int64,            # longest compile among the compiling ranks
    "cause": pl.String,
    "cause_source": pl.String,
}


def divergent_compiles(compiles: pl.DataFrame) -> pl.DataFrame:
    """Compile ids present on some ranks only (needs >= 2 ranks), in the DIVERGENT schema."""
    if compiles.height == 0 or compiles["rank"].n_unique() < 2:
        return schema.empty(DIVERGENT)
    c = _ensure_classified(compiles).with_columns(_base_id().alias("_id"))
    all_ranks = sorted(c["rank"].unique().to_list())
    g = (c.group_by("_id").agg(
        pl.col("rank").unique().sort().alias("ranks"),
        pl.col("co_name").drop_nulls().first(),
        (pl.col("co_filename") + ":" + pl.col("co_firstlineno").cast(pl.String)).drop_nulls().first().alias("location"),
        pl.col("step").min(),
        pl.col("start").min(),
        pl.col("end").max(),
        pl.col("duration_ns").max(),
        pl.col("cause").first(),
        pl.col("cause_source").first(),
    ).filter(pl.col("ranks").list.len() < len(all_ranks)))
    if g.height == 0:
        return schema.empty(DIVERGENT)
    g = g.with_columns(
        pl.col("ranks").map_elements(lambda rs: [r for r in all_ranks if r not in rs],
                                     return_dtype=pl.List(pl.Int32)).alias("missing_ranks"),
        pl.col("_id").alias("compile_id"),
    )
    return schema.conform(g, DIVERGENT).sort("start", nulls_last=True)


def _one_source(steps: pl.DataFrame | None) -> pl.DataFrame | None:
    """Steps from one source: the collector's when present (whole steps), else the profiler's."""
    if steps is None or steps.height == 0 or "source" not in steps.columns:
        return steps
    col = steps.filter(pl.col("source").cast(pl.String) == "collector")
    return col if col.height else steps


def _step_at(steps: pl.DataFrame | None, rank: int, t: int | None) -> int | None:
    if steps is None or steps.height == 0 or t is None:
        return None
    s = steps.filter((pl.col("rank") == rank) & (pl.col("start") <= t) & (pl.col("end") >= t))
    return int(s["step"][0]) if s.height else None


def divergence_cost(div: pl.DataFrame, compiles: pl.DataFrame, steps: pl.DataFrame | None = None,
                    collectives: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per divergent compile: the other ranks' wait it caused.

    Method, best first: ``collective`` — the first collective the compiling rank entered after the compile, matched
    by process group and sequence number on the other ranks, whose time in it is the wait; ``step`` — the other ranks'
    time in the same step minus their median step; ``compile_time`` — the compile time itself (an estimate: in SPMD
    training the others block in the next collective for about that long). Adds ``wait_ns``, ``cost_method``,
    ``waiting_ranks``, ``step`` (filled from ``steps`` when the log had none).
    """
    rows = []
    steps = _one_source(steps)
    for d in div.iter_rows(named=True):
        comp_rank = d["ranks"][0] if d["ranks"] else None
        step = d["step"]
        if step is None and comp_rank is not None:
            step = _step_at(steps, comp_rank, d["start"])
        wait, method, per_rank = None, "compile_time", {}
        if collectives is not None and collectives.height and comp_rank is not None and d["end"] is not None:
            mine = collectives.filter((pl.col("rank") == comp_rank) & (pl.col("start") >= d["end"])).sort("start")
            if mine.height:
                nxt = mine.row(0, named=True)
                other = collectives.filter(
                    pl.col("rank").is_in(d["missing_ranks"]) & (pl.col("pg_name") == nxt["pg_name"])
                    & (pl.col("seq") == nxt["seq"]))
                for o in other.iter_rows(named=True):
                    s = o["kernel_start"] if o.get("kernel_start") is not None else o["start"]
                    e = o["kernel_end"] if o.get("kernel_end") is not None else o["end"]
                    if s is not None and e is not None:
                        per_rank[o["rank"]] = int(e - s)
                if per_rank:
                    wait, method = max(per_rank.values()), "collective"
        if wait is None and steps is not None and steps.height and step is not None:
            for r in d["missing_ranks"]:
                rs = steps.filter(pl.col("rank") == r)
                this = rs.filter(pl.col("step") == step)
                if this.height and rs.height > 1:
                    med = rs.filter(pl.col("step") != step)["dur"].median()
                    per_rank[r] = max(0, int(this["dur"][0] - (med or 0)))
            if per_rank:
                wait, method = max(per_rank.values()), "step"
        if wait is None:
            wait = d["duration_ns"] or 0
            per_rank = {r: wait for r in d["missing_ranks"]}
        rows.append({**d, "step": step, "wait_ns": int(wait), "cost_method": method,
                     "waiting_ranks": sorted(per_rank), "wait_by_rank": json.dumps({str(k): v for k, v in per_rank.items()})})
    if not rows:
        return div.with_columns(pl.lit(None, pl.Int64).alias("wait_ns"), pl.lit(None, pl.String).alias("cost_method"))
    return pl.DataFrame(rows, schema_overrides={**DIVERGENT, "waiting_ranks": pl.List(pl.Int32)})


# ---------------------------------------------------------------------- findings
def _finding(kind: str, severity: str, ranks: list[int], steps: list[int], cost_ns: int,
             evidence: dict[str, Any], message: str) -> dict[str, Any]:
    return {"kind": kind, "severity": severity, "ranks": sorted({int(r) for r in ranks}),
            "steps": sorted({int(s) for s in steps if s is not None}), "cost_ns": int(cost_ns or 0),
            "evidence": json.dumps(evidence, default=str), "message": message, "source": "recompiles"}


def _s(ns: int | None) -> str:
    return f"{(ns or 0) / 1e9:.2f} s"


def recompile_findings(compiles: pl.DataFrame, *, steps: pl.DataFrame | None = None,
                       collectives: pl.DataFrame | None = None, fingerprints: pl.DataFrame | None = None,
                       timeout_s: float | None = None, startup_compile_s: float = 60.0) -> pl.DataFrame:
    """FINDINGS from the compiles table (plus steps/collectives/fingerprints when given), by ``cost_ns``.

    Kinds: ``divergent_recompile`` (a compile id on some ranks only; ranks, step, compile time and the others' wait),
    ``nccl_timeout_risk``, ``divergent_cache`` (cache hits on some ranks, misses on others),
    ``divergent_collective_schedule``, ``divergent_config`` (torch version / config hash / fingerprint differs),
    ``compile_skew`` (one compile id finishing at different times on different ranks), ``recompile_<cause>``,
    ``recompile_limit`` (frame silently running eager), ``graph_break``, ``compile_failure``, ``compile_time``.
    """
    if compiles.height == 0:
        return schema.empty(schema.FINDINGS)
    c = _ensure_classified(compiles)
    timeout = timeout_s or DEFAULT_TIMEOUT_S
    out: list[dict[str, Any]] = []
    nranks = c["rank"].n_unique()

    # --- cross-rank divergence
    div = divergent_compiles(c)
    divergent_ids: set[str] = set()
    if div.height:
        costed = divergence_cost(div, c, steps, collectives)
        for d in costed.iter_rows(named=True):
            divergent_ids.add(d["compile_id"])
            step_txt = f"at step {d['step']}" if d["step"] is not None else "at an unknown step (no step context in the log)"
            ev = {"compile_id": d["compile_id"], "co_name": d["co_name"], "location": d["location"],
                  "compiling_ranks": d["ranks"], "waiting_ranks": d["missing_ranks"], "step": d["step"],
                  "compile_ns": d["duration_ns"], "wait_ns": d["wait_ns"], "cost_method": d["cost_method"],
                  "wait_by_rank": json.loads(d["wait_by_rank"]), "cause": d["cause"],
                  "cause_source": d["cause_source"], "start": d["start"], "timeout_s": timeout}
            cause_txt = f" ({d['cause']}: {d['cause_source']})" if d["cause_source"] else f" ({d['cause']})"
            ranks_txt = ", ".join(map(str, d["ranks"]))
            waiting = ", ".join(map(str, d["missing_ranks"]))
            out.append(_finding(
                "divergent_recompile", "high", d["ranks"] + d["missing_ranks"], [d["step"]], d["wait_ns"], ev,
                f"Rank {ranks_txt} alone compiled {d['compile_id']} of {d['co_name']} {step_txt}{cause_txt}; "
                f"it took {_s(d['duration_ns'])} while rank {waiting} waited {_s(d['wait_ns'])} "
                f"in the next collective ({d['cost_method']})."))
            ratio = (d["duration_ns"] or 0) / 1e9 / timeout
            if ratio >= 0.1:
                out.append(_finding(
                    "nccl_timeout_risk", "high" if ratio >= 0.5 else "medium", d["ranks"] + d["missing_ranks"],
                    [d["step"]], 0, {**ev, "ratio": ratio},
                    f"The divergent compile {d['compile_id']} on rank {ranks_txt} took {_s(d['duration_ns'])}, "
                    f"{ratio:.0%} of the {timeout:.0f} s collective timeout: a slower compile (inductor, bigger "
                    f"model) would kill the job with a collective timeout."))

    # --- per-rank differences on shared compile ids
    if nranks > 1:
        shared = c.with_columns(_base_id().alias("_id"))
        by_id = shared.group_by("_id").agg(
            pl.col("rank"), pl.col("cache_hits"), pl.col("cache_misses"), pl.col("duration_ns").alias("duration"),
            pl.col("start"),
            pl.col("collective_schedule"), pl.col("co_name").first(),
        )
        for r in by_id.iter_rows(named=True):
            if r["_id"] in divergent_ids or len(set(r["rank"])) < 2:
                continue
            hits = {rk: (h or 0) for rk, h in zip(r["rank"], r["cache_hits"])}
            misses = {rk: (m or 0) for rk, m in zip(r["rank"], r["cache_misses"])}
            hit_ranks = [rk for rk in hits if hits[rk] and not misses[rk]]
            miss_ranks = [rk for rk in misses if misses[rk]]
            if hit_ranks and miss_ranks:
                out.append(_finding(
                    "divergent_cache", "medium", hit_ranks + miss_ranks, [], 0,
                    {"compile_id": r["_id"], "hit_ranks": hit_ranks, "miss_ranks": miss_ranks},
                    f"Compile {r['_id']} hit the compile cache on rank {hit_ranks} but missed on rank {miss_ranks}: "
                    f"the missing ranks compile longer and the others wait."))
            scheds = {rk: tuple(s) for rk, s in zip(r["rank"], r["collective_schedule"]) if s is not None}
            if len(set(scheds.values())) > 1:
                groups: dict[tuple, list[int]] = {}
                for rk, s in scheds.items():
                    groups.setdefault(s, []).append(rk)
                out.append(_finding(
                    "divergent_collective_schedule", "high", list(scheds), [], 0,
                    {"compile_id": r["_id"], "schedules": [{"ranks": v, "schedule": list(k)} for k, v in groups.items()]},
                    f"Inductor scheduled the collectives of {r['_id']} differently on different ranks "
                    f"({len(groups)} schedules): ranks can issue mismatched collectives and hang."))
            durs = {rk: d for rk, d in zip(r["rank"], r["duration"]) if d is not None}
            starts = [t for t in r["start"] if t is not None]
            same_run = bool(starts) and max(starts) - min(starts) <= 600e9
            if len(durs) >= 2 and same_run:
                skew = max(durs.values()) - min(durs.values())
                if skew >= 1_000_000_000:
                    slow = max(durs, key=durs.get)
                    out.append(_finding(
                        "compile_skew", "medium" if skew < 10e9 else "high", list(durs), [], skew,
                        {"compile_id": r["_id"], "skew_ns": skew, "slowest_rank": slow,
                         "compile_ns_by_rank": {str(k): v for k, v in durs.items()}},
                        f"Compile {r['_id']} ({r['co_name']}) took {_s(skew)} longer on rank {slow} than on the "
                        f"fastest rank: the others waited that long at the first collective after it."))
        for col, what in (("torch_version", "torch version"), ("config_hash", "dynamo/inductor config")):
            per = c.group_by("rank").agg(pl.col(col).drop_nulls().unique())
            vals = {r["rank"]: tuple(sorted(r[col])) for r in per.iter_rows(named=True) if r[col]}
            if len(set(vals.values())) > 1:
                out.append(_finding(
                    "divergent_config", "high", list(vals), [], 0, {"field": col, "by_rank": {str(k): list(v) for k, v in vals.items()}},
                    f"The {what} differs across ranks: ranks can compile different graphs, recompile at different "
                    f"times and hang."))
    if fingerprints is not None and fingerprints.height > 1:
        for col in ("torch", "triton", "cuda", "cudnn", "nccl", "python", "config_hash"):
            if col not in fingerprints.columns:
                continue
            vals = {r["rank"]: r[col] for r in fingerprints.select("rank", col).iter_rows(named=True)}
            if len({v for v in vals.values()}) > 1:
                out.append(_finding(
                    "divergent_fingerprint", "high", list(vals), [], 0, {"field": col, "by_rank": {str(k): v for k, v in vals.items()}},
                    f"{col} differs across ranks ({', '.join(f'rank {k}: {v}' for k, v in vals.items())})."))

    # --- per-cause recompiles, limit, graph breaks, failures (grouped across ranks)
    rec = c.filter(~pl.col("cause").is_in(["first"]) & pl.col("cause").is_not_null())
    if rec.height:
        keys = ["cause", "cause_detail", "co_name", "co_filename", "co_firstlineno"]
        grouped = rec.group_by(keys, maintain_order=True).agg(
            pl.col("rank").unique().sort().alias("ranks"),
            pl.col("step").drop_nulls().unique().sort().alias("steps"),
            pl.col("compile_id").unique().sort().alias("compile_ids"),
            pl.col("cause_source").drop_nulls().unique(maintain_order=True).alias("sources"),
            pl.col("duration_ns").sum().alias("total_ns"),
            pl.len().alias("count"),
            pl.col("recompile_reasons").first().alias("reasons"),
            pl.col("graph_breaks").first().alias("breaks"),
            pl.col("fail_reason").drop_nulls().first().alias("fail_reason"),
            pl.col("fail_user_frame").drop_nulls().first().alias("fail_user_frame"),
        )
        for g in grouped.iter_rows(named=True):
            cause = g["cause"]
            where = f"{g['co_name']} ({g['co_filename']}:{g['co_firstlineno']})"
            ev = {"cause": cause, "cause_detail": g["cause_detail"], "sources": g["sources"][:10],
                  "co_name": g["co_name"], "co_filename": g["co_filename"], "co_firstlineno": g["co_firstlineno"],
                  "compile_ids": g["compile_ids"][:20], "count": g["count"], "compile_ns": g["total_ns"],
                  "reasons": (g["reasons"] or [])[:3], "graph_breaks": [b[:600] for b in (g["breaks"] or [])[:3]],
                  "fail_reason": (g["fail_reason"] or "")[:600] or None, "fail_user_frame": g["fail_user_frame"],
                  "nranks": nranks}
            src = "; ".join(g["sources"][:3])
            if cause == "limit":
                out.append(_finding(
                    "recompile_limit", "high", g["ranks"], g["steps"], g["total_ns"], ev,
                    f"{where} hit the recompile limit ({src}): the frame now runs eager, silently, for every new "
                    f"input variant."))
            elif cause == "graph_break":
                failed = bool(g["fail_reason"])
                out.append(_finding(
                    "graph_break" if not failed else "compile_failure", "high" if failed else "medium",
                    g["ranks"], g["steps"], g["total_ns"] if not failed else 0, ev,
                    f"{'fullgraph compile failed' if failed else 'Graph break'} in {where}: {src}."))
            elif cause == "compile_error":
                out.append(_finding(
                    "compile_failure", "high", g["ranks"], g["steps"], 0, ev,
                    f"Compiling {where} failed ({g['cause_detail']}): {src}."))
            else:
                sev = "medium" if g["count"] >= 2 or (g["total_ns"] or 0) > 1e9 else "low"
                out.append(_finding(
                    f"recompile_{cause}", sev, g["ranks"], g["steps"], g["total_ns"], ev,
                    f"{g['count']} recompile(s) of {where} caused by {cause}: {src} "
                    f"({_s(g['total_ns'])} of compile time on rank {', '.join(map(str, g['ranks']))})."))

    # --- total compile time (start-up): candidate for a compile-cache warm start
    per_rank = c.group_by("rank").agg(pl.col("duration_ns").sum().alias("ns"), pl.col("cache_hits").sum().alias("h"))
    worst = per_rank.sort("ns", descending=True).row(0, named=True) if per_rank.height else None
    if worst and worst["ns"] and worst["ns"] / 1e9 >= startup_compile_s:
        out.append(_finding(
            "compile_time", "medium", per_rank["rank"].to_list(), [], 0,
            {"compile_ns_by_rank": {str(r["rank"]): r["ns"] for r in per_rank.iter_rows(named=True)}},
            f"Compiling took {_s(worst['ns'])} on rank {worst['rank']}: a compile-cache warm start would cut "
            f"start-up."))

    if not out:
        return schema.empty(schema.FINDINGS)
    sev_order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    df = schema.conform(pl.DataFrame(out), schema.FINDINGS)
    return (df.with_columns(pl.col("severity").replace_strict(sev_order, default=9).alias("_s"))
              .sort(["cost_ns", "_s"], descending=[True, False]).drop("_s"))
