"""Recompiles: why each compile happened, which ranks compiled what, and what it cost the others.

Pure functions over the ``compiles`` table (``workbench.schema.COMPILES``), optionally with ``steps`` and
``collectives``:

- :func:`classify_reason` / :func:`classify_graph_break`: one reason text → (cause, detail, source);
- :func:`classify_compiles`: fill ``cause``, ``cause_detail``, ``cause_source`` on every row;
- :func:`divergent_compiles`: compiles of a code object (frame name + file:line) that every rank compiles, made on
  some ranks only (the n-th compile of that code object exists on some ranks only);
- :func:`divergence_cost`: the others' wait it caused, measured in the step of the compile (their collective wait
  in that step, else their step-time excess over their median), else estimated from the compile time;
- :func:`different_programs`: ranks that compile different code objects (they run different programs);
- :func:`recompile_finding_list`: typed findings for all of it; :func:`recompile_findings`: their frame view.

Example:
    >>> classify_reason("0/0: tensor 'x' size mismatch at index 0. expected 4, actual 8")
    ('shape', 'dim 0', "L['x'] dim 0: 4 -> 8")
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from workbench import schema
from workbench.analyses import metrics
from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, count_text, findings_frame, format_ns, make_finding, ranks_text
from workbench.analyses.kinds import CAUSES  # noqa: F401  (re-exported: schema.COMPILES points here)
from workbench.analyses.kinds import (
    COMPILE_TIME_NS, TIMEOUT_RISK_PCT, CacheDivergenceEvidence, CollectiveScheduleEvidence,
    CompileGroupEvidence, CompileSkewEvidence, CompileTimeEvidence, ConfigDivergenceEvidence,
    DifferentProgramsEvidence, DivergentRecompileEvidence, Kind, RECOMPILE_KINDS, SkippedFrameEvidence,
    TimeoutRiskEvidence, recompile_kind,
)

#: Graph-break types (``cause_detail`` when ``cause == "graph_break"``).
GRAPH_BREAK_TYPES: tuple[str, ...] = (
    "print", "logging", "data_dependent_branch", "item", "dynamic_output_shape", "explicit", "disabled_function",
    "skipped_function", "unsupported_call", "other",
)
DEFAULT_TIMEOUT_S = 600.0  # NCCL's default process-group timeout (10 min) in torch 2.x

_PREFIX = re.compile(r"^\s*(?:!\d+/)?\d+/\d+(?:_\d+)?:\s*")
# the tensor's name: ``x`` (torch 2.7+) or its source ``L['x']`` (2.5), hence the lazy match up to "' "
_T = r"tensor '(?P<name>.+?)' "
_TENSOR = re.compile(
    _T + r"(?P<what>size|stride) mismatch at index (?P<dim>-?\d+)\. expected (?P<exp>[^,]+), actual (?P<act>\S+)")
_DTYPE = re.compile(_T + r"dtype mismatch\. expected (?P<exp>\w+), actual (?P<act>\w+)")
_RG = re.compile(_T + r"requires_grad mismatch\. expected requires_grad=(?P<exp>\d)")
_NDIM = re.compile(_T + r"(?:rank|ndim) mismatch\. expected (?P<exp>\d+), actual (?P<act>\d+)")
_DEVICE = re.compile(_T + r"device (?:index )?mismatch")
_TMETA = re.compile(_T + r"(?P<what>[\w ]+?) mismatch")
_MODULE_ATTR = re.compile(r"^(?:L\['self'\]|self)(?:\._modules\[[^\]]+\]|\.\w+)*\.(?P<attr>\w+)$")
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
        if m := _MODULE_ATTR.match(src):
            return "module", "attribute", f"{shown} == {val} (module attribute {m.group('attr')}){at}"
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
    if "`print`" in t or "builtin operator print" in low or "function print" in low or "builtin: print" in low:
        kind = "print"
    elif re.search(r"logging|logger|\.warning\(|warnings\.warn", t, re.I):
        kind = "logging"
    elif ("data-dependent branching" in low or "data dependent branching" in low
          or "dynamic control flow is not supported" in low):   # torch 2.5's wording
        kind = "data_dependent_branch"
    elif ".item()" in t or "capture_scalar_outputs" in t or "tolist" in t or t.strip() == "Tensor.item":
        kind = "item"
    elif re.search(r"disable\(\)(?:`d| wrapped) function|compiler\.disable|skip calling .*disable", t, re.I):
        kind = "disabled_function"
    elif "capture_dynamic_output_shape_ops" in t or "dynamic shape operator" in low:
        kind = "dynamic_output_shape"
    elif "graph_break()" in t or "torch._dynamo.graph_break" in t:
        kind = "explicit"
    elif "marked as skipped" in low or "skipped" in low and "trace_rules" in low:
        kind = "skipped_function"
    elif ("unsupported" in low or "failed to trace" in low or "call_function" in low
          or re.fullmatch(r"Tensor\.\w+", t.strip())):
        kind = "unsupported_call"
    else:
        kind = "other"
    return kind, loc


def classify_compile(row: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(cause, detail, source) for one ``compiles`` row (as a dict)."""
    reasons = row.get("recompile_reasons") or []
    fail_reason = row.get("fail_reason") or ""
    if row.get("status") == "skipped_frame":
        why = row.get("skip_reason") or "no_reason_logged"
        kind, loc = classify_graph_break(row.get("break_reason") or fail_reason)
        loc = row.get("fail_user_frame") or loc
        what = {"graph_break_in_loop": f"graph break in a loop ({kind})", "suppressed_error":
                f"{row.get('fail_type') or 'compile error'} under suppress_errors",
                "no_reason_logged": "dynamo gave the frame up (torch 2.5 logs no reason)"}.get(why, why)
        return "skipped_frame", why, f"{what} at {loc}" if loc else what
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
    if not breaks and row.get("status") == "graph_break" and row.get("break_reason"):
        breaks = [row["break_reason"]]
    if breaks:
        kind, loc = classify_graph_break(breaks[0])
        return "graph_break", kind, f"{kind} at {loc}" if loc else kind
    if (row.get("frame_compile_id") or 0) == 0:
        hits, misses = row.get("cache_hits") or 0, row.get("cache_misses") or 0
        detail = "cache_miss" if misses else ("cache_hit" if hits else None)
        return "first", detail, None
    return "other", None, "recompile with no recorded reason"


_RESUME_AT = re.compile(r"^torch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)$")
#: The per-rank counts :func:`event_counts` gives (what tlparse and the matrix scripts count).
EVENT_COUNTS = ("compiles", "first_compiles", "recompiles", "graph_breaks", "skipped_frames", "limit_hits",
                "failures", "suppressed", "generations", "resets")


def break_location(row: dict[str, Any]) -> str | None:
    """``file:line`` of the graph break a compile shows (its artifact, else its failure frame), ``fn:line`` from a
    resume frame's name (``torch_dynamo_resume_in_<fn>_at_<line>``: the break's line), else None."""
    for text in row.get("graph_breaks") or []:
        m = _GB_LOC.search(text)
        if m:
            return f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')}"
    if row.get("fail_user_frame") and row.get("status") == "skipped_frame":
        return str(row["fail_user_frame"]).rsplit("/", 1)[-1]
    m = _RESUME_AT.match(row.get("co_name") or "")
    if m:
        return f"{m.group('fn')}:{m.group('line')}"
    return None


def event_counts(compiles: pl.DataFrame) -> dict[int, dict[str, int]]:
    """Per rank, the compile events of its log(s), counted once each (see :data:`EVENT_COUNTS`).

    ``compiles``: compilations dynamo finished (a ``compilation_metrics``); ``first_compiles``: of frame compile id
    0, in any generation; ``recompiles``: frame compile id > 0 that compiled (not the one the limit refused);
    ``graph_breaks``: distinct break lines (a break inside a nested call shows in two frames: one break);
    ``skipped_frames``: frames given up (status ``skipped_frame``) plus limit hits (the frame runs eager for new
    inputs); ``failures``: compiles that raised into user code; ``suppressed``: errors ``suppress_errors`` swallowed;
    ``generations``: dynamo resets + 1.
    """
    out: dict[int, dict[str, int]] = {}
    if compiles.is_empty():
        return out
    for rank in sorted(compiles["rank"].unique().drop_nulls().to_list()):
        rows = compiles.filter(pl.col("rank") == rank).to_dicts()
        done = [r for r in rows if r["status"] != "incomplete" and not (r["status"] == "eager_fallback"
                                                                       and r["duration_ns"] is None
                                                                       and r["start"] is None)]
        autograd_outer = [r for r in done if r.get("compiled_autograd_id") is None]
        breaks: set[str] = set()
        if any(r["graph_breaks"] for r in rows):
            for r in rows:
                if r["status"] == "graph_break" or r.get("skip_reason") == "graph_break_in_loop":
                    breaks.add(break_location(r) or f"{r['co_name']}:{r['compile_id']}")
        else:   # torch 2.5 logs no break artifact: each resume frame is one break (at its line)
            breaks = {m.group(0) for r in rows if (m := _RESUME_AT.match(r["co_name"] or ""))}
            if not breaks:
                breaks = {f"{r['co_name']}:{r['compile_id']}" for r in rows if r["status"] == "graph_break"}
        gens = max((r.get("generation") or 0) for r in rows) + 1
        out[int(rank)] = {
            "compiles": len(done),
            "first_compiles": sum(1 for r in autograd_outer if r["frame_compile_id"] == 0),
            "recompiles": sum(1 for r in done if (r["frame_compile_id"] or 0) > 0 and r["status"] in ("ok", "graph_break")),
            "graph_breaks": len(breaks),
            "skipped_frames": sum(1 for r in rows if r["status"] in ("skipped_frame", "eager_fallback")),
            "limit_hits": sum(1 for r in rows if r["status"] == "eager_fallback"),
            "failures": sum(1 for r in rows if r["status"] == "failed"),
            "suppressed": sum(1 for r in rows if r.get("skip_reason") == "suppressed_error"),
            "generations": gens, "resets": gens - 1,
        }
    return out


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


#: The divergence tables' columns (declared in :mod:`workbench.schema`, one place for every table).
DIVERGENT = schema.DIVERGENT
DIVERGENCE_COST = schema.DIVERGENCE_COST


def _code_object() -> pl.Expr:
    """The code object a compile is of: ``co_name file:line`` (the same function on every rank)."""
    return pl.concat_str([pl.col("co_name").fill_null("?"), pl.lit(" "), pl.col("co_filename").fill_null("?"),
                          pl.lit(":"), pl.col("co_firstlineno").cast(pl.String).fill_null("?")])


def _numbered(compiles: pl.DataFrame) -> pl.DataFrame:
    """Classified compiles with ``_code`` (code object) and ``_nth`` (its n-th compile on the rank, by time)."""
    c = _ensure_classified(compiles).with_columns(_code=_code_object())
    c = c.sort(["rank", "_code", "start", "frame_compile_id"], nulls_last=True)
    c = c.with_columns(_nth=pl.int_range(pl.len()).over("rank", "_code").cast(pl.Int32))
    in_step = pl.int_range(pl.len()).over("rank", "_code", "step").cast(pl.String)
    return c.with_columns(_event=pl.when(pl.col("step").is_not_null())
                          .then(pl.concat_str([pl.lit("step "), pl.col("step").cast(pl.String), pl.lit("#"), in_step]))
                          .otherwise(pl.concat_str([pl.lit("nth "), pl.col("_nth").cast(pl.String)])))


def divergent_compiles(compiles: pl.DataFrame) -> pl.DataFrame:
    """Compiles made on some ranks only, of code objects every rank compiles (DIVERGENT schema, by start).

    Compiles are matched across ranks by code object (frame name + file:line), the step they ran in and their order
    in it (their order on the rank where the step is unknown), not by compile id: ids differ when ranks number
    frames differently, and a rank's n-th compile of a frame may come in another step than another rank's (two
    ranks recompiling alone in different steps are two events). A code object some ranks never compile is not a
    divergent recompile: see :func:`different_programs`.
    """
    if compiles.height == 0 or compiles["rank"].n_unique() < 2:
        return schema.empty(DIVERGENT)
    c = _numbered(compiles)
    all_ranks = sorted(c["rank"].unique().to_list())
    everywhere = c.group_by("_code").agg(n=pl.col("rank").n_unique()).filter(pl.col("n") == len(all_ranks))["_code"]
    c = c.filter(pl.col("_code").is_in(everywhere.implode()))
    g = (c.group_by("_code", "_event").agg(
        pl.col("_nth").min(),
        pl.col("rank").unique().sort().alias("ranks"),
        pl.col("compile_id").sort_by("rank").first(),
        pl.col("compile_id").sort_by("rank").alias("rank_compile_ids"),
        pl.col("co_name").drop_nulls().first(),
        (pl.col("co_filename") + ":" + pl.col("co_firstlineno").cast(pl.String)).drop_nulls().first().alias("location"),
        pl.col("step").min(),
        pl.col("start").min(),
        pl.col("end").max(),
        pl.col("duration_ns").max(),
        pl.col("cause").first(),
        pl.col("cause_detail").first(),
        pl.col("cause_source").first(),
    ).filter(pl.col("ranks").list.len() < len(all_ranks)))
    if g.height == 0:
        return schema.empty(DIVERGENT)
    g = g.with_columns(
        pl.col("ranks").map_elements(lambda rs: [r for r in all_ranks if r not in rs],
                                     return_dtype=pl.List(pl.Int32)).alias("missing_ranks"),
        pl.col("_nth").alias("nth"),
    )
    return schema.conform(g, DIVERGENT).sort("start", nulls_last=True)


def different_programs(compiles: pl.DataFrame) -> Finding | None:
    """A ``different_programs`` finding when some code objects are compiled on some ranks only, else None."""
    if compiles.height == 0 or compiles["rank"].n_unique() < 2:
        return None
    c = compiles.with_columns(_code=_code_object())
    all_ranks = sorted(c["rank"].unique().to_list())
    per = c.group_by("_code").agg(pl.col("rank").unique().sort()).filter(pl.col("rank").list.len() < len(all_ranks))
    if per.height == 0:
        return None
    only_on = {r["_code"]: tuple(r["rank"]) for r in per.sort("_code").iter_rows(named=True)}
    frames = {int(r): tuple(sorted(set(v))) for r, v in c.group_by("rank").agg(pl.col("_code")).iter_rows()}
    example, ranks = next(iter(only_on.items()))
    return make_finding(
        Kind.DIFFERENT_PROGRAMS,
        f"Ranks compile different code: {count_text(len(only_on), 'frame')} compiled on some ranks only (e.g. {example} "
        f"on {ranks_text(ranks)}). They run different programs, so their compiles are not compared "
        "across ranks; check that every rank runs the same model and code path.",
        DifferentProgramsEvidence(frames_by_rank=frames, only_on=only_on), Cost.none("none (a fact about the run)"),
        ranks=sorted({r for rs in only_on.values() for r in rs}), source="recompiles")


def _step_at(steps: pl.DataFrame | None, rank: int, t: int | None) -> int | None:
    t_steps = metrics.step_table(steps)
    if t_steps.is_empty() or t is None:
        return None
    s = t_steps.filter((pl.col("rank") == rank) & (pl.col("start") - pl.col("data_wait_ns").fill_null(0) <= t)
                       & (pl.col("end") >= t))
    return int(s["step"][0]) if s.height else None


def _matched(collectives: pl.DataFrame | None) -> pl.DataFrame:
    if collectives is None or collectives.is_empty():
        return pl.DataFrame()
    if "wait_ns" in collectives.columns and "last_rank" in collectives.columns:
        return collectives
    from workbench.analyses.collectives import match_collectives

    return match_collectives(collectives)


def _waits_for(inst: pl.DataFrame, comp: list[int], waiting: list[int]) -> pl.DataFrame:
    """The ``waiting`` ranks' rows of collective instances ``inst`` the compiling ranks ``comp`` arrived at last,
    ``wait_ns`` each one's wait for them alone: from its own arrival, or from the last arrival of a rank not
    compiling where that came later (the layer of the critical path that rank is charged: a rank late for another
    reason keeps its own layer, never counted twice)."""
    mine = pl.col("rank").is_in(waiting) & pl.col("last_rank").is_in(comp)
    if not {"arrival", "last_arrival"} <= set(inst.columns):     # waits alone, no arrivals: as they are
        return inst.filter(mine)
    key = [c for c in ("pg_name", "pg_ranks", "step", "order") if c in inst.columns]
    other_last = pl.col("arrival").filter(~pl.col("rank").is_in(comp)).max().over(key)
    return inst.with_columns(_other_last=other_last).filter(mine).with_columns(
        wait_ns=(pl.col("last_arrival") - pl.max_horizontal("arrival", "_other_last")).clip(lower_bound=0))


def divergence_cost(div: pl.DataFrame, compiles: pl.DataFrame | None = None, steps: pl.DataFrame | None = None,
                    collectives: pl.DataFrame | None = None, arrivals: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per divergent compile, the wait it caused the other ranks, measured in the step of the compile.

    Methods, best first: the waiting ranks' collective wait in that step (instances the compiling rank arrived at
    last, counted from the last arrival of the ranks not compiling: :func:`_waits_for`; ``collectives``:
    COLLECTIVES or :func:`match_collectives` rows, a profiler window's; else ``arrivals``,
    :func:`~workbench.analyses.hangs.collective_arrivals`: every step's, from the Flight Recorder) — measured;
    their step-time excess over their median in that step (``steps``) — measured; when their own steps did not
    absorb the stall (asynchronous device work) but the next step did, that excess — estimated; else the compile
    time — estimated. Never a collective of another step; several divergent compiles of one step on the same ranks
    share its measured wait by compile time (their costs add up to it). Output: :data:`DIVERGENCE_COST`.
    """
    rows = []
    matched = _matched(collectives)
    for d in div.iter_rows(named=True):
        comp = list(d["ranks"] or [])
        waiting = list(d["missing_ranks"] or [])
        step = d["step"]
        if step is None and comp:
            step = _step_at(steps, comp[0], d["start"])
        per_rank: dict[int, int] = {}
        basis, method = "estimated", "compile time of the compiling rank (no collective or step time recorded)"
        for source, where in ((matched, ""), (arrivals, ", Flight Recorder arrivals")):
            if per_rank or step is None or source is None or source.is_empty():
                continue
            m = _waits_for(source.filter((pl.col("step") == step) & ~pl.col("p2p")), comp, waiting)
            per_rank = {int(r): int(w) for r, w in m.group_by("rank").agg(pl.col("wait_ns").sum()).iter_rows() if w}
            if per_rank:
                basis, method = "measured", f"collective wait in the same step (step {step}{where})"
        if not per_rank and step is not None and steps is not None and not steps.is_empty():
            here = metrics.step_excess_ns(steps, step, waiting)
            own = metrics.step_excess_ns(steps, step, comp)
            after = metrics.step_excess_ns(steps, step + 1, waiting)
            own_max = max(own.values(), default=0)
            if here and max(here.values()) >= 0.25 * own_max:
                per_rank, basis = here, "measured"
                method = f"step-time excess over the rank's median in the same step (step {step})"
            elif after and own_max and max(after.values()) > max(here.values(), default=0):
                per_rank, basis = after, "estimated"
                method = (f"step-time excess in the next step (step {step + 1}): the waiting ranks' step {step} did "
                          "not block (asynchronous device work)")
        wait: int | None
        if per_rank:
            wait = max(per_rank.values())
        else:
            wait = d["duration_ns"]
            per_rank = {r: wait for r in waiting} if wait is not None else {}
            if wait is None:
                method = "unknown: no compile time, collective or step time recorded"
        rows.append({**d, "step": step, "wait_ns": wait, "cost_basis": basis, "cost_method": method,
                     "waiting_ranks": sorted(waiting), "_per_rank": per_rank,
                     "_shared": bool(per_rank) and not method.startswith("compile time")})
    if not rows:
        return schema.empty(DIVERGENCE_COST)
    _share_step_waits(rows)
    for r in rows:
        r["wait_by_rank"] = json.dumps({str(k): v for k, v in sorted(r.pop("_per_rank").items())})
        r.pop("_shared")
    return schema.conform(pl.DataFrame(rows, schema_overrides={k: v for k, v in DIVERGENCE_COST.items()}),
                          DIVERGENCE_COST)


def _share_step_waits(rows: list[dict[str, Any]]) -> None:
    """Several divergent compiles of one step on the same ranks (a recompile of the forward and of a second frame)
    share that step's one measured wait: each takes the part of it its compile time is of theirs together (equal
    parts when a compile time is missing), so the findings add up to the wait instead of each counting all of it."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["_shared"] and r["step"] is not None:
            groups.setdefault((r["step"], tuple(r["ranks"] or ()), tuple(r["waiting_ranks"])), []).append(r)
    for group in groups.values():
        if len(group) < 2:
            continue
        times = [r["duration_ns"] or 0 for r in group]
        total = sum(times)
        shares = [t / total for t in times] if total > 0 and all(times) else [1 / len(group)] * len(group)
        for r, share in zip(group, shares):
            r["_per_rank"] = {k: round(v * share) for k, v in r["_per_rank"].items()}
            r["wait_ns"] = max(r["_per_rank"].values(), default=0)
            r["cost_method"] += (f"; its share by compile time ({share:.0%}) of the {len(group)} divergent compiles "
                                 "of that step")


# ---------------------------------------------------------------------- start-up skew
@dataclass(frozen=True, slots=True)
class StartupWait:
    """What the other ranks waited in one step for the rank that arrived last at its collectives."""

    last_rank: int | None            # the rank the others waited for (None: nothing measured)
    wait_by_rank: dict[int, int]     # the others' wait for it in that step
    held_ns: int                     # last arrival - second-latest arrival (what it held the job back)
    noise_ns: int                    # the top of the same measure's noise in the other steps
    method: str                      # how it was measured ("" when nothing was)


def _arrival_wait(rows: pl.DataFrame, step: int) -> StartupWait | None:
    """From collective arrivals (matched collectives or :func:`~workbench.analyses.hangs.collective_arrivals`):
    the waits in ``step``'s collectives for the rank last at its first one, and the held-back noise per step."""
    if rows is None or rows.is_empty() or not {"arrival", "step", "order", "rank"} <= set(rows.columns):
        return None
    m = rows.filter(~pl.col("p2p").fill_null(False) & pl.col("step").is_not_null() & pl.col("arrival").is_not_null())
    key = ["pg_name", "step", "order"]
    inst = m.group_by(key).agg(
        first=pl.col("arrival").min(), n=pl.col("rank").n_unique(),
        last_rank=pl.col("rank").sort_by("arrival").last(),
        held=pl.col("arrival").sort().tail(2).diff().last().fill_null(0),
    ).filter(pl.col("n") > 1)
    here = inst.filter(pl.col("step") == step).sort("first")
    if here.is_empty():
        return None
    last = int(here["last_rank"][0])
    mine = here.filter(pl.col("last_rank") == last)
    waits = m.join(mine.select(key), on=key).with_columns(
        w=(pl.col("arrival").max().over(key) - pl.col("arrival"))).filter(pl.col("rank") != last)
    by_rank = {int(r): int(w) for r, w in waits.group_by("rank").agg(pl.col("w").sum()).iter_rows() if w}
    per_step = inst.filter(pl.col("step") != step).group_by("step").agg(pl.col("held").sum())["held"].to_list()
    return StartupWait(last, by_rank, int(mine["held"].sum()), int(metrics.robust_upper(per_step)),
                       f"collective wait in the same step (step {step})")


def _step_wait(steps: pl.DataFrame | None, step: int, compile_ns: dict[int, int]) -> StartupWait | None:
    """From step times alone: each rank's time in ``step`` that is neither its own compiling (``compile_ns``) nor
    its typical step; the rank with the least of it arrived last, the others' surplus over it is their wait."""
    slack = {rank: int(d - compile_ns.get(rank, 0)) for rank, d in metrics.step_delta_ns(steps, step).items()}
    if len(slack) < 2:
        return None
    order = sorted(slack, key=slack.get)
    last = order[0]
    from workbench.analyses.stragglers import step_times

    st = step_times(steps.filter(pl.col("step") != step))
    held_steps = st.filter(pl.col("is_latest")).group_by("source", "step").agg(pl.col("held_back_ns").max())
    return StartupWait(last, {r: slack[r] - slack[last] for r in order[1:]}, slack[order[1]] - slack[last],
                       int(metrics.robust_upper(held_steps["held_back_ns"].to_list())),
                       f"step-time excess over the rank's median in the same step, less its own compile time "
                       f"(step {step})")


def startup_wait(step: int | None, compile_ns: dict[int, int], *, steps: pl.DataFrame | None = None,
                 collectives: pl.DataFrame | None = None, arrivals: pl.DataFrame | None = None) -> StartupWait | None:
    """The ranks' wait in ``step`` for the one that arrived last, measured, best source first: the collectives'
    arrivals in that step (a profiler's matched ``collectives``, else the Flight Recorder ``arrivals``), else the
    step times less each rank's own compile time (``compile_ns``, ns per rank). None when nothing was recorded."""
    if step is None:
        return None
    for rows in (_matched(collectives), arrivals):
        got = _arrival_wait(rows, step) if rows is not None else None
        if got is not None:
            return got
    return _step_wait(steps, step, compile_ns)


def _compile_time_by_rank(c: pl.DataFrame, step: int | None = None) -> dict[int, int]:
    """Per rank, the compile time of its compiles (of ``step`` when given): the frame plus its backward graph
    (``bwd_compile_s``, compiled at the first backward, outside the frame's own duration)."""
    rows = c if step is None else c.filter(pl.col("step") == step)
    bwd = (pl.col("bwd_compile_s").fill_null(0) * 1e9) if "bwd_compile_s" in rows.columns else pl.lit(0)
    g = rows.group_by("rank").agg((pl.col("duration_ns").fill_null(0) + bwd).sum().cast(pl.Int64).alias("ns"))
    return {int(r): int(n) for r, n in g.iter_rows() if n}


def cache_use(c: pl.DataFrame, step: int | None, compile_id: str) -> tuple[dict[int, int], dict[int, int]]:
    """Per rank, the compile-cache (FX graph, AOTAutograd) hits and the misses of the compiles of ``step`` (the
    skewed compile and the backward graph it brought; of ``compile_id`` when the step is unknown); empty when the
    log has none of them."""
    if not {"rank", "step", "compile_id", "cache_hits", "cache_misses"} <= set(c.columns):
        return {}, {}
    rows = c.filter(pl.col("step") == step) if step is not None else c.filter(pl.col("compile_id") == compile_id)
    g = rows.group_by("rank").agg(pl.col("cache_hits").fill_null(0).sum(), pl.col("cache_misses").fill_null(0).sum())
    got = [(int(r), int(h), int(m)) for r, h, m in g.iter_rows()]
    return {r: h for r, h, _ in got}, {r: m for r, _, m in got}


# ---------------------------------------------------------------------- findings
def _s(ns: int | None) -> str:
    return "unknown time" if ns is None else format_ns(ns)


def _sum_known(values: list[Any]) -> int | None:
    known = [int(v) for v in values if v is not None]
    return sum(known) if known else None


#: A compile-time difference worth a note even when nobody waited for it.
SKEW_NOTE_NS = 1_000_000_000
#: The least extra compile time that can make a start-up skew (below it, the order ranks start in decides).
SKEW_MIN_NS = 250_000_000


def late_start_ns(steps: pl.DataFrame | None, step: int | None, rank: int | None) -> int:
    """How much later ``rank`` started ``step`` than the latest of the other ranks (0 when it did not, or when the
    step starts are not recorded): time it held the others back that is not its compile — a process that simply
    started later (forked later, slower imports or set-up before the step) is not compile skew. Step starts are
    wall-clock times (one host, or hosts kept in sync)."""
    t = metrics.step_table(steps)
    if step is None or rank is None or t.is_empty():
        return 0
    starts = {int(r): int(s) for r, s in t.filter(pl.col("step") == step).select("rank", "start").iter_rows()
              if s is not None}
    others = [s for r, s in starts.items() if r != rank]
    return max(0, starts[rank] - max(others)) if rank in starts and others else 0


def skew_findings(cands: list[tuple[str, str | None, dict[int, int], dict[int, int | None]]], c: pl.DataFrame,
                  steps: pl.DataFrame | None, collectives: pl.DataFrame | None,
                  arrivals: pl.DataFrame | None) -> list[Finding]:
    """``compile_skew`` per step of first compiles (``cands``: compile id, frame, compile ns by rank, step by rank).

    A root cause when the others measurably waited in that step (:func:`startup_wait`) for the rank that arrived
    last, by more than the run's own noise and at least 1 s (``SKEW_NOTE_NS``: below it, ranks that start and
    compile at different speeds on a loaded host look the same), and that rank's extra compile time (at least
    ``SKEW_MIN_NS``) explains at least half of it. What it held them back by because it started the step later
    (:func:`late_start_ns`) is taken off first: a late start is not compile skew. Its cost is the time it held
    them back (measured: its arrival minus the second-latest's, less its late start: what the job would save
    without it; with two ranks, the other's wait). Else, for a
    compile-time difference ≥ 1 s or a shorter measured wait, a zero-cost note that says why it is not a cause:
    nobody waited, or not long enough. Estimated from the compile times only when no step or collective was recorded.
    """
    by_step: dict[int | None, list] = {}
    for cand in cands:
        st = [v for v in cand[3].values() if v is not None]
        by_step.setdefault(max(set(st), key=st.count) if st else None, []).append(cand)
    out = []
    for step, group in sorted(by_step.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        durs: dict[int, int] = {}
        for _, _, d, _ in group:
            for r, ns in d.items():
                durs[r] = durs.get(r, 0) + ns
        skew = max(durs.values()) - min(durs.values())
        cid, co_name, _, _ = max(group, key=lambda g: max(g[2].values()) - min(g[2].values()))
        head = f"Compile {cid} ({co_name})" if len(group) == 1 else f"The {len(group)} first compiles ({cid}, …)"
        hits, misses = cache_use(c, step, cid)
        w = startup_wait(step, _compile_time_by_rank(c, step) if step is not None else durs, steps=steps,
                         collectives=collectives, arrivals=arrivals)
        late = late_start_ns(steps, step, w.last_rank) if w is not None else 0
        if w is not None and late:           # the part of the wait that its later start explains is not a skew
            w = dataclasses.replace(w, held_ns=max(0, w.held_ns - late),
                                    method=f"{w.method}, less the {_s(late)} it started step {step} later")
        at = [step] if step is not None else []
        if w is None:
            if skew >= SKEW_NOTE_NS:
                slow = max(durs, key=durs.get)
                out.append(make_finding(
                    Kind.COMPILE_SKEW, f"{head} took {_s(skew)} longer on rank {slow} than on the fastest rank; no step "
                    "or collective times were recorded, so whether the others waited for it is not known.",
                    CompileSkewEvidence(cid, co_name, int(skew), int(slow), durs, step, cache_hits_by_rank=hits,
                                        cache_misses_by_rank=misses),
                    Cost.estimated(skew, "compile-time difference between the slowest and the fastest rank (no "
                                   "wait recorded)"), ranks=list(durs), steps=at, source="recompiles", key=cid))
            continue
        last = w.last_rank if w.last_rank in durs else max(durs, key=durs.get)
        extra = durs[last] - min(durs.values())
        ev = CompileSkewEvidence(cid, co_name, int(extra), int(last), durs, step, dict(w.wait_by_rank),
                                 w.held_ns, w.noise_ns, hits, misses)
        if (w.wait_by_rank and w.held_ns > w.noise_ns and w.held_ns >= SKEW_NOTE_NS and extra >= SKEW_MIN_NS
                and 2 * extra >= w.held_ns):
            wait = max(w.wait_by_rank.values())
            held = (f"{ranks_text(w.wait_by_rank)} waited {_s(wait)} for it" if len(w.wait_by_rank) == 1 else
                    f"{ranks_text(w.wait_by_rank)} waited up to {_s(wait)}, {_s(w.held_ns)} of it after the "
                    "second-latest rank arrived")
            out.append(make_finding(
                Kind.COMPILE_SKEW, f"{head} took {_s(extra)} longer on rank {last} than on the fastest rank, and rank "
                f"{last} arrived last in step {step}: {held} ({w.method}).", ev,
                Cost.measured(w.held_ns, f"{w.method}: its arrival minus the second-latest's"), ranks=list(durs),
                steps=at, source="recompiles", key=cid))
            continue
        if skew < SKEW_NOTE_NS and not (w.held_ns >= SKEW_MIN_NS and extra >= SKEW_MIN_NS):
            continue
        slow = max(durs, key=durs.get) if skew >= SKEW_NOTE_NS else last
        why = (f"rank {w.last_rank} arrived last in step {step}, not rank {slow}" if last != slow else
               f"the {_s(w.held_ns)} it held the others back in step {step} is within the run's own noise "
               f"({_s(w.noise_ns)} in the other steps)" if w.held_ns <= w.noise_ns else
               f"its extra compile time explains less than half of the {_s(w.held_ns)} it held the others back"
               if 2 * extra < w.held_ns else
               f"it held the others back {_s(w.held_ns)} in step {step}, under the 1 s a start-up skew must reach "
               "to tell it from ranks starting and compiling at different speeds under load")
        out.append(make_finding(
            Kind.COMPILE_SKEW, f"{head} took {_s(max(skew, extra))} longer on rank {slow} than on the fastest rank, but "
            f"{'the other ranks did not wait for it' if last != slow else 'it is not counted as a root cause'}: "
            f"{why} ({w.method}).",
            CompileSkewEvidence(cid, co_name, int(skew), int(slow), durs, step, dict(w.wait_by_rank), w.held_ns,
                                w.noise_ns, hits, misses),
            Cost.none(f"none: not a root cause ({why})"), ranks=list(durs), steps=at,
            source="recompiles", key=cid))
    return out


def recompile_findings(compiles: pl.DataFrame, **kwargs: Any) -> pl.DataFrame:
    """The FINDINGS frame view of :func:`recompile_finding_list` (same arguments), most costly first."""
    from workbench.analyses.findings import sort_findings

    return findings_frame(sort_findings(recompile_finding_list(compiles, **kwargs)))


def recompile_finding_list(compiles: pl.DataFrame, *, steps: pl.DataFrame | None = None,
                           collectives: pl.DataFrame | None = None, fingerprints: pl.DataFrame | None = None,
                           timeout_s: float | None = None, startup_compile_s: float = COMPILE_TIME_NS / 1e9,
                           arrivals: pl.DataFrame | None = None) -> list[Finding]:
    """Typed findings from the compiles table (plus steps/collectives/fingerprints when given).

    Kinds: ``divergent_recompile`` (one per divergent compile: ranks, step, the others' wait with its method; its
    per-cause recompile is not reported again), ``different_programs``, ``nccl_timeout_risk``,
    ``divergent_cache``, ``divergent_collective_schedule``, ``divergent_config``, ``divergent_fingerprint``,
    ``compile_skew``, ``recompile_<cause>``, ``recompile_limit`` (frame silently running eager), ``graph_break``
    (never a failure), ``compile_failure`` (a compiler error), ``compile_time``. ``arrivals``: every step's
    collective arrivals (:func:`workbench.analyses.hangs.collective_arrivals`), for waits outside the profiler's
    windows (a start-up skew in step 0).
    """
    if compiles.height == 0:
        return []
    c = _ensure_classified(compiles)
    timeout = timeout_s or DEFAULT_TIMEOUT_S
    out: list[Finding] = []
    nranks = c["rank"].n_unique()

    # --- cross-rank divergence (same code object, compiled on some ranks only)
    div = divergent_compiles(c)
    divergent_rows: set[tuple[int, str | None]] = set()  # (rank, compile_id) explained by a divergent finding
    if div.height:
        costed = divergence_cost(div, c, steps, collectives, arrivals)
        for d in costed.iter_rows(named=True):
            for r, cid in zip(d["ranks"], d["rank_compile_ids"] or [d["compile_id"]] * len(d["ranks"])):
                divergent_rows.add((r, cid))
            step_txt = f"at step {d['step']}" if d["step"] is not None else "at an unknown step (no step context)"
            cause_txt = f" ({d['cause']}: {d['cause_source']})" if d["cause_source"] else f" ({d['cause']})"
            ranks_txt = ranks_text(d["ranks"])
            waiting = ranks_text(d["missing_ranks"])
            wait_by_rank = {int(k): int(v) for k, v in json.loads(d["wait_by_rank"]).items() if v is not None}
            ev = DivergentRecompileEvidence(
                compile_id=d["compile_id"], co_name=d["co_name"], location=d["location"],
                compiling_ranks=tuple(d["ranks"]), waiting_ranks=tuple(d["missing_ranks"]), step=d["step"],
                compile_ns=d["duration_ns"], compile_start=d["start"], compile_end=d["end"],
                wait_by_rank=wait_by_rank, wait_ns=d["wait_ns"], cause=d["cause"], cause_detail=d["cause_detail"],
                cause_source=d["cause_source"], timeout_s=timeout)
            cost = Cost(d["wait_ns"], d["cost_basis"], d["cost_method"])
            verb = "waited" if cost.basis == "measured" else "waited an estimated"
            out.append(make_finding(
                Kind.DIVERGENT_RECOMPILE,
                f"{ranks_txt.capitalize()} alone recompiled {d['co_name']} ({d['compile_id']}) {step_txt}{cause_txt}; "
                f"the compile took {_s(d['duration_ns'])} while {waiting} {verb} {_s(d['wait_ns'])} "
                f"({d['cost_method']}).",
                ev, cost, ranks=list(d["ranks"]) + list(d["missing_ranks"]), steps=[d["step"]],
                source="recompiles", key=d["compile_id"] if div.height > 1 else ""))
            ratio = (d["duration_ns"] or 0) / 1e9 / timeout
            if ratio >= TIMEOUT_RISK_PCT / 100:
                out.append(make_finding(
                    Kind.NCCL_TIMEOUT_RISK,
                    f"The divergent compile {d['compile_id']} on {ranks_txt} took {_s(d['duration_ns'])}, "
                    f"{ratio:.0%} of the {timeout:.0f} s collective timeout: a slower compile (inductor, bigger "
                    f"model) would kill the job with a collective timeout.",
                    TimeoutRiskEvidence(d["compile_id"], tuple(d["ranks"]), int(d["duration_ns"] or 0), timeout, ratio),
                    Cost.none("none (a risk of a collective timeout)"),
                    ranks=list(d["ranks"]) + list(d["missing_ranks"]), steps=[d["step"]], source="recompiles",
                    key=d["compile_id"]))
    programs = different_programs(c)
    if programs is not None:
        out.append(programs)

    # --- per-rank differences on shared compile ids
    if nranks > 1:
        shared = c.with_columns(_base_id().alias("_id"))
        by_id = shared.group_by("_id").agg(
            pl.col("rank"), pl.col("cache_hits"), pl.col("cache_misses"), pl.col("duration_ns").alias("duration"),
            pl.col("start"), pl.col("collective_schedule"), pl.col("co_name").first(), pl.col("step"),
            (pl.col("bwd_compile_s") if "bwd_compile_s" in shared.columns else pl.lit(None, pl.Float64)).alias("bwd"),
        )
        divergent_ids = {cid for _, cid in divergent_rows}
        recompiled_ids = set(shared.filter(pl.col("frame_compile_id").fill_null(0) > 0)["_id"].to_list())
        skew_ids: list[tuple[str, str | None, dict[int, int], dict[int, int | None]]] = []
        for r in by_id.sort("_id").iter_rows(named=True):
            if r["_id"] in divergent_ids or len(set(r["rank"])) < 2:
                continue
            hits = {rk: (h or 0) for rk, h in zip(r["rank"], r["cache_hits"])}
            misses = {rk: (m or 0) for rk, m in zip(r["rank"], r["cache_misses"])}
            hit_ranks = sorted(rk for rk in hits if hits[rk] and not misses[rk])
            miss_ranks = sorted(rk for rk in misses if misses[rk])
            if hit_ranks and miss_ranks:
                out.append(make_finding(
                    Kind.DIVERGENT_CACHE,
                    f"Compile {r['_id']} hit the compile cache on {ranks_text(hit_ranks)} but missed on "
                    f"{ranks_text(miss_ranks)}: "
                    f"the missing ranks compile longer and the others wait.",
                    CacheDivergenceEvidence(r["_id"], tuple(hit_ranks), tuple(miss_ranks)),
                    Cost.none("none by itself (see compile_skew for the time)"),
                    ranks=hit_ranks + miss_ranks, source="recompiles", key=r["_id"]))
            scheds = {rk: tuple(s) for rk, s in zip(r["rank"], r["collective_schedule"]) if s is not None}
            if len(set(scheds.values())) > 1:
                groups: dict[tuple, list[int]] = {}
                for rk, s in scheds.items():
                    groups.setdefault(s, []).append(rk)
                out.append(make_finding(
                    Kind.DIVERGENT_COLLECTIVE_SCHEDULE,
                    f"Inductor scheduled the collectives of {r['_id']} differently on different ranks "
                    f"({len(groups)} schedules): ranks can issue mismatched collectives and hang.",
                    CollectiveScheduleEvidence(r["_id"], tuple({"ranks": v, "schedule": list(k)}
                                                               for k, v in groups.items())),
                    Cost.none("none (a hang risk)"), ranks=list(scheds), source="recompiles", key=r["_id"]))
            if r["_id"] in recompiled_ids:
                continue  # the skew of a recompile is part of that recompile's finding
            durs = {int(rk): int(d + (b or 0) * 1e9) for rk, d, b in zip(r["rank"], r["duration"], r["bwd"])
                    if d is not None}
            starts = [t for t in r["start"] if t is not None]
            if len(durs) >= 2 and starts and max(starts) - min(starts) <= 600e9:   # one run
                skew_ids.append((r["_id"], r["co_name"], durs, dict(zip(r["rank"], r["step"]))))
        out += skew_findings(skew_ids, c, steps, collectives, arrivals)
        for col, what in (("torch_version", "torch version"), ("config_hash", "dynamo/inductor config")):
            per = c.group_by("rank").agg(pl.col(col).drop_nulls().unique())
            vals = {r["rank"]: tuple(sorted(r[col])) for r in per.iter_rows(named=True) if r[col]}
            if len(set(vals.values())) > 1:
                out.append(make_finding(
                    Kind.DIVERGENT_CONFIG,
                    f"The {what} differs across ranks: ranks can compile different graphs, recompile at different "
                    f"times and hang.",
                    ConfigDivergenceEvidence(col, {int(k): list(v) for k, v in vals.items()}),
                    Cost.none("none (a hang risk)"), ranks=list(vals), source="recompiles", key=col))
    if fingerprints is not None and fingerprints.height > 1:
        from_logs = {f.evidence.field for f in out if isinstance(f.evidence, ConfigDivergenceEvidence)}
        same_as = {"torch": "torch_version", "config_hash": "config_hash"}
        for col in ("torch", "triton", "cuda", "cudnn", "nccl", "python", "config_hash"):
            if col not in fingerprints.columns or same_as.get(col) in from_logs:
                continue  # the compile logs already showed this difference
            vals = {r["rank"]: r[col] for r in fingerprints.select("rank", col).iter_rows(named=True)}
            if len(set(vals.values())) > 1:
                out.append(make_finding(
                    Kind.DIVERGENT_FINGERPRINT,
                    f"{col} differs across ranks ({', '.join(f'rank {k}: {v}' for k, v in vals.items())}).",
                    ConfigDivergenceEvidence(col, {int(k): v for k, v in vals.items()}),
                    Cost.none("none (a hang risk)"), ranks=list(vals), source="recompiles", key=col))

    # --- per-cause recompiles, limit, graph breaks, failures (grouped across ranks); divergent ones left out
    rec = c.filter(~pl.col("cause").is_in(["first", "skipped_frame"]) & pl.col("cause").is_not_null())
    if divergent_rows:
        keep = [(r, cid) not in divergent_rows for r, cid in zip(rec["rank"].to_list(), rec["compile_id"].to_list())]
        rec = rec.filter(pl.Series(keep, dtype=pl.Boolean))
    if rec.height:
        keys = ["cause", "cause_detail", "co_name", "co_filename", "co_firstlineno"]
        grouped = rec.group_by(keys, maintain_order=True).agg(
            pl.col("rank").unique().sort().alias("ranks"),
            pl.col("step").drop_nulls().unique().sort().alias("steps"),
            pl.col("compile_id").unique().sort().alias("compile_ids"),
            pl.col("cause_source").drop_nulls().unique(maintain_order=True).alias("sources"),
            pl.col("duration_ns").alias("durations"),
            pl.col("rank").alias("dur_ranks"),
            pl.len().alias("count"),
            pl.col("recompile_reasons").first().alias("reasons"),
            pl.col("graph_breaks").first().alias("breaks"),
            pl.col("fail_reason").drop_nulls().first().alias("fail_reason"),
            pl.col("fail_user_frame").drop_nulls().first().alias("fail_user_frame"),
            pl.col("status").drop_nulls().unique().sort().alias("statuses"),
        )
        for g in grouped.iter_rows(named=True):
            cause = g["cause"]
            per_rank: dict[int, list] = {}
            for r, d in zip(g["dur_ranks"], g["durations"]):
                per_rank.setdefault(int(r), []).append(d)
            sums = [t for t in (_sum_known(v) for v in per_rank.values()) if t is not None]
            total = max(sums) if sums else None  # the most compile time one rank spent (ranks compile in parallel)
            where = f"{g['co_name']} ({g['co_filename']}:{g['co_firstlineno']})"
            key = f"{g['co_name']}@{g['co_firstlineno']}:{g['cause_detail'] or ''}"
            ev = CompileGroupEvidence(
                cause=cause, cause_detail=g["cause_detail"], sources=tuple(g["sources"][:10]), co_name=g["co_name"],
                co_filename=g["co_filename"], co_firstlineno=g["co_firstlineno"],
                compile_ids=tuple(g["compile_ids"][:20]), count=int(g["count"]), compile_ns=total,
                reasons=tuple((g["reasons"] or [])[:3]), graph_breaks=tuple(b[:600] for b in (g["breaks"] or [])[:3]),
                fail_reason=(g["fail_reason"] or "")[:600] or None, fail_user_frame=g["fail_user_frame"],
                nranks=nranks, statuses=tuple(g["statuses"]))
            compile_cost = (Cost.measured(total, "summed compile time of these compiles on the rank that spent the "
                                          "most (compile log)")
                            if total is not None else Cost.measured(None, "compile time not recorded in the log"))
            src = "; ".join(g["sources"][:3])
            ranks_txt = ranks_text(g["ranks"])
            if cause == "limit":
                out.append(make_finding(
                    Kind.RECOMPILE_LIMIT,
                    f"{where} hit the recompile limit on {ranks_txt} ({src}): the frame now runs eager, "
                    "silently, for every new input variant.",
                    ev, compile_cost, ranks=g["ranks"], steps=g["steps"], source="recompiles", key=key))
            elif cause == "graph_break" and set(g["statuses"]) == {"failed"}:
                out.append(make_finding(
                    Kind.COMPILE_FAILURE,
                    f"The compile of {where} raised into user code at a graph break on {ranks_txt} (only a "
                    f"fullgraph=True compile raises there): {src}.",
                    ev, Cost.none("none (the compile raised)"), ranks=g["ranks"], steps=g["steps"],
                    source="recompiles", key=key))
            elif cause == "graph_break":
                out.append(make_finding(
                    Kind.GRAPH_BREAK,
                    f"Graph break in {where} on {ranks_txt}: {src}. The frame still compiles, split into "
                    "pieces that run with Python in between (its runtime cost is not measured: compare a run "
                    "without the break).",
                    ev, Cost.measured(None, "not measured: a graph break's runtime cost needs a run without it"),
                    ranks=g["ranks"], steps=g["steps"], source="recompiles", key=key))
            elif cause == "compile_error":
                out.append(make_finding(
                    Kind.COMPILE_FAILURE,
                    f"Compiling {where} failed on {ranks_txt} ({g['cause_detail']}): {src}.",
                    ev, Cost.none("none (the frame runs eager or the job stops)"), ranks=g["ranks"],
                    steps=g["steps"], source="recompiles", key=key))
            else:
                out.append(make_finding(
                    recompile_kind(cause),
                    f"{count_text(g['count'], 'recompile')} of {where} caused by {cause}: {src} "
                    f"({_s(total)} of compile time on {ranks_txt}).",
                    ev, compile_cost, ranks=g["ranks"], steps=g["steps"], source="recompiles", key=key))

    # --- total compile time (start-up): candidate for a compile-cache warm start
    per_rank = c.group_by("rank").agg(pl.col("duration_ns").sum().alias("ns")).sort("rank")
    worst = per_rank.sort("ns", descending=True).row(0, named=True) if per_rank.height else None
    if worst and worst["ns"] and worst["ns"] / 1e9 >= startup_compile_s:
        out.append(make_finding(
            Kind.COMPILE_TIME,
            f"Compiling took {_s(worst['ns'])} on rank {worst['rank']}: a compile-cache warm start would cut "
            f"start-up.",
            CompileTimeEvidence({int(r["rank"]): int(r["ns"] or 0) for r in per_rank.iter_rows(named=True)}),
            Cost.none("none in the steps (start-up time)"), ranks=per_rank["rank"].to_list(), source="recompiles"))
    return out


def divergence_table(compiles: pl.DataFrame, steps: pl.DataFrame | None, collectives: pl.DataFrame | None,
                     arrivals: pl.DataFrame | None) -> pl.DataFrame:
    """Every divergent compile with the wait it caused (:func:`divergence_cost` of :func:`divergent_compiles`):
    ``AnalysisTables.divergent``, what the findings, the app and the report show."""
    if compiles is None or compiles.is_empty():
        return schema.empty(DIVERGENCE_COST)
    c = _ensure_classified(compiles)
    div = divergent_compiles(c)
    return divergence_cost(div, c, steps, collectives, arrivals) if div.height else schema.empty(DIVERGENCE_COST)


@register_detector(Kind.DIVERGENT_RECOMPILE, Kind.NCCL_TIMEOUT_RISK, Kind.DIFFERENT_PROGRAMS, Kind.DIVERGENT_CACHE,
                   Kind.DIVERGENT_COLLECTIVE_SCHEDULE, Kind.DIVERGENT_CONFIG, Kind.DIVERGENT_FINGERPRINT,
                   Kind.COMPILE_SKEW, *sorted(RECOMPILE_KINDS), Kind.RECOMPILE_LIMIT, Kind.GRAPH_BREAK,
                   Kind.COMPILE_FAILURE, Kind.COMPILE_TIME,
                   needs=("compiles", "steps", "matched", "collectives", "fingerprints", "timeout_s", "hangs", "arrivals"),
                   order=50)
def _detect(x: Inputs) -> list[Finding]:
    """:func:`recompile_finding_list` with every step's collective arrivals from the Flight Recorder."""
    from workbench.analyses.hangs import collective_arrivals

    return recompile_finding_list(x.compiles, steps=x.steps,
                                  collectives=x.matched if not x.matched.is_empty() else x.collectives,
                                  fingerprints=x.fingerprints, timeout_s=x.timeout_s,
                                  arrivals=x.arrivals if x.arrivals is not None
                                  else collective_arrivals(x.hangs.entries, x.steps))


# ---------------------------------------------------------------------------------------------- skipped frames
_SKIP_TEXT = {
    "graph_break_in_loop": "a graph break inside a loop made dynamo skip the frame",
    "suppressed_error": "its compile failed and suppress_errors swallowed the error",
    "no_reason_logged": "dynamo gave the frame up (torch 2.5 logs no reason)",
}
_SKIP_FIX = {
    "graph_break_in_loop": "express the branch with torch.cond / torch.where, or move it out of the loop",
    "suppressed_error": "fix the compile error (run once without suppress_errors to see it)",
    "no_reason_logged": "rerun with a newer torch (2.7+) or TORCH_LOGS=graph_breaks to see the break",
}


def _steps_after(steps: pl.DataFrame | None, rank: int, since: int) -> tuple[int, int]:
    """(count, summed duration) of the rank's collector steps that started after ``since``."""
    if steps is None or steps.is_empty() or "dur" not in steps.columns:
        return 0, 0
    st = steps.filter((pl.col("rank") == rank) & (pl.col("start") >= since))
    if "source" in st.columns:
        st = st.filter(pl.col("source").cast(pl.String) == "collector")
    return st.height, int(st["dur"].drop_nulls().sum() or 0)


def _profiled_steps(steps: pl.DataFrame | None, rank: int) -> list[tuple[int, int]]:
    """(start, end) of the rank's profiled steps (the profiler's ProfilerStep ranges), in order."""
    if steps is None or steps.is_empty() or "source" not in steps.columns:
        return []
    st = steps.filter((pl.col("rank") == rank) & (pl.col("source").cast(pl.String) == "profiler"))
    return sorted((int(a), int(b)) for a, b in st.select("start", "end").iter_rows() if a is not None and b is not None)


def skipped_frame_findings(compiles: pl.DataFrame, *, device: Any = None,
                           steps: pl.DataFrame | None = None) -> list[Finding]:
    """One ``skipped_frame`` finding per frame dynamo gave up without raising (status ``skipped_frame``).

    Its cost is what running the frame eagerly cost: the GPU idle (launch gaps) of the profiled steps after the skip,
    each less the median idle of the profiled steps before it, on the worst rank (measured, from ``device``:
    :class:`workbench.analyses.rootcause.DeviceTime`, and the profiler's steps); without
    such a window, estimated as the collector steps run after the skip (an upper bound, labelled so); without
    steps, the time dynamo spent before giving up (labelled so). Its idle / launch-bound symptoms are attributed
    under it by time (the frame runs eagerly from the skip on).
    """
    from workbench.analyses.intervals import intersect, length

    if compiles.is_empty():
        return []
    c = _ensure_classified(compiles).filter(pl.col("status") == "skipped_frame")
    out: list[Finding] = []
    keys = ["co_name", "co_filename", "co_firstlineno", "skip_reason"]
    for g in c.group_by(keys, maintain_order=True).agg(
            pl.col("rank"), pl.col("compile_id"), pl.col("start"), pl.col("end"), pl.col("duration_ns"),
            pl.col("fail_user_frame").drop_nulls().first(), pl.col("break_reason").drop_nulls().first(),
            pl.col("fail_reason").drop_nulls().first(), pl.col("fail_type").drop_nulls().first(),
            pl.col("step")).iter_rows(named=True):
        ranks = sorted({int(r) for r in g["rank"]})
        since: dict[int, int] = {}
        for r, s, e in zip(g["rank"], g["start"], g["end"]):
            t = e if e is not None else s
            if t is not None:
                since[int(r)] = min(since.get(int(r), t), t)
        attempt = max((d for d in g["duration_ns"] if d is not None), default=None)
        eager: dict[int, int] = {}
        baseline: dict[int, int] = {}
        if device is not None:
            for r in ranks:
                idle = device.idle.get(r, [])
                if device.host.get(r) or r not in since or not idle:
                    continue   # a CPU rank timed from the host, or no device idle recorded: nothing to measure
                per_step = [(s0, length(intersect(idle, [(s0, e0)]))) for s0, e0 in _profiled_steps(steps, r)]
                before = sorted(n for s0, n in per_step if s0 < since[r])
                after = [n for s0, n in per_step if s0 >= since[r]]
                if after:
                    base = before[len(before) // 2] if before else 0
                    baseline[r] = base
                    eager[r] = sum(max(0, n - base) for n in after)
        line = g["fail_user_frame"]
        why = g["skip_reason"] or "no_reason_logged"
        if eager:
            worst = max(eager, key=lambda r: eager[r])
            than = (f"more than the median profiled step before it ({format_ns(baseline[worst])})" if baseline[worst]
                    else "(no profiled step before the skip to compare with)")
            cost = Cost.measured(eager[worst], f"GPU idle (launch gaps) of the profiled steps after the skip, rank "
                                               f"{worst}, {than}: what running {g['co_name']} eagerly cost there")
        else:
            counted = {r: _steps_after(steps, r, since[r]) for r in ranks if r in since}
            counted = {r: v for r, v in counted.items() if v[0]}
            if counted:
                worst = max(counted, key=lambda r: counted[r][1])
                n, ns = counted[worst]
                cost = Cost.estimated(ns, f"estimated upper bound: the {n} collector step(s) rank {worst} ran with "
                                          f"{g['co_name']} eager (no profiler window after the skip shows its kernels)")
            else:
                cost = Cost.estimated(attempt, "estimated: only dynamo's time before giving up is known (no profiler "
                                               "window or steps after the skip show what eager costs)")
        ev = SkippedFrameEvidence(
            co_name=g["co_name"], co_filename=g["co_filename"], co_firstlineno=g["co_firstlineno"], skip_reason=why,
            cause_line=line, break_reason=g["break_reason"] or (g["fail_reason"] or "")[:300] or None,
            compile_ids=tuple(sorted(set(g["compile_id"])))[:20], since=since, attempt_ns=attempt, eager_ns=eager)
        at = f" at {line}" if line else ""
        what = g["break_reason"] or g["fail_type"] or ""
        out.append(make_finding(
            Kind.SKIPPED_FRAME,
            f"{g['co_name']} runs eagerly on {ranks_text(ranks)}: {_SKIP_TEXT.get(why, why)}{at}"
            f"{f' ({what})' if what else ''}. Fix: {_SKIP_FIX.get(why, 'see the reason')}.",
            ev, cost, ranks=ranks, steps=[s for s in g["step"] if s is not None], source="recompiles",
            key=f"{g['co_name']}@{g['co_firstlineno']}:{why}"))
    return out


@register_detector(Kind.SKIPPED_FRAME, needs=("compiles", "device", "steps"), order=51)
def _detect_skipped(x: Inputs) -> list[Finding]:
    """:func:`skipped_frame_findings` with the analysed window's device time."""
    return skipped_frame_findings(x.compiles, device=x.device, steps=x.steps)
