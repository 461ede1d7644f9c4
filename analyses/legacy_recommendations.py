"""Transition only: recommendations from the FINDINGS *frame* (evidence JSON parsed back), for callers that do
not yet pass the typed findings to :func:`workbench.analyses.recommendations.recommend`. Remove once every caller
passes ``analysis_tables(run).roots``. The typed path is :mod:`workbench.analyses.recommendations`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl

from workbench import schema

RECOMMENDATIONS: dict[str, pl.DataType] = {
    "rank": pl.Int32,               # 1 = do this first
    "fix_id": pl.String,            # e.g. "mark_dynamic", "guard_collectives", "cast_at_boundary"
    "title": pl.String,
    "finding_kind": pl.String,
    "finding_index": pl.Int32,      # row of the finding in the findings frame given to recommend()
    "severity": pl.String,
    "cost_ns": pl.Int64,            # what the finding costs (the most this fix can win)
    "evidence": pl.String,          # what was seen, one line
    "expected_effect": pl.String,
    "config": pl.String,            # JSON {section: {key: value}} in the compile-config format, or null
    "code_advice": pl.String,       # what to change in the code, or null
    "location": pl.String,          # file:line the advice is about, or null
    "apply": pl.Boolean,            # goes into the compile config written by to_compile_config
}

_SEV = {"high": 0, "medium": 1, "low": 2, "info": 3}


def _s(ns: Any) -> str:
    return f"{(ns or 0) / 1e9:.2f} s"


def input_arg(source: str | None) -> str | None:
    """A Dynamo source naming a compiled function's input → the ``[mark_dynamic]`` key.

    ``L['x']`` → ``x``; ``L['args'][0]`` → ``0`` (positional); ``L['kwargs']['ids']`` → ``ids``;
    ``L['batch']['ids']`` → ``batch.ids``; attributes of ``self`` (not inputs) → None.
    """
    if not source:
        return None
    m = re.match(r"^L\['(\w+)'\]((?:\[[^\]]+\])*)", source)
    if not m:
        return None
    head, rest = m.group(1), re.findall(r"\[([^\]]+)\]", m.group(2))
    rest = [r.strip("'\"") for r in rest]
    if head == "self":
        return None
    if head == "args" and rest and rest[0].isdigit():
        return ".".join([rest[0]] + rest[1:])
    if head == "kwargs" and rest:
        return ".".join(rest)
    return ".".join([head] + rest)


def _expr(source: str | None) -> str:
    """The Dynamo source expression at the start of a ``cause_source`` (``L['x'] dim 0: 4 -> 8`` → ``L['x']``)."""
    if not source:
        return "the input"
    m = re.match(r"^((?:L|G)\[[^\]]+\](?:\[[^\]]+\]|\.\w+)*)", source)
    return m.group(1) if m else source.split(":")[0].split(" ==")[0]


def _dim(detail: str | None, source: str | None) -> int | None:
    m = re.search(r"dim (\d+)", detail or "") or re.search(r"dim (\d+)", source or "")
    return int(m.group(1)) if m else None


def _user_code(loc: str | None) -> str | None:
    """``loc`` unless it points into torch itself (e.g. the DDP/module wrapper Dynamo compiles)."""
    if not loc or re.search(r"[/\\]torch[/\\]_(dynamo|inductor|functorch)[/\\]|site-packages[/\\]torch[/\\]", loc):
        return None
    return loc


def _loc(ev: dict[str, Any], text: str | None = None) -> str | None:
    m = re.search(r"(/[^\s():]+\.py|[\w./-]+\.py):(\d+)", text or "")
    if m:
        return _user_code(f"{m.group(1)}:{m.group(2)}")
    if ev.get("fail_user_frame"):
        return _user_code(ev["fail_user_frame"])
    if ev.get("co_filename"):
        return _user_code(f"{ev['co_filename']}:{ev.get('co_firstlineno')}")
    return _user_code(ev.get("location"))


def _fix(fix_id: str, title: str, effect: str, *, config: dict[str, Any] | None = None,
         code: str | None = None, location: str | None = None) -> dict[str, Any]:
    return {"fix_id": fix_id, "title": title, "expected_effect": effect, "config": config,
            "code_advice": code, "location": location}


# ------------------------------------------------------------------------ cause-specific fixes
def _shape_fixes(ev: dict[str, Any], source: str | None, detail: str | None, divergent: bool,
                 step: Any = None) -> list[dict[str, Any]]:
    arg = input_arg(source)
    dim = _dim(detail, source)
    where = _loc(ev)
    fixes = []
    who = "every rank compiles one dynamic graph up front" if divergent else "one dynamic graph serves every size"
    if arg is not None and dim is not None:
        fixes.append(_fix(
            "mark_dynamic", f"Mark {_expr(source)} dim {dim} dynamic before the first compile",
            f"{who}: no recompile when the size changes"
            + (f" (no stall of the other ranks at step {step})" if divergent and step is not None else ""),
            config={"mark_dynamic": {arg: {"dim": dim}}},
            code=f"torch._dynamo.mark_dynamic(<input {arg}>, {dim}) before calling the compiled code "
                 f"(the collector does it with this config)", location=where))
        fixes.append(_fix(
            "dynamic_sources", f"Treat {_expr(source)} as dynamic through torch.compiler.config.dynamic_sources",
            f"{who}, without touching the code", config={"compiler": {"dynamic_sources": _expr(source)}}))
    fixes.append(_fix(
        "dynamic_true", "Compile with dynamic=True", "no shape recompiles at all; kernels may be slightly slower",
        config={"compile": {"dynamic": True}}))
    fixes.append(_fix(
        "same_shapes", "Feed the same shapes on every step and rank",
        "no recompile and no idle ranks; the cheapest fix when the odd batch is the last one",
        code="use DataLoader(..., drop_last=True) / DistributedSampler(drop_last=True), or pad batches to a few "
             "fixed bucket sizes (e.g. multiples of 8)", location=None))
    return fixes


def _cause_fixes(cause: str, ev: dict[str, Any], source: str | None, detail: str | None,
                 divergent: bool = False, step: Any = None) -> list[dict[str, Any]]:
    where = _loc(ev, source)
    if cause == "shape":
        return _shape_fixes(ev, source, detail, divergent, step)
    if cause == "stride":
        return [_fix("contiguous_at_boundary", f"Make {_expr(source)} contiguous before the compiled call",
                     "one stride layout: no stride recompiles",
                     code=f"pass {_expr(source)}.contiguous() (e.g. x = x.contiguous()) at the call", location=where)]
    if cause == "dtype":
        return [_fix("cast_at_boundary", f"Cast {_expr(source)} to one dtype before the compiled call",
                     "one dtype: no dtype recompiles",
                     code=f"cast at the boundary, e.g. x = x.to(torch.float32), for {source}", location=where)]
    if cause == "requires_grad":
        return [_fix("consistent_requires_grad", f"Keep requires_grad of {_expr(source)} the same on every call",
                     "no requires_grad recompiles",
                     code="call the compiled function with tensors that either all require grad or none "
                          "(x.detach() / x.requires_grad_(False)), or compile one function per case",
                     location=where)]
    if cause in ("grad_mode", "global_state"):
        return [_fix("one_mode_per_function", f"Keep {detail or 'the global state'} the same around the compiled call",
                     "one graph per mode, compiled once each (a bounded, one-time cost)",
                     code="run training under grad mode and evaluation under torch.no_grad() consistently, or "
                          "compile separate functions for training and evaluation", location=where)]
    if cause == "int_arg":
        src = (source or "").split(" ==")[0]
        return [
            _fix("dynamic_int", f"Treat {src} as a dynamic integer from the start",
                 "one graph for every value (verified: 1 compile for 4 values)",
                 config={"compiler": {"dynamic_sources": src}} if src.startswith("L[") else {"compile": {"dynamic": True}}),
            _fix("dynamic_true", "Compile with dynamic=True", "integers become symbolic: one graph for all values",
                 config={"compile": {"dynamic": True}}),
            _fix("int_as_tensor", f"Pass {src} as a tensor", "no guard on its value", location=where,
                 code=f"pass {src} as a 0-d tensor (torch.tensor(n)) instead of a Python int"),
        ]
    if cause == "float_arg":
        src = (source or "").split(" ==")[0]
        return [_fix("float_as_tensor", f"Pass {src} as a tensor or keep it constant", "no recompile per value",
                     code=f"pass {src} as a 0-d tensor", location=where),
                _fix("specialize_float_off", "Do not specialize floats", "floats become symbolic inputs",
                     config={"dynamo": {"specialize_float": False}})]
    if cause == "global":
        src = (source or "").split(" ==")[0].split(" (")[0]
        return [_fix("global_as_argument", f"Pass {src} as an argument or tensor instead of reading a global",
                     "no guard on the global's value: no recompile when it changes",
                     code=f"read {src} outside the compiled function and pass it in (as a tensor if it changes "
                          f"often)", location=where)]
    if cause == "module":
        return [_fix("compile_per_mode", "Do not toggle train()/eval() on the compiled module every step",
                     "one compile per mode, once",
                     code="evaluate with a separate compiled copy, or switch modes rarely; each mode is compiled "
                          "once and cached", location=where)]
    if cause == "backend":
        return [_fix("reuse_backend", "Reuse one backend object for the compiled function",
                     "no BACKEND_MATCH recompile",
                     code="call torch.compile once and reuse the result; a backend built anew (new callable) each "
                          "time, or a DDP optimizer wrapping it, fails the backend guard", location=where)]
    if cause in ("object_id", "type", "length", "constant", "tensor_meta", "device"):
        return [_fix(f"stable_{cause}", f"Keep {source} stable across calls",
                     "no recompile on that guard",
                     code=f"the guard {source} failed: pass the same object/type/length/value each call, or make "
                          f"the varying part a tensor input", location=where)]
    return [_fix("inspect_recompiles", "Inspect the recompile reasons",
                 "find the guard that fails", config={"env": {"TORCH_LOGS": "recompiles"}}, location=where,
                 code="run once with TORCH_LOGS=recompiles to see every failing guard")]


def _graph_break_fixes(ev: dict[str, Any], detail: str | None, source: str | None,
                       fullgraph: bool = False) -> list[dict[str, Any]]:
    where = _loc(ev, source)
    t = detail or "other"
    fixes: list[dict[str, Any]] = []
    if t == "print":
        fixes.append(_fix("reorderable_print", "Let Dynamo move print() out of the graph",
                          "no graph break for print(str) (not for print(t.shape))",
                          config={"dynamo": {"reorderable_logging_functions": ["print"]}}))
        fixes.append(_fix("guard_print", "Skip the print while compiling", "no graph break",
                          code="wrap it: if not torch.compiler.is_compiling(): print(...)", location=where))
    elif t == "logging":
        fixes.append(_fix("guard_logging", "Skip logging while compiling, or make it reorderable", "no graph break",
                          code="if not torch.compiler.is_compiling(): logger.info(...); or add the function to "
                               "torch._dynamo.config.reorderable_logging_functions", location=where))
    elif t == "item":
        fixes.append(_fix("capture_scalar_outputs", "Capture .item() in the graph", "no graph break at .item()",
                          config={"dynamo": {"capture_scalar_outputs": True}}))
        fixes.append(_fix("avoid_item", "Keep the value a tensor", "no host sync and no graph break",
                          code="use the 0-d tensor directly instead of .item()/.tolist()", location=where))
    elif t == "dynamic_output_shape":
        fixes.append(_fix("capture_dynamic_output_shape_ops", "Capture ops with data-dependent output shapes",
                          "no graph break at nonzero/unique/...",
                          config={"dynamo": {"capture_dynamic_output_shape_ops": True}}))
    elif t == "data_dependent_branch":
        fixes.append(_fix("branchless", "Replace the data-dependent if with torch.where or torch.cond",
                          "no graph break: one graph for both branches",
                          code="y = torch.where(cond, a(x), b(x)) for cheap branches, or "
                               "torch.cond(cond, true_fn, false_fn, (x,))", location=where))
    elif t == "explicit":
        fixes.append(_fix("remove_graph_break", "Remove the explicit torch._dynamo.graph_break()", "one graph",
                          code="delete the graph_break() call", location=where))
    else:
        fixes.append(_fix("isolate_unsupported", "Move the unsupported call out of the compiled region",
                          "one graph for the compiled part",
                          code="move it outside, wrap it with @torch.compiler.disable, or register it as a custom "
                               "op / torch._dynamo.allow_in_graph", location=where))
    if fullgraph:
        fixes.append(_fix("fullgraph_off", "Allow graph breaks (fullgraph=False) until the code is fixed",
                          "the compile succeeds with a graph break instead of raising",
                          config={"compile": {"fullgraph": False}}))
    return fixes


_CACHE_FIX = _fix(
    "cache_warm_start", "Warm-start the compile caches from the previous run",
    "later runs hit the FX graph and AOTAutograd caches (verified): compile time falls on every rank",
    config={"cache": {"load": "compile_cache.bin", "save": "compile_cache.bin", "save_after_step": 3},
            "inductor": {"fx_graph_cache": True}},
    code="the collector saves torch.compiler.save_cache_artifacts() after step 3 and loads them at start; "
         "alternatively set TORCHINDUCTOR_CACHE_DIR to storage every rank shares")


def _fixes_for(kind: str, ev: dict[str, Any], f: dict[str, Any]) -> list[dict[str, Any]]:
    cause = ev.get("cause")
    source = ev.get("cause_source") or (ev.get("sources") or [None])[0]
    detail = ev.get("cause_detail")
    if kind == "divergent_recompile":
        step = ev.get("step")
        after = max(1, int(step) - 1) if step is not None else 1
        fixes = []
        if cause == "shape":
            fixes += _shape_fixes(ev, source, detail, True, step)[:1]
        fixes.append(_fix(
            "guard_collectives", "Make ranks agree before recompiling (guard collectives)",
            "all ranks recompile together (verified on gloo): no rank waits for another's compile and no hang; "
            "costs one small collective per compiled-region entry",
            config={"distributed": {"guard_collectives": True}}))
        fixes.append(_fix(
            "eager_on_recompile", f"After warm-up (step {after}), run new input variants eagerly instead of recompiling",
            "a late shape change costs one slower eager step on that rank, not a multi-second compile that stalls "
            "every rank",
            config={"stance": {"stance": "eager_on_recompile", "after_step": after}}))
        if cause != "shape":
            fixes += _cause_fixes(cause or "other", ev, source, detail, True, step)
        else:
            fixes += _shape_fixes(ev, source, detail, True, step)[1:]
        fixes.append(_fix(
            "warmup_barrier", "Warm up every input variant on all ranks, then barrier",
            "all compiles happen during warm-up on every rank at once",
            config={"distributed": {"barrier_after_step": after}},
            code="run one step per expected shape on every rank before training (e.g. the last, smaller batch), "
                 "then dist.barrier()"))
        return fixes
    if kind == "nccl_timeout_risk":
        return [
            _fix("raise_timeout", "Raise the collective timeout above the worst compile time",
                 "a slow compile on one rank no longer kills the job",
                 code="dist.init_process_group(..., timeout=datetime.timedelta(minutes=30))"),
            _fix("guard_collectives", "Make ranks recompile together", "no rank waits alone in a collective",
                 config={"distributed": {"guard_collectives": True}}),
            _CACHE_FIX,
        ]
    if kind in ("divergent_cache", "compile_time", "compile_skew"):
        return [_CACHE_FIX, _fix("warmup_barrier", "Barrier after the compile warm-up",
                                 "ranks start the timed steps together",
                                 config={"distributed": {"barrier_after_step": 1}},
                                 code="dist.barrier() after the first step")]
    if kind == "divergent_collective_schedule":
        return [_fix("same_graph_all_ranks", "Make every rank compile the same graph",
                     "one collective order on every rank: no mismatched collectives, no hang",
                     code="keep shapes, configs and versions identical across ranks; with NCCL, "
                          "torch._dynamo.config.enable_compiler_collectives=True makes ranks agree on dynamic-shape "
                          "decisions (crashed on gloo in torch 2.13)"),
                _fix("no_comm_reorder", "Turn off inductor's compute/communication reordering",
                     "collectives keep program order on every rank",
                     config={"inductor": {"reorder_for_compute_comm_overlap": False}})]
    if kind in ("divergent_config", "divergent_fingerprint"):
        return [_fix("pin_versions", f"Use one environment on every rank ({ev.get('field')})",
                     "identical compiles, cache keys and collective schedules on every rank",
                     code="pin torch/triton/CUDA/NCCL versions in one image, export the same TORCH*/NCCL* variables "
                          "on every rank, and apply one compile config everywhere"),
                _fix("deterministic_compile", "Deterministic inductor compiles",
                     "the same kernels and schedules for the same graph on every rank",
                     config={"inductor": {"deterministic": True}})]
    if kind == "recompile_limit":
        lim = re.search(r"=(\d+)", source or "")
        cur = int(lim.group(1)) if lim else 8
        key = "accumulated_recompile_limit" if detail == "accumulated_recompile_limit" else "recompile_limit"
        fixes = [_fix("raise_recompile_limit", f"Raise {key} (now {cur}) so the frame stays compiled",
                      "new variants compile instead of silently falling back to eager",
                      config={"dynamo": {key: max(2 * cur, 16 if key == "recompile_limit" else 512)}}),
                 _fix("fail_on_limit", "Fail loudly when the limit is hit", "no silent eager fallback",
                      config={"dynamo": {"fail_on_recompile_limit_hit": True}})]
        m = re.search(r"last guard failure: (\w+) (.*)$", source or "")
        if m:
            fixes += _cause_fixes(m.group(1), ev, m.group(2), None)
        return fixes
    if kind == "graph_break":
        return _graph_break_fixes(ev, detail, source)
    if kind == "compile_failure":
        if cause == "graph_break":
            return _graph_break_fixes(ev, detail, source, fullgraph=True)
        return [_fix("inspect_failure", f"Fix the compile error ({detail})", "the frame compiles",
                     code=(ev.get("fail_reason") or "")[:300], location=_loc(ev))]
    if kind.startswith("recompile_"):
        return _cause_fixes(cause or kind.removeprefix("recompile_"), ev, source, detail)
    # findings of the other analyses (stragglers, collectives, overlap): what the field does about them
    msg = f.get("message") or ""
    if kind == "straggler" and "data" in msg.lower():
        return [_fix("faster_data_loading", "Speed up data loading on the straggling rank",
                     "its data wait leaves the critical path; the others stop waiting for it",
                     code="DataLoader(num_workers>=4, pin_memory=True, persistent_workers=True, prefetch_factor=4); "
                          "check that rank's storage / host for contention")]
    if kind in ("straggler", "collective_drift"):
        return [_fix("balance_ranks", "Find what makes that rank slower",
                     "every rank reaches the collectives together: the others' wait goes away",
                     code="compare the rank's host, GPU clocks, data shard size and background processes with a "
                          "fast rank (workbench diff of the two ranks' breakdowns)")]
    if "exposed" in kind and "comm" in kind:
        return [_fix("overlap_comm", "Overlap communication with compute",
                     "collective time hides behind the backward pass",
                     code="DDP(bucket_cap_mb=25..100, gradient_as_bucket_view=True); with FSDP, prefetch; keep "
                          "collectives off the critical path (async_op=True, wait later)")]
    return [_fix(f"investigate_{kind}", f"Investigate: {kind}", "see the finding", code=msg or None)]


def recommend_frame(findings: pl.DataFrame, compiles: pl.DataFrame | None = None) -> pl.DataFrame:
    """Ranked fixes (RECOMMENDATIONS) for ``findings``: by the finding's severity, then its cost, then preference.

    ``compiles`` is optional (kept for callers that have it; the evidence in compile findings already carries what
    the fixes need). The first config fix of each finding has ``apply`` = True unless an earlier, higher-ranked
    fix already set the same key.
    """
    if "is_root" in findings.columns:  # fixes answer root causes; their symptoms go when the cause goes
        findings = findings.filter(pl.col("is_root").fill_null(True))
    if findings.height == 0:
        return schema.empty(RECOMMENDATIONS)
    order = sorted(range(findings.height), key=lambda i: (_SEV.get(findings["severity"][i], 9),
                                                         -(findings["cost_ns"][i] or 0), i))
    rows: list[dict[str, Any]] = []
    taken: set[tuple[str, str]] = set()
    for i in order:
        f = findings.row(i, named=True)
        try:
            ev = json.loads(f["evidence"] or "{}")
        except json.JSONDecodeError:
            ev = {}
        fixes = _fixes_for(f["kind"], ev, f)
        applied = False
        for fx in fixes:
            cfg = fx["config"]
            apply = False
            if cfg and not applied:
                keys = {(sec, k) for sec, body in cfg.items() for k in body}
                if not keys & taken:
                    apply, applied = True, True
                    taken |= keys
                elif keys <= taken:
                    applied = True  # an earlier fix already set exactly this
            rows.append({
                "fix_id": fx["fix_id"], "title": fx["title"], "finding_kind": f["kind"], "finding_index": i,
                "severity": f["severity"], "cost_ns": f["cost_ns"], "evidence": f["message"],
                "expected_effect": fx["expected_effect"],
                "config": json.dumps(cfg) if cfg else None, "code_advice": fx["code_advice"],
                "location": fx["location"], "apply": apply,
            })
    df = pl.DataFrame(rows, schema_overrides={k: v for k, v in RECOMMENDATIONS.items() if k != "rank"})
    df = df.with_columns(pl.int_range(1, df.height + 1, dtype=pl.Int32).alias("rank"))
    return schema.conform(df, RECOMMENDATIONS)


def _one_line(s: str | None, n: int = 240) -> str:
    s = " ".join((s or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"
