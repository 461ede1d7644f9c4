"""Recommendations: typed findings → ranked fixes (best first) → a compile config the collector applies.

Fixers are registered against the evidence class they read (``@register_fixer(StragglerEvidence)``, narrowed with
``kinds=`` where kinds share one class); a fixer takes the :class:`~workbench.analyses.findings.Finding` (its typed
evidence) and returns :class:`Fix` es. Within a finding, fixes are ordered by ``gain``: the share of the finding's
measured cost the fix is expected to remove (a dynamic graph removes a shape recompile's stall — 1.0; a raised
recompile limit compiles every variant — it only stops the eager fallback; guard collectives make every rank
compile together — the stall stays). Each fix says why it is ranked where it is (``why``).

A fix is configuration (``config``: the :class:`Setting` s it writes — ``[section] key = value`` of
``docs/compile-config.md``, restricted to settings that take effect through the plain collector surface —
``Collector(path, compile_config=...)`` with the user's own ``torch.compile``) or code (``code`` with the
:class:`CodeLine` it is about), never a config setting for what needs a code change. :func:`ranked_fixes` returns
:class:`Recommendation` s: per finding, the best config fix is marked ``apply`` (written by
:func:`to_compile_config`); the others are listed as comments, best first. :func:`recommendations_frame` is their
polars view (``RECOMMENDATIONS``; :func:`recommend` returns it).

Example:
    >>> recommend([]).height
    0
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import polars as pl

from workbench import fix_versions, schema
from workbench.analyses.findings import Finding, format_ns
from workbench.analyses.kinds import (
    RECOMPILE_KINDS, CacheDivergenceEvidence, CollectiveWaitEvidence, CompiledDesyncEvidence, CompileGroupEvidence,
    CompileSkewEvidence, CompileTimeEvidence, ConfigDivergenceEvidence, ConfigNotAppliedEvidence,
    CollectiveScheduleEvidence, DivergentRecompileEvidence, Evidence, ExposedCommEvidence, ExposedMemcpyEvidence,
    IdleCauseEvidence, IdleEvidence, JobFailureEvidence, Kind, PipelineBubbleEvidence, SkippedFrameEvidence,
    StragglerEvidence, TimeoutRiskEvidence, kind_spec,
    kinds_of,
)
from workbench.source_scan import SourceScan, SourceSite

RECOMMENDATIONS: dict[str, pl.DataType] = {
    "rank": pl.Int32,               # 1 = do this first
    "fix_id": pl.String,            # e.g. "dynamic_sources", "guard_collectives", "drop_last"
    "title": pl.String,
    "finding_kind": pl.String,
    "finding_id": pl.String,        # Finding.id it answers
    "finding_index": pl.Int32,      # position of the finding in the list given to recommend()
    "severity": pl.String,
    "cost_ns": pl.Int64,            # what the finding costs (the most this fix can win)
    "cost_basis": pl.String,        # measured / estimated
    "gain": pl.Float64,             # expected share of cost_ns the fix removes (0..1)
    "why": pl.String,               # why it is ranked there
    "evidence": pl.String,          # the finding's message, one line
    "expected_effect": pl.String,
    "config": pl.String,            # JSON {section: {key: value}} in the compile-config format, or null
    "code_advice": pl.String,       # what to change in the code, or null
    "location": pl.String,          # file:line the advice is about, or null
    "apply": pl.Boolean,            # goes into the compile config written by to_compile_config
}

#: A value a compile-config setting takes (what the TOML writer accepts).
TomlValue = bool | int | float | str | list[Any] | dict[str, Any]


@dataclass(frozen=True, slots=True)
class Setting:
    """One compile-config setting a fix writes: ``[section] key = value``."""

    section: str
    key: str
    value: TomlValue

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


@dataclass(frozen=True, slots=True)
class CodeLine:
    """The line of the user's code a fix is about (``line`` None when only the file is known)."""

    file: str
    line: int | None = None

    @classmethod
    def parse(cls, location: str | None) -> CodeLine | None:
        """``"/x/train.py:24"`` → ``CodeLine("/x/train.py", 24)``; text without a line number is kept whole."""
        if not location:
            return None
        path, sep, line = location.rpartition(":")
        return cls(path, int(line)) if sep and line.isdigit() else cls(location)

    @classmethod
    def of(cls, site: SourceSite) -> CodeLine:
        return cls(site.file, site.line)

    @property
    def location(self) -> str:
        """``file:line`` (the file alone when the line is unknown)."""
        return self.file if self.line is None else f"{self.file}:{self.line}"


#: Finds the line of the user's script a code fix is about, from the run's source scan: (site or None, what to
#: say when there is none).
Locator = Callable[[SourceScan], tuple[SourceSite | None, str]]


@dataclass(frozen=True)
class Fix:
    """One way to fix a finding: ``gain`` is the expected share of its cost removed; ``why`` says why. ``config``:
    the settings it writes; ``code``: what to change in the code, at ``site`` (or where ``about`` finds it in the
    user's script)."""

    fix_id: str
    title: str
    effect: str
    gain: float
    why: str
    config: tuple[Setting, ...] = ()
    code: str | None = None
    site: CodeLine | None = None
    about: Locator | None = None

    @property
    def location(self) -> str | None:
        return self.site.location if self.site is not None else None

    def config_dict(self) -> dict[str, dict[str, TomlValue]]:
        """``{section: {key: value}}`` of its settings, in order."""
        out: dict[str, dict[str, TomlValue]] = {}
        for st in self.config:
            out.setdefault(st.section, {})[st.key] = st.value
        return out


@dataclass(frozen=True)
class Recommendation:
    """A fix ranked for a finding: ``rank`` 1 = do this first; ``apply``: written to the compile config;
    ``finding_index``: the finding's position in the list given to :func:`ranked_fixes`."""

    rank: int
    fix: Fix
    finding: Finding[Any]
    finding_index: int
    apply: bool


# ------------------------------------------------------------------------ the fixer registry
E = TypeVar("E", bound=Evidence)
Fixer = Callable[[Finding[E]], list[Fix]]


@dataclass(frozen=True, slots=True)
class _Registered:
    evidence: type[Evidence]
    kinds: frozenset[Kind]
    fn: Callable[[Finding[Any]], list[Fix]]


_FIXERS: list[_Registered] = []


def register_fixer(evidence: type[E], *, kinds: Iterable[Kind] | None = None) -> Callable[[Fixer[E]], Fixer[E]]:
    """Decorator: ``fn(finding)`` proposes fixes for findings whose evidence is ``evidence`` (of ``kinds`` only,
    where several kinds share that class); fixers are called in registration order. A kind whose evidence is not
    ``evidence`` is an error."""
    mine = kinds_of(evidence)
    chosen = frozenset(Kind(k) for k in kinds) if kinds is not None else frozenset(mine)
    wrong = sorted(k.value for k in chosen if k not in mine)
    if wrong or not chosen:
        raise ValueError(f"register_fixer({evidence.__name__}): kinds {wrong or '(none)'} do not have that evidence")

    def deco(fn: Fixer[E]) -> Fixer[E]:
        if any(r.fn is fn and r.evidence is evidence for r in _FIXERS):
            raise ValueError(f"fixer {fn.__qualname__} registered twice for {evidence.__name__}")
        _FIXERS.append(_Registered(evidence, chosen, fn))
        return fn

    return deco


def fixers_for(kind: Kind | str) -> list[Callable[[Finding[Any]], list[Fix]]]:
    """The fixers registered for ``kind`` (empty when none), in registration order."""
    k = kind_spec(kind).kind
    return [r.fn for r in _FIXERS if k in r.kinds]


def unregister_fixer(fn: Callable[..., list[Fix]]) -> None:
    """Take ``fn`` out of the registry (tests that register their own)."""
    _FIXERS[:] = [r for r in _FIXERS if r.fn is not fn]


# ------------------------------------------------------------------------ reading sources
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
    head, rest = m.group(1), [r.strip("'\"") for r in re.findall(r"\[([^\]]+)\]", m.group(2))]
    if head == "self":
        return None
    if head == "args" and rest and rest[0].isdigit():
        return ".".join(rest)
    if head == "kwargs" and rest:
        return ".".join(rest)
    return ".".join([head] + rest)


def source_expr(source: str | None) -> str | None:
    """The Dynamo source expression at the start of a classified source (``L['x'] dim 0: 4 -> 8`` → ``L['x']``)."""
    if not source:
        return None
    m = re.match(r"^((?:L|G)\[[^\]]+\](?:\[[^\]]+\]|\.\w+)*)", source.strip())
    return m.group(1) if m else None


def source_dim(*texts: str | None) -> int | None:
    for t in texts:
        m = re.search(r"dim (\d+)", t or "") or re.search(r"at index (\d+)", t or "")
        if m:
            return int(m.group(1))
    return None


def user_code(loc: str | None) -> str | None:
    """``loc`` unless it points into torch itself (the DDP/module wrapper Dynamo compiles)."""
    if not loc or re.search(r"[/\\]torch[/\\]_(dynamo|inductor|functorch)[/\\]|site-packages[/\\]torch[/\\]", loc):
        return None
    return loc


def _loc_in(*texts: str | None) -> str | None:
    for t in texts:
        for m in re.finditer(r"(/[^\s():'\"]+\.py|[\w./-]+\.py):(\d+)", t or ""):
            loc = user_code(f"{m.group(1)}:{m.group(2)}")
            if loc:
                return loc
    return None


def _group_location(ev: CompileGroupEvidence) -> CodeLine | None:
    """The user's line for a compile group: the graph break's line, the failing frame, else the frame."""
    return CodeLine.parse(
        _loc_in(*ev.graph_breaks, ev.fail_reason, *ev.sources, *ev.reasons) or user_code(ev.fail_user_frame)
        or (user_code(f"{ev.co_filename}:{ev.co_firstlineno}") if ev.co_filename else None))


# ------------------------------------------------------------------------ shape fixes (shared)
def _dynamic_dim_fixes(source: str | None, dim: int | None, stall: bool) -> list[Fix]:
    """One dynamic graph for ``source`` dim ``dim``: ``dynamic_sources`` (applies to any torch.compile, even one
    made before the collector), then ``mark_dynamic`` (needs the compile after ``Collector()``)."""
    expr = source_expr(source)
    if expr is None or dim is None:
        return []
    what = ("every rank compiles one dynamic graph at the start, so no rank compiles alone later and nobody waits"
            if stall else "one dynamic graph serves every size: at most 2 compiles of the frame")
    fixes = [Fix("dynamic_sources", f"Treat {expr} dim {dim} as dynamic from the first compile", what, 1.0,
                 "removes the recompiles themselves; torch reads it at trace time, so it works with the user's own "
                 "torch.compile (even dynamic=False) and a model compiled before the collector",
                 config=(Setting("compiler", "dynamic_sources", f"{expr}:{dim}"),))]
    arg = input_arg(expr)
    if arg is not None:
        fixes.append(Fix("mark_dynamic", f"Mark {expr} dim {dim} dynamic before each call", what, 0.95,
                         "the same dynamic graph, but the collector can only mark inputs of a model compiled after "
                         "Collector() (or given to collector.instrument)",
                         config=(Setting("mark_dynamic", arg, {"dim": dim}),)))
    return fixes


def _same_shapes_fix(stall: bool) -> Fix:
    return Fix("same_shapes", "Feed the same shapes on every step and rank",
               "no recompile and no waiting rank" if stall else "no recompile",
               0.98, "removes the cause (the odd shape); a code change, so ranked after the dynamic graph that the "
               "config applies by itself",
               code="DataLoader(..., drop_last=True) / DistributedSampler(drop_last=True), or pad to a few fixed "
                    "bucket sizes (multiples of 8)")


# ------------------------------------------------------------------------ per-kind fixers
@register_fixer(DivergentRecompileEvidence)
def _divergent(f: Finding[DivergentRecompileEvidence]) -> list[Fix]:
    ev = f.evidence
    step = ev.step
    after = max(1, int(step) - 1) if step is not None else 1
    fixes: list[Fix] = []
    if ev.cause == "shape":
        fixes += _dynamic_dim_fixes(ev.cause_source, source_dim(ev.cause_detail, ev.cause_source), stall=True)
        fixes.append(_same_shapes_fix(stall=True))
    else:
        fixes += [dataclasses.replace(fx, gain=0.98, why="removes the guard failure itself",
                                      site=fx.site or CodeLine.parse(user_code(ev.location)))
                  for fx in _cause_fixes(ev.cause, ev.cause_source)]
    if step is not None:   # the warm-up's end comes from the step of the recompile: never guessed
        fixes.append(Fix(
            "eager_on_recompile", f"After warm-up (step {after}), run new input variants eagerly",
            "a late new variant costs one slower eager step on that rank, not a compile that stalls every rank", 0.8,
            "removes most of the stall (an eager step instead of a compile) but that variant then runs uncompiled",
            config=(Setting("stance", "stance", "eager_on_recompile"), Setting("stance", "after_step", after))))
    else:                  # no step context: the advice without a guessed after_step (nothing written)
        fixes.append(Fix(
            "eager_on_recompile", "After warm-up, run new input variants eagerly",
            "a late new variant costs one slower eager step on that rank, not a compile that stalls every rank", 0.8,
            "the recompile's step is unknown, so no after_step is written",
            code="[stance] stance = \"eager_on_recompile\" with after_step = <your last warm-up step>"))
    fixes.append(Fix(
        "guard_collectives", "Make ranks agree before recompiling (guard collectives)",
        "all ranks recompile together (verified on gloo): no rank waits alone, no collective timeout", 0.1,
        "every rank then compiles too, so the step still takes the compile time: it prevents hangs and timeouts "
        "more than it saves time", config=(Setting("distributed", "guard_collectives", True),)))
    fixes.append(Fix(
        "warmup_barrier", "Warm up every input variant on all ranks, then barrier",
        "all compiles happen during warm-up on every rank at once", 0.5,
        "needs the variants to be known in advance",
        code="run one step per expected shape on every rank before training (e.g. the last, smaller batch), "
             "then dist.barrier()"))
    return fixes


@register_fixer(CompileGroupEvidence, kinds=RECOMPILE_KINDS)
def _recompile(f: Finding[CompileGroupEvidence]) -> list[Fix]:
    ev = f.evidence
    source = ev.sources[0] if ev.sources else None
    if ev.cause == "shape":
        return [*_dynamic_dim_fixes(source, source_dim(ev.cause_detail, source), stall=False),
                _same_shapes_fix(stall=False),
                Fix("dynamic_true", "Compile with dynamic=True", "no shape recompiles at all", 0.9,
                    "every dim of every input becomes symbolic: kernels can be slower than marking one dim",
                    config=(Setting("compile", "dynamic", True),))]
    loc = _group_location(ev)
    return [dataclasses.replace(x, site=x.site or loc) for x in _cause_fixes(ev.cause, source)]


def _cause_fixes(cause: str | None, source: str | None) -> list[Fix]:
    """Fixes for a recompile's failed guard other than a shape (code at the call, except ints and floats)."""
    expr = source_expr(source) or (source or "the input").split(" ")[0]
    code = {
        "stride": ("contiguous_at_boundary", f"Make {expr} contiguous before the compiled call",
                   f"pass {expr}.contiguous() at the call"),
        "dtype": ("cast_at_boundary", f"Cast {expr} to one dtype before the compiled call",
                  f"cast at the boundary, e.g. x = x.to(torch.float32), for {expr}"),
        "requires_grad": ("consistent_requires_grad", f"Keep requires_grad of {expr} the same on every call",
                          "call with tensors that either all require grad or none, or compile one function per case"),
        "grad_mode": ("one_mode_per_function", "Keep grad mode the same around the compiled call",
                      "compile separate functions for training and evaluation"),
        "global_state": ("one_mode_per_function", "Keep the global state the same around the compiled call",
                         "compile separate functions per mode"),
        "global": ("global_as_argument", f"Pass {expr} in instead of reading a global",
                   f"read {expr} outside the compiled function and pass it (as a tensor if it changes often)"),
        "module": ("compile_per_mode", "Do not toggle train()/eval() on the compiled module every step",
                   "evaluate with a separate compiled copy, or switch modes rarely"),
        "backend": ("reuse_backend", "Reuse one compiled object", "call torch.compile once and reuse the result"),
    }
    if cause == "int_arg" and expr.startswith("L["):
        return [Fix("dynamic_int", f"Treat {expr} as a dynamic integer from the start", "one graph for every value",
                    1.0, "removes the recompiles (verified: 1 compile for 4 values)",
                    config=(Setting("compiler", "dynamic_sources", expr),)),
                Fix("int_as_tensor", f"Pass {expr} as a tensor", "no guard on its value", 0.98,
                    "a code change with the same effect", code=f"pass {expr} as a 0-d tensor")]
    if cause == "float_arg":
        return [Fix("specialize_float_off", "Do not specialize floats", "floats become symbolic inputs", 1.0,
                    "removes the recompiles", config=(Setting("dynamo", "specialize_float", False),)),
                Fix("float_as_tensor", f"Pass {expr} as a tensor", "no recompile per value", 0.98,
                    "a code change with the same effect", code=f"pass {expr} as a 0-d tensor")]
    if cause in code:
        fid, title, advice = code[cause]
        return [Fix(fid, title, f"no {cause.replace('_', ' ')} recompiles", 1.0, "removes the guard failure",
                    code=advice)]
    return [Fix("inspect_recompiles", "Find the guard that keeps failing", "names the failing guard", 0.0,
                "diagnosis only", code="run once with TORCH_LOGS=recompiles to see every failing guard")]


@register_fixer(CompileGroupEvidence, kinds=(Kind.RECOMPILE_LIMIT,))
def _limit(f: Finding[CompileGroupEvidence]) -> list[Fix]:
    ev = f.evidence
    last = None
    for s in ev.sources:
        m = re.search(r"last guard failure: (\w+) (.*)$", s or "")
        if m:
            last = (m.group(1), m.group(2))
            break
    lim = next((int(m.group(1)) for s in ev.sources if (m := re.search(r"=(\d+) hit", s or ""))), 8)
    key = "accumulated_recompile_limit" if ev.cause_detail == "accumulated_recompile_limit" else "recompile_limit"
    fixes: list[Fix] = []
    if last and last[0] == "shape":
        fixes += _dynamic_dim_fixes(last[1], source_dim(last[1], *ev.reasons), stall=False)
        fixes.append(_same_shapes_fix(stall=False))
    elif last:
        fixes += _cause_fixes(last[0], last[1])
    fixes.append(Fix(
        "raise_recompile_limit", f"Raise {key} (now {lim}) so the frame stays compiled",
        "new variants compile instead of silently running eager", 0.0,
        "every variant then compiles (one compile per variant): it trades the eager fallback for more compile "
        "time, so it comes after any fix that removes the variants",
        config=(Setting("dynamo", key, max(2 * lim, 16 if key == "recompile_limit" else 512)),)))
    fixes.append(Fix("fail_on_limit", "Fail loudly when the limit is hit", "no silent eager fallback", 0.0,
                     "diagnosis: it stops the run", config=(Setting("dynamo", "fail_on_recompile_limit_hit", True),)))
    return fixes


@register_fixer(CompileGroupEvidence, kinds=(Kind.GRAPH_BREAK,))
def _graph_break(f: Finding[CompileGroupEvidence]) -> list[Fix]:
    ev = f.evidence
    loc = _group_location(ev)
    t = ev.cause_detail or "other"
    code_first = "the code change removes the break for every use; the config only covers some forms"
    if t == "print":
        return [Fix("guard_print", "Skip the print while compiling", "no graph break", 1.0, code_first,
                    code="if not torch.compiler.is_compiling(): print(...)", site=loc),
                Fix("reorderable_print", "Let Dynamo move print() out of the graph",
                    "no graph break for print(str) (not for print(t.shape))", 0.8, "covers prints of plain strings",
                    config=(Setting("dynamo", "reorderable_logging_functions", ["print"]),))]
    if t == "logging":
        return [Fix("guard_logging", "Skip logging while compiling", "no graph break", 1.0, code_first,
                    code="if not torch.compiler.is_compiling(): logger.info(...)", site=loc)]
    if t == "item":
        return [Fix("avoid_item", "Keep the value a tensor", "no host sync and no graph break", 1.0,
                    "removes both the break and the host-device sync",
                    code="use the 0-d tensor directly instead of .item()/.tolist()", site=loc),
                Fix("capture_scalar_outputs", "Capture .item() in the graph", "no graph break at .item()", 0.8,
                    "keeps one graph but the scalar is still read",
                    config=(Setting("dynamo", "capture_scalar_outputs", True),))]
    if t == "dynamic_output_shape":
        return [Fix("capture_dynamic_output_shape_ops", "Capture ops with data-dependent output shapes",
                    "no graph break at nonzero/unique/...", 0.9, "one graph with unbacked sizes",
                    config=(Setting("dynamo", "capture_dynamic_output_shape_ops", True),))]
    if t == "data_dependent_branch":
        return [Fix("branchless", "Replace the data-dependent if with torch.where or torch.cond",
                    "no graph break: one graph for both branches", 1.0, "no config can trace a Python branch on a "
                    "tensor's value", code="y = torch.where(cond, a(x), b(x)) for cheap branches, or "
                    "torch.cond(cond, true_fn, false_fn, (x,))", site=loc)]
    if t == "explicit":
        return [Fix("remove_graph_break", "Remove the explicit torch._dynamo.graph_break()", "one graph", 1.0,
                    "the break is in the code", code="delete the graph_break() call", site=loc)]
    return [Fix("isolate_unsupported", "Move the unsupported call out of the compiled region",
                "one graph for the compiled part", 1.0, "the break is in the code",
                code="move it outside, wrap it with @torch.compiler.disable, or register it as a custom op",
                site=loc)]


@register_fixer(SkippedFrameEvidence)
def _skipped_frame(f: Finding[SkippedFrameEvidence]) -> list[Fix]:
    ev = f.evidence
    site = CodeLine.parse(user_code(ev.cause_line) or ev.cause_line) if ev.cause_line else None
    if ev.skip_reason == "graph_break_in_loop":
        return [Fix("branchless_in_loop", "Replace the data-dependent branch in the loop with torch.where / "
                    "torch.cond, or move it out of the loop", f"{ev.co_name} compiles again instead of running eagerly",
                    1.0, "a graph break inside a loop makes dynamo skip the whole frame; no config traces a Python "
                    "branch on a tensor's value",
                    code="y = torch.where(cond, a(x), b(x)), or torch.cond(cond, true_fn, false_fn, (x,)); or test "
                         "the condition once before the loop", site=site)]
    if ev.skip_reason == "suppressed_error":
        return [Fix("fix_compile_error", f"Fix the compile error suppress_errors hid ({ev.break_reason or 'see the log'})",
                    f"{ev.co_name} compiles instead of running eagerly", 1.0,
                    "suppress_errors turns a compile error into a silently eager frame",
                    code="run once with torch._dynamo.config.suppress_errors = False to see the error", site=site)]
    return [Fix("find_skip_reason", f"Find why dynamo skipped {ev.co_name}", "names the break", 0.0,
                "torch 2.5 logs no reason", code="rerun with TORCH_LOGS=graph_breaks (or on torch 2.7+)")]


@register_fixer(CompileGroupEvidence, kinds=(Kind.COMPILE_FAILURE,))
def _failure(f: Finding[CompileGroupEvidence]) -> list[Fix]:
    ev = f.evidence
    if ev.cause == "graph_break":
        return [*_graph_break(f), Fix("fullgraph_off", "Allow graph breaks (fullgraph=False) until the code is fixed",
                                      "the compile succeeds with a graph break instead of raising", 0.5,
                                      "the frame compiles in pieces",
                                      config=(Setting("compile", "fullgraph", False),))]
    return [Fix("inspect_failure", f"Fix the compile error ({ev.cause_detail})", "the frame compiles", 1.0,
                "the error is in the code or the compiler", code=(ev.fail_reason or "")[:300],
                site=_group_location(ev))]


_CACHE = Fix("cache_warm_start", "Warm-start the compile caches from the previous run",
             "later runs hit the FX graph and AOTAutograd caches (verified): compile time falls on every rank", 0.7,
             "cuts compile time on the next runs, not this one",
             config=(Setting("cache", "load", "compile_cache.bin"), Setting("cache", "save", "compile_cache.bin"),
                     Setting("cache", "save_after_step", 3), Setting("inductor", "fx_graph_cache", True)))


@register_fixer(CacheDivergenceEvidence)
@register_fixer(CompileTimeEvidence)
def _compile_time(f: Finding[CacheDivergenceEvidence | CompileTimeEvidence]) -> list[Fix]:
    return [_CACHE, _shared_cache("")]


def _shared_cache(slow: str) -> Fix:
    return Fix("shared_cache_dir", f"Give every rank the same warm compile cache{slow}",
               "no rank compiles from a cold cache", 0.7, "needs storage every rank shares",
               code="set TORCHINDUCTOR_CACHE_DIR to a directory every rank shares, warmed by a previous run",
               about=_compile_site)


@register_fixer(CompileSkewEvidence)
def _compile_skew(f: Finding[CompileSkewEvidence]) -> list[Fix]:
    """Which fix a compile skew gets, by the cache hits and misses on its evidence: a warm cache only helps when the
    slow rank missed the compile caches where the others hit them (a cold cache). Without such a miss — the caches
    unused (e.g. an ``aot_eager``/``eager`` backend), or the same hits and misses on every rank — the slow rank's
    host compiles slower, which no cache config removes: that becomes a code/ops fix at the ``torch.compile`` line
    and the cache fixes are kept as alternatives that are not written (gain 0). Without the counts (no compile
    log) the cache fixes stay; nothing is written when nobody waited for the compile."""
    ev = f.evidence
    shared = _shared_cache(f" (rank {ev.slowest_rank} compiled {format_ns(ev.skew_ns)} longer)")
    if f.cost.ns == 0:   # nobody waited for it: nothing to write
        return [dataclasses.replace(shared, gain=0.0, why="the other ranks did not wait for this compile")]
    fixes = [_CACHE, shared]
    use = {r: (ev.cache_hits_by_rank.get(r, 0), m) for r, m in ev.cache_misses_by_rank.items()}
    if ev.slowest_rank not in use:
        return fixes
    hits, misses = use[ev.slowest_rank]
    others = [v for r, v in use.items() if r != ev.slowest_rank]
    cold = misses > 0 and any(h > hits or m < misses for h, m in others)
    counts = "; ".join(f"rank {r}: {h} hits, {m} misses" for r, (h, m) in sorted(use.items()))
    if cold:
        return [dataclasses.replace(x, why=f"{x.why}; rank {ev.slowest_rank} missed the compile caches where the "
                                               f"others hit them ({counts})") for x in fixes]
    why = (f"no compile-cache miss explains it ({counts}" + (", the caches are not used by this backend)"
                                                             if not any(h or m for h, m in use.values()) else ")"))
    slow = Fix("faster_host_compile", f"Find what makes rank {ev.slowest_rank} compile slower",
               "every rank finishes its first compile together: the others stop waiting for it", 0.9,
               f"{why}: the rank's host or its compiler is slower, which a warm cache does not change",
               code=f"compare rank {ev.slowest_rank}'s host with a fast rank's (CPU load and other processes, "
                    "cores and threads per rank, clock, a custom backend or compiler options set on that rank only)",
               about=_compile_site)
    return [slow] + [dataclasses.replace(x, gain=0.0, why=f"not written: {why}") for x in fixes]


@register_fixer(TimeoutRiskEvidence)
def _timeout(f: Finding[TimeoutRiskEvidence]) -> list[Fix]:
    return [Fix("raise_timeout", "Raise the collective timeout above the worst compile time",
                "a slow compile on one rank no longer kills the job", 0.0, "a risk, not lost time",
                code="dist.init_process_group(..., timeout=datetime.timedelta(minutes=30))"),
            Fix("guard_collectives", "Make ranks recompile together", "no rank waits alone in a collective", 0.0,
                "a risk, not lost time", config=(Setting("distributed", "guard_collectives", True),)), _CACHE]


@register_fixer(CollectiveScheduleEvidence)
def _schedule(f: Finding[CollectiveScheduleEvidence]) -> list[Fix]:
    return [Fix("same_graph_all_ranks", "Make every rank compile the same graph",
                "one collective order on every rank: no mismatched collectives, no hang", 1.0, "removes the cause",
                code="keep shapes, configs and versions identical across ranks"),
            Fix("no_comm_reorder", "Turn off inductor's compute/communication reordering",
                "collectives keep program order on every rank", 0.8, "may lose some overlap",
                config=(Setting("inductor", "reorder_for_compute_comm_overlap", False),))]


@register_fixer(ConfigDivergenceEvidence)
def _drift(f: Finding[ConfigDivergenceEvidence]) -> list[Fix]:
    ev = f.evidence
    return [Fix("same_environment", f"Use one environment on every rank ({ev.field} differs)",
                "identical compiles, cache keys and collective schedules on every rank", 1.0,
                "the difference comes from how the ranks were launched: no config applied by one rank fixes it",
                code="export the same TORCH*/NCCL* variables on every rank (one launcher script), pin "
                     "torch/triton/CUDA/NCCL in one image, and apply one compile config everywhere",
                about=_environment_site)]


#: What to change for a late rank, by what made it late (the critical path's reason): (fix id, title, code advice).
_LATE_FIXES: dict[str, tuple[str, str, str]] = {
    "compile": ("compile_once_everywhere", "Compile the same graphs on every rank, before the timed steps",
                "same shapes on every rank (torch._dynamo.mark_dynamic up front), or a warm-up step on every rank "
                "followed by a barrier; torch.compiler.set_stance(\"eager_on_recompile\") after warm-up"),
    "sync": ("defer_host_syncs", "Take the host-device sync off the step",
             "keep the value on the device and read it every N steps (or after the step), not .item()/.cpu() "
             "in the step"),
    "optimizer": ("faster_optimizer", "Run the optimizer step as fewer, fused kernels",
                  "torch.optim.AdamW(..., fused=True) (or foreach=True); the same optimizer on every rank"),
    "cpu_op": ("balance_host_work", "Move or spread the host computation this rank does alone",
               "run that work on every rank or off the training thread (a worker process), or outside the step"),
    "python": ("balance_host_work", "Move or spread the Python work this rank does alone",
               "run that function on every rank or off the training thread, or outside the step"),
    "gc": ("tame_gc", "Keep Python's garbage collector out of the steps",
           "gc.freeze() after set-up and gc.disable() in the loop with gc.collect() every N steps on every rank "
           "at the same step"),
    "range": ("balance_host_work", "Do the work of this range on every rank, or asynchronously",
              "checkpoints: torch.distributed.checkpoint.async_save, or every rank at the same step"),
    "outside_step": ("balance_host_work", "Do the work between steps on every rank, or off the training thread",
                     "logging, checkpoints, evaluation run by one rank between steps hold the others back"),
    "untraced": ("profile_the_late_rank", "Record the late rank's steps to see what it does",
                 "Collector(profile_ranks=[RANK], with_stack=True, profile_start=<a late step>): the window's "
                 "Python frames name the line; common causes: logging, checkpoints, GC, I/O on that rank"),
}


def _doing(reason: str) -> str:
    """What a late rank was doing, in words (``activities.WORDS``): "waiting for its batch", "in a Python garbage
    collection"."""
    from workbench.analyses.activities import WORDS

    words = WORDS.get(reason, reason.replace("_", " "))
    return words if reason in ("data", "compile") else f"in {words}"      # "waiting for ...", "compiling ..."


@register_fixer(StragglerEvidence)
def _straggler(f: Finding[StragglerEvidence]) -> list[Fix]:
    ev = f.evidence
    late = _LATE_FIXES.get(ev.reason or "")
    if late is not None:
        fix_id, title, code = late
        where = f" ({ev.what})" if ev.what and ev.reason not in ("untraced",) else ""
        return [Fix(fix_id, f"{title}: rank {ev.rank}{where}",
                    "the others stop waiting for it at every collective it reached late", 1.0,
                    f"it was late {_doing(ev.reason)} (the critical path across ranks)",
                    code=code.replace("RANK", str(ev.rank)), site=CodeLine.parse(ev.site) if ev.site else None,
                    about=None if ev.site else _batch_fetch_site)]
    if ev.slow_data_loading:
        return [Fix("faster_data_loading", f"Speed up data loading on rank {ev.rank}",
                    f"its data wait ({format_ns(ev.data_wait_median_ns)} per step, others "
                    f"{format_ns(ev.others_data_wait_median_ns)}) leaves the critical path; the others stop waiting",
                    1.0, "the rank's median data wait explains its lateness",
                    code="DataLoader(num_workers>=4, pin_memory=True, persistent_workers=True, prefetch_factor=4); "
                         "check that rank's storage / host for contention", about=_batch_fetch_site)]
    return [Fix("balance_ranks", f"Find what makes rank {ev.rank} slower",
                "every rank reaches the collectives together: the others' wait goes away", 1.0,
                "the cause is outside the compile config",
                code="compare the rank's host, clocks, data shard size and background processes with a fast rank",
                about=_batch_fetch_site)]


@register_fixer(ExposedCommEvidence)
@register_fixer(CollectiveWaitEvidence)
def _comm(f: Finding[ExposedCommEvidence | CollectiveWaitEvidence]) -> list[Fix]:
    return [Fix("overlap_comm", "Overlap the gradient all-reduce with backward",
                "collective time hides behind the backward pass", 0.8,
                "overlap is bounded by the backward compute left when each bucket is ready",
                code="DDP(model, bucket_cap_mb=25) instead of one all-reduce after backward; or "
                     "dist.all_reduce(..., async_op=True) per layer and wait() before optimizer.step()",
                about=_overlap_site)]


@register_fixer(PipelineBubbleEvidence)
def _bubble(f: Finding[PipelineBubbleEvidence]) -> list[Fix]:
    ev = f.evidence
    m, p = ev.microbatches, ev.stages
    now = f" (now {m:g} per step, {p} stages)" if m and p else ""
    return [Fix("more_microbatches", f"Use more micro-batches per step{now}",
                "GPipe's bubble is (p-1)/(m+p-1): 4x the micro-batches cuts it about 3x", 0.7,
                "the bubble shrinks with m but never vanishes",
                code="ScheduleGPipe(stage, n_microbatches=4*m) with a smaller micro-batch, or an interleaved "
                     "1F1B schedule (ScheduleInterleaved1F1B) with several stages per rank", about=_microbatch_site)]


@register_fixer(IdleEvidence, kinds=(Kind.LAUNCH_BOUND, Kind.HOST_BOUND))
def _launch(f: Finding[IdleEvidence]) -> list[Fix]:
    return [Fix("cuda_graphs", "Replay the step's kernels as a CUDA graph (mode=\"reduce-overhead\")",
                "one launch per graph instead of one per kernel: the launch gaps go", 0.8,
                "removes launch overhead when shapes are static; needs static input addresses, and a graph covers only the "
                "compiled function: keep the loss, backward and optimizer update inside it",
                config=(Setting("compile", "mode", "reduce-overhead"),)),
            Fix("fuse_small_ops", "Fewer, larger kernels", "less launch overhead", 0.5, "a code change",
                code="batch small ops (torch._foreach_*, fused optimizers: AdamW(fused=True)), larger micro-batches")]


@register_fixer(IdleCauseEvidence, kinds=(Kind.HOST_SYNC,))
def _host_sync(f: Finding[IdleCauseEvidence]) -> list[Fix]:
    ev = f.evidence
    what = f" ({ev.site_text})" if ev.site_text else ""
    return [Fix("defer_sync", f"Remove or defer the host-device sync{what}",
                "the host keeps running ahead of the GPU: the idle gaps after each sync go", 0.9,
                "a value read on the host every step waits for the GPU; kept on the device and read every N steps "
                "(or through a CUDA event polled later) it waits for nothing",
                code="keep the values on the device (torch.stack([...]) / a running tensor) and call .item() / .cpu() "
                     "every N steps, outside the step; or record a torch.cuda.Event and read it with .query() later; "
                     "drop torch.cuda.synchronize() from the loop",
                site=CodeLine.parse(ev.site))]


@register_fixer(IdleCauseEvidence, kinds=(Kind.UNFUSED_OPTIMIZER,))
def _unfused_optimizer(f: Finding[IdleCauseEvidence]) -> list[Fix]:
    ev = f.evidence
    now = f" (now {ev.site_detail})" if ev.site_detail else ""
    return [Fix("fused_optimizer", f"Construct the optimizer with fused=True{now}",
                "one fused kernel per parameter group instead of one small kernel per op per parameter", 0.9,
                "the per-parameter loop launches thousands of tiny kernels the GPU waits for; fused=True (CUDA "
                "params) runs the whole update in a few kernels; foreach=True is the fallback where fused is not "
                "supported",
                code="torch.optim.AdamW(params, ..., fused=True)  # or foreach=True", site=CodeLine.parse(ev.site))]


@register_fixer(IdleCauseEvidence, kinds=(Kind.DATA_LOADING,))
def _data_loading(f: Finding[IdleCauseEvidence]) -> list[Fix]:
    ev = f.evidence
    now = f" (now {ev.site_detail})" if ev.site_detail else ""
    return [Fix("loader_workers", f"Build batches in DataLoader workers, pinned, copied asynchronously{now}",
                "the next batch is ready when the step ends: the GPU stops waiting for it", 0.9,
                "batches built on the training thread between steps leave the GPU idle for as long as they take",
                code="DataLoader(..., num_workers=4, pin_memory=True, prefetch_factor=2, persistent_workers=True) "
                     "and x.to(device, non_blocking=True)", site=CodeLine.parse(ev.site))]


@register_fixer(ExposedMemcpyEvidence)
def _memcpy(f: Finding[ExposedMemcpyEvidence]) -> list[Fix]:
    return [Fix("pin_memory", "Copy from pinned host memory, asynchronously",
                "host→device copies overlap compute instead of blocking the stream", 0.8,
                "pageable copies are staged and synchronous",
                code="DataLoader(..., pin_memory=True) and x.to(device, non_blocking=True)", about=_h2d_site)]


# ------------------------------------------------------------------------ hangs: why the job stopped
@register_fixer(JobFailureEvidence, kinds=(Kind.DESYNC,))
def _desync(f: Finding[JobFailureEvidence]) -> list[Fix]:
    ev = f.evidence
    return [Fix("same_collectives", "Issue the same collectives, with the same tensors, on every rank of the group",
                "the group's collectives match again: no desync, no hang", 1.0,
                "removes the cause: a collective or tensor that depends on the rank", code=ev.fix,
                site=CodeLine.parse(ev.odd_call_site or ev.call_site))]


@register_fixer(JobFailureEvidence, kinds=(Kind.HANG,))
def _hang(f: Finding[JobFailureEvidence]) -> list[Fix]:
    ev = f.evidence
    if ev.compile_id is not None:
        return [Fix("no_one_rank_recompile", f"Stop the one-rank recompile of {ev.co_name} [{ev.compile_id}]",
                    "every rank reaches the collective in time: no timeout", 1.0,
                    "the late rank was compiling while the others waited", code=ev.fix)]
    return [Fix("find_late_work", "Find what the late rank runs instead of the collective",
                "every rank reaches the collective in time: no timeout", 1.0,
                "the late rank was busy elsewhere; nothing in the collectives is wrong", code=ev.fix)]


@register_fixer(JobFailureEvidence, kinds=(Kind.RANK_DIED,))
def _rank_died(f: Finding[JobFailureEvidence]) -> list[Fix]:
    ev = f.evidence
    return [Fix("find_why_rank_ended", "Find why the rank ended, and restart from a checkpoint",
                "the job survives (or resumes after) the loss of a rank", 1.0,
                "the others only waited for it: the cause is in that process, not the collectives", code=ev.fix,
                site=CodeLine.parse(ev.odd_call_site))]


@register_fixer(CompiledDesyncEvidence)
def _compiled_desync(f: Finding[CompiledDesyncEvidence]) -> list[Fix]:
    ev = f.evidence
    return [Fix("same_compiled_collectives", "Issue the same collectives on every rank inside the compiled region",
                "the compiled graph is the same on every rank: it cannot desynchronise the group", 1.0,
                "removes the cause: a rank-dependent branch around a collective", code=ev.fix,
                site=CodeLine.parse(ev.odd_call_site))]


# ------------------------------------------------------------------------ the line a code fix is about
def _scan_of(sites: Any) -> SourceScan | None:
    """A ``SourceScan`` from ``run.json``'s ``source_sites`` (or one already typed); None without one."""
    if sites is None:
        return None
    return sites if isinstance(sites, SourceScan) else SourceScan.from_json(sites)


def _first(scan: SourceScan, kind: str, pred: Any = None, prefer_loop: bool = False) -> SourceSite | None:
    got = [s for s in scan.of(kind) if pred is None or pred(s)]
    if prefer_loop:
        got.sort(key=lambda s: not s.in_loop)
    return got[0] if got else None


def _batch_fetch_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    return (_first(scan, "batch_fetch"), "no batch fetch (a `for batch in loader:` loop or a `next(...)` before the "
            f"step) found in {scan.filename}")


def _overlap_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    wrapper = _first(scan, "ddp") or _first(scan, "fsdp")
    return (wrapper or _first(scan, "collective", lambda s: "blocking" in s.detail, prefer_loop=True),
            f"no DDP/FSDP construction and no blocking collective in {scan.filename}")


def _microbatch_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    return (_first(scan, "microbatch_count", lambda s: s.detail == "passed to the schedule")
            or _first(scan, "pipeline_schedule", lambda s: not s.detail.endswith("not set"))
            or _first(scan, "microbatch_count") or _first(scan, "pipeline_schedule"),
            f"no pipeline schedule or micro-batch count set in {scan.filename}")


def _environment_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    return (_first(scan, "config_set", lambda s: s.detail.endswith("rank-conditional")),
            f"no line of {scan.filename} sets a compile setting or TORCH* variable per rank: the difference comes "
            "from the launch environment")


def _h2d_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    return (_first(scan, "dataloader", lambda s: "pin_memory=True" not in s.detail)
            or _first(scan, "h2d_copy", lambda s: s.in_loop and s.detail == "blocking"),
            f"no DataLoader and no blocking host-to-device copy in the loop of {scan.filename}")


def _compile_site(scan: SourceScan) -> tuple[SourceSite | None, str]:
    return _first(scan, "compile"), f"no torch.compile call in {scan.filename}"


def locate(fx: Fix, scan: SourceScan | None) -> Fix:
    """``fx`` with ``site`` set to the line of the user's script it is about (its ``about`` locator on ``scan``, the
    run's source sites), or its advice saying that the script has no such line. Fixes that already name a line
    (graph breaks, from the compile log), config fixes and runs without a scan are left as they are."""
    if fx.code is None or fx.site is not None or scan is None:
        return fx
    if not scan.sites:
        return fx if not scan.note else dataclasses.replace(fx, code=f"{fx.code} (no line: {scan.note})")
    site, missing = fx.about(scan) if fx.about is not None else (None, "")
    if site is not None and site.kind == "ddp":     # DDP is there already: its buckets are what to change
        return dataclasses.replace(fx, site=CodeLine.of(site), code=(
            f"DDP is built here ({site.detail}): buckets too small or too few to overlap backward; use the default "
            f"bucket_cap_mb=25 or larger, and no extra blocking collective after backward (here: {site.snippet})"))
    if site is not None and site.kind == "fsdp":
        return dataclasses.replace(fx, site=CodeLine.of(site), code=(
            "FSDP is built here: prefetch the next all-gather so it overlaps compute (FSDP2: "
            "module.set_modules_to_forward_prefetch / set_modules_to_backward_prefetch; FSDP1: forward_prefetch=True, "
            f"backward_prefetch=BackwardPrefetch.BACKWARD_PRE), and no blocking collective after backward "
            f"(here: {site.snippet})"))
    if site is not None:
        return dataclasses.replace(fx, site=CodeLine.of(site), code=f"{fx.code} (here: {site.snippet})")
    return dataclasses.replace(fx, code=f"{fx.code} ({missing})") if missing else fx


# ------------------------------------------------------------------------ ranking and the config file
def _fixes(f: Finding[Any]) -> list[Fix]:
    out: list[Fix] = []
    for fixer in fixers_for(f.kind):
        out += fixer(f)
    if not out:
        out = [Fix(f"investigate_{f.kind.value}", f"Investigate: {f.kind.value}", "see the finding", 0.0,
                   "no fix is registered for this kind", code=f.message)]
    return sorted(out, key=lambda x: -x.gain)  # stable: a fixer's own order breaks ties


# ------------------------------------------------------------------------ which setting acts on which torch
def setting_acts(st: Setting, torch_version: str | None) -> str | None:
    """None when ``st`` changes what torch ``torch_version`` does (or the version is unknown), else why not
    (:func:`workbench.fix_versions.setting_acts`: the fix matrix's facts)."""
    return fix_versions.setting_acts(st.section, st.key, st.value, torch_version)


def for_torch(fx: Fix, torch_version: str | None) -> Fix:
    """``fx`` as it must be written for ``torch_version``: unchanged when every setting acts there; the next-best
    form when one exists (``dynamic_sources`` without the dim before 2.13, ``cache_size_limit`` before 2.7);
    else without its settings (a config that would change nothing is not written) and saying why."""
    why = [w for st in fx.config if (w := setting_acts(st, torch_version))]
    if not why:
        return fx
    swapped: list[Setting] = []
    for st in fx.config:
        if setting_acts(st, torch_version) is None:
            swapped.append(st)
        elif (f"{st.section}.{st.key}" == "compiler.dynamic_sources"
              and (fix_versions.torch_release(torch_version) or (0, 0)) >= (2, 7)):
            entries = [re.sub(r":\d+$", "", e.strip()) for e in str(st.value).split(",")]
            swapped.append(Setting(st.section, st.key, ",".join(entries)))   # every dim of the source dynamic
        elif f"{st.section}.{st.key}" == "dynamo.recompile_limit":
            swapped.append(Setting("dynamo", "cache_size_limit", st.value))
        else:
            return dataclasses.replace(fx, config=(), gain=0.0, why=f"{fx.why}; not written for torch {torch_version}: "
                                                                    f"{'; '.join(why)}")
    # the next-best form removes the same time (its gain, the share of the cost it removes, is unchanged): the
    # saving shown is the finding's cost × that gain, so no ranking nudge may change it
    return dataclasses.replace(fx, config=tuple(swapped),
                               why=f"{fx.why}; written for torch {torch_version}: {'; '.join(why)}")


def run_torch_version(run: Any) -> str | None:
    """The torch version a run used: its fingerprints', else its compile logs' (None when unknown or mixed)."""
    seen: set[str] = set()
    for table, col in (("fingerprints", "torch"), ("compiles", "torch_version")):
        df = getattr(run, table, None)
        if isinstance(df, pl.DataFrame) and col in df.columns:
            seen |= {str(x) for x in df[col].drop_nulls().unique().to_list()}
        if seen:
            break
    releases = {fix_versions.torch_release(x) for x in seen} - {None}
    return sorted(seen)[0] if len(releases) == 1 else None


def ranked_fixes(findings: Sequence[Finding[Any]] | Any, *, sites: Any = None,
                 torch_version: str | None = None) -> list[Recommendation]:
    """Ranked fixes for the typed root-cause ``findings`` (``analysis_tables(run).roots``): findings most costly
    first, and within one finding the fixes by expected gain. The best config fix of each finding is applied
    unless an earlier fix already set the same key. ``sites``: the run's ``source_sites``
    (``run.meta["source_sites"]`` or a ``SourceScan``) — code fixes then name the line they are about
    (:func:`locate`), or say in words that the script has no such line. A FINDINGS polars frame is refused: it has
    lost the typed evidence the fixers read. ``torch_version``: write each setting only where it acts on that torch
    (:func:`for_torch`), else the next-best fix is the one applied. A fix's ``gain`` is the same whichever torch
    it is written for (the saving is the finding's cost × ``gain``)."""
    if isinstance(findings, pl.DataFrame):
        raise TypeError("recommend() takes the typed findings (analysis_tables(run).roots or run.findings()), "
                        "not the FINDINGS frame")
    roots: list[Finding[Any]] = list(getattr(findings, "roots", findings))
    order = sorted(range(len(roots)), key=lambda i: (-roots[i].cost_ns, i))
    out: list[Recommendation] = []
    taken: set[tuple[str, str]] = set()
    scan = _scan_of(sites)
    for i in order:
        f = roots[i]
        applied = False
        fixes = sorted((for_torch(fx, torch_version) for fx in _fixes(f)), key=lambda x: -x.gain)
        for fx in fixes:
            fx = locate(fx, scan)
            apply = False
            if fx.config and not applied and fx.gain > 0:
                keys = {(st.section, st.key) for st in fx.config}
                if not keys & taken:
                    apply = applied = True
                    taken |= keys
                elif keys <= taken:
                    applied = True  # an earlier fix already set exactly this
            out.append(Recommendation(len(out) + 1, fx, f, i, apply))
    return out


def ranked_fixes_run(run: Any, findings: Sequence[Finding[Any]] | Any, *, sites: Any = None) -> list[Recommendation]:
    """:func:`ranked_fixes` for ``findings`` of ``run`` (a :class:`workbench.Run`): its code fixes name the lines of
    the run's recorded ``source_sites`` (``run.json``), or of ``sites`` when given (a script scanned afresh)."""
    if sites is None:
        sites = (getattr(run, "meta", None) or {}).get("source_sites")
    return ranked_fixes(findings, sites=sites, torch_version=run_torch_version(run))


def recommendations_frame(recs: Sequence[Recommendation]) -> pl.DataFrame:
    """The polars view of ranked fixes (``RECOMMENDATIONS``; ``config`` as JSON text, for display only)."""
    if not recs:
        return schema.empty(RECOMMENDATIONS)
    rows = [{
        "rank": r.rank, "fix_id": r.fix.fix_id, "title": r.fix.title, "finding_kind": r.finding.kind.value,
        "finding_id": r.finding.id, "finding_index": r.finding_index, "severity": r.finding.severity,
        "cost_ns": r.finding.cost.ns, "cost_basis": r.finding.cost.basis, "gain": float(r.fix.gain),
        "why": r.fix.why, "evidence": r.finding.message, "expected_effect": r.fix.effect,
        "config": json.dumps(r.fix.config_dict()) if r.fix.config else None, "code_advice": r.fix.code,
        "location": r.fix.location, "apply": r.apply,
    } for r in recs]
    return schema.conform(pl.DataFrame(rows, schema_overrides=RECOMMENDATIONS), RECOMMENDATIONS)


def recommend(findings: Sequence[Finding[Any]] | Any, *, sites: Any = None) -> pl.DataFrame:
    """:func:`recommendations_frame` of :func:`ranked_fixes` (the RECOMMENDATIONS view)."""
    return recommendations_frame(ranked_fixes(findings, sites=sites))


def to_compile_config(recs: Sequence[Recommendation], *, header: str | None = None) -> str:
    """The applied config fixes of ``recs`` (:func:`ranked_fixes`) as compile-config TOML, a comment above each
    setting naming its finding; the alternatives and the code fixes follow as comments at the end, best first."""
    from workbench.compile_config import dump_compile_config, writable_problem

    if isinstance(recs, pl.DataFrame):
        raise TypeError("to_compile_config takes the typed fixes of ranked_fixes() / ranked_fixes_run(), not the "
                        "RECOMMENDATIONS frame (a view only)")
    data: dict[str, dict[str, Any]] = {}
    comments: dict[str, str] = {}
    not_written: list[str] = []
    for r in recs:
        if not r.apply:
            continue
        fx, kind = r.fix, r.finding.kind.value
        problem = writable_problem(fx.config_dict())   # a value built from a hostile log the allowlist refuses
        if problem:
            not_written.append(f"  #{r.rank} {fx.fix_id} ({kind}): {_one_line(problem, 200)}")
            continue
        for st in fx.config:
            dest = data.setdefault(st.section, {})
            if st.key in dest:
                continue
            dest[st.key] = st.value
            comments[st.name] = (f"fix #{r.rank} {fx.fix_id}: {fx.title}\n"
                                 f"answers {kind}: {_one_line(r.finding.message)}\n"
                                 f"expected: {fx.effect}"
                                 + (f"\nwhy first: {fx.why}" if fx.why else ""))
    lines = [header or "Compile config written by `workbench recommend`: apply with "
             "Collector(..., compile_config=\"<this file>\")",
             "Every setting below says which finding it answers. Validate: workbench.compile_config.load_compile_config"]
    tail: list[str] = ["", " Refused by the config allowlist (docs/compile-config.md):", *not_written] \
        if not_written else []
    rest = [r for r in recs if not r.apply]
    if rest:
        tail += ["", " Alternatives and code fixes (not applied), best first:"]
        for r in rest:
            fx = r.fix
            loc = f" at {fx.location}" if fx.location else ""
            tail.append(f"  #{r.rank} {fx.fix_id} ({r.finding.kind.value}): {fx.title}{loc}")
            for part in (f"config {json.dumps(fx.config_dict())}" if fx.config else "",
                         f"code: {fx.code}" if fx.code else ""):
                if part:
                    tail.append(f"      {_one_line(part, 200)}")
    # every text from a trace or log goes through dump_compile_config's comment writer (no line of it can
    # become a setting), and the file must read back as exactly ``data``
    return dump_compile_config(data, comments, header="\n".join(lines), footer="\n".join(tail) or None)


def _one_line(s: str | None, n: int = 240) -> str:
    s = " ".join((s or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


@register_fixer(ConfigNotAppliedEvidence)
def _not_applied(f: Finding[ConfigNotAppliedEvidence]) -> list[Fix]:
    ev = f.evidence
    if f.kind == Kind.CONFIG_NO_EFFECT:
        return [Fix("setting_for_this_torch", f"Replace {ev.setting}: it does not act on this torch",
                    "the fix the config carries runs", 1.0, "a setting torch ignores changes nothing in the rerun",
                    code=f"{ev.reason}. Rerun `workbench recommend` on this run: it writes the form that acts on its "
                         "torch version (docs/compile-logs.md, the fix table)")]
    return [Fix("make_setting_apply", f"Make {ev.setting} take effect", "the fix the config carries runs", 1.0,
                "until it applies, the rerun cannot show whether the fix works",
                code=f"{ev.reason}. For [compile]/[mark_dynamic], create the Collector before calling torch.compile; "
                     f"for shapes prefer [compiler] dynamic_sources, which applies to any compiled model")]
