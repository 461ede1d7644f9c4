"""Every finding kind, declared once: its evidence dataclass, one-line definition, cost method and role.

Adding a fault kind = one evidence class and one row of :data:`KIND_TABLE` here (declared with
:func:`~workbench.analyses.findings.declare_kind` on import), one detector in an analysis module, one fixer
(``@register_fixer("kind")`` in ``analyses/recommendations.py``).

Roles: ``cause`` findings can explain other findings' time (their symptoms); ``symptom`` findings (idle, exposed
communication, collective waits) are attributed to a cause when they overlap it in time, else stay findings of
their own; ``fact`` findings neither cost nor explain time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from workbench.analyses.findings import Evidence, declare_kind

Row = dict[str, Any]

#: Why a frame was compiled (``compiles.cause``), as ``analyses.recompiles.classify_compiles`` writes it.
CAUSES: tuple[str, ...] = (
    "first", "shape", "stride", "dtype", "device", "requires_grad", "grad_mode", "global_state", "tensor_meta",
    "int_arg", "float_arg", "constant", "global", "module", "object_id", "type", "length", "backend", "limit",
    "graph_break", "compile_error", "cache_miss", "other",
)


# ---------------------------------------------------------------------------------------------- compiles
@dataclass(frozen=True, slots=True)
class DivergentRecompileEvidence(Evidence):
    compile_id: str
    co_name: str | None
    location: str | None              # co_filename:co_firstlineno of the compiled frame
    compiling_ranks: tuple[int, ...]
    waiting_ranks: tuple[int, ...]
    step: int | None
    compile_ns: int | None            # longest compile among the compiling ranks (null when unknown)
    compile_start: int | None         # ns, absolute
    compile_end: int | None
    wait_by_rank: dict[int, int]      # waiting rank -> its measured (or estimated) wait
    wait_ns: int | None               # the longest of them (the finding's cost)
    cause: str | None
    cause_detail: str | None
    cause_source: str | None
    timeout_s: float


@dataclass(frozen=True, slots=True)
class DifferentProgramsEvidence(Evidence):
    frames_by_rank: dict[int, tuple[str, ...]]   # rank -> "co_name file:line" of every frame it compiled
    only_on: dict[str, tuple[int, ...]]          # frame -> the ranks that compiled it (not every rank)


@dataclass(frozen=True, slots=True)
class CompileGroupEvidence(Evidence):
    """Compiles of one frame with one cause (recompiles, limit, graph breaks, failures)."""

    cause: str
    cause_detail: str | None
    sources: tuple[str, ...]
    co_name: str | None
    co_filename: str | None
    co_firstlineno: int | None
    compile_ids: tuple[str, ...]
    count: int
    compile_ns: int | None           # summed known compile time (null when none is known)
    reasons: tuple[str, ...] = ()
    graph_breaks: tuple[str, ...] = ()
    fail_reason: str | None = None
    fail_user_frame: str | None = None
    nranks: int = 1
    statuses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TimeoutRiskEvidence(Evidence):
    compile_id: str
    compiling_ranks: tuple[int, ...]
    compile_ns: int
    timeout_s: float
    ratio: float


@dataclass(frozen=True, slots=True)
class CacheDivergenceEvidence(Evidence):
    compile_id: str
    hit_ranks: tuple[int, ...]
    miss_ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CollectiveScheduleEvidence(Evidence):
    compile_id: str
    schedules: tuple[Row, ...]       # {"ranks": [...], "schedule": [...]}


@dataclass(frozen=True, slots=True)
class ConfigDivergenceEvidence(Evidence):
    field: str
    by_rank: dict[int, Any]


@dataclass(frozen=True, slots=True)
class CompileSkewEvidence(Evidence):
    compile_id: str
    co_name: str | None
    skew_ns: int
    slowest_rank: int
    compile_ns_by_rank: dict[int, int]    # the frame's compile plus its backward graph's, per rank
    step: int | None = None               # the step the slowest rank compiled in
    wait_by_rank: dict[int, int] = field(default_factory=dict)   # the others' measured wait there
    held_ns: int | None = None            # last arrival - second-latest there
    noise_ns: int | None = None           # the top of that measure's noise in the other steps
    # compile-cache (FX graph, AOTAutograd) hits and misses of that step's compiles, per rank (empty: not logged)
    cache_hits_by_rank: dict[int, int] = field(default_factory=dict)
    cache_misses_by_rank: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CompileTimeEvidence(Evidence):
    compile_ns_by_rank: dict[int, int]


@dataclass(frozen=True, slots=True)
class CompilingEvidence(Evidence):
    """Compiles running inside a profiler window (their time is not the GPU's or the host's fault)."""

    compile_ids_by_rank: dict[int, tuple[str, ...]]   # from the compile logs (empty when only the trace shows it)
    compile_ns_by_rank: dict[int, int]   # compile time inside the analysed window
    window_ns_by_rank: dict[int, int]
    spans: tuple[tuple[int, int], ...]   # the compiles' time (absolute ns, any rank): every rank waits through it
    seen_in: str                         # "compile log" or "trace" (``(dynamo_timed)`` ranges)


# ---------------------------------------------------------------------------------------------- device time
@dataclass(frozen=True, slots=True)
class ExposedCommEvidence(Evidence):
    per_rank: tuple[Row, ...]        # rank, comm_ns, comm_exposed_ns, comm_exposed_pct, comm_overlap_pct, window_ns
    timeline: str = "device"         # "device" (GPU kernels) or "host" (a CPU run: collectives the host blocked on)


@dataclass(frozen=True, slots=True)
class IdleEvidence(Evidence):
    per_rank: tuple[Row, ...]        # rank, stream, idle_ns, idle_pct, host_wait_pct, window_ns
    short_kernel_pct: float | None = None
    profiler_inflated: bool = False  # the trace was recorded with with_stack/record_shapes


@dataclass(frozen=True, slots=True)
class ExposedMemcpyEvidence(Evidence):
    per_rank: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class CollectiveWaitEvidence(Evidence):
    wait_by_rank: dict[int, int]
    instances: int
    steps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProfilerOverheadEvidence(Evidence):
    with_stack_ranks: tuple[int, ...]
    python_events: int
    record_shapes_ranks: tuple[int, ...] = ()


# ---------------------------------------------------------------------------------------------- ranks
@dataclass(frozen=True, slots=True)
class StragglerEvidence(Evidence):
    rank: int
    signal: str
    events: int
    held_count: int
    held_back_ns: int
    held_share_pct: float | None
    typical_share_pct: float | None
    first_step: int | None
    trend: str | None
    held_steps: tuple[int, ...]
    data_wait_median_ns: int | None          # this rank's median data wait per step
    others_data_wait_median_ns: int | None   # the other ranks' median
    signals: tuple[Row, ...] = ()


@dataclass(frozen=True, slots=True)
class CollectiveMismatchEvidence(Evidence):
    what: Literal["disagree", "missing"]
    instances: int
    examples: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class ClockOffsetEvidence(Evidence):
    offsets: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class CollectiveDriftEvidence(Evidence):
    rank: int
    instances: int
    steps: int
    drift_ns: int
    slope_ns_per_s: float | None
    mean_offset_ns: float | None


@dataclass(frozen=True, slots=True)
class PipelineBubbleEvidence(Evidence):
    per_rank: tuple[Row, ...]
    theoretical_pct: float | None = None
    microbatches: float | None = None
    stages: int | None = None


# ---------------------------------------------------------------------------------------------- declarations
#: One kind per recompile cause (the causes with a kind of their own, and ``first``, left out).
_RECOMPILE_KINDS: tuple[tuple[str, type[Evidence], str, str, str], ...] = tuple(
    (f"recompile_{cause}", CompileGroupEvidence, "",
     f"Recompiles of one frame whose failed guard is a {cause.replace('_', ' ')} change.",
     "summed compile time of those recompiles (measured from the compile log)")
    for cause in CAUSES if cause not in ("first", "limit", "graph_break", "compile_error"))

#: Every kind of this module, in order: name, evidence, flags, definition, cost method. Flags: ``fact`` or
#: ``symptom`` (the role; a cause without either), ``hazard`` (at least ``high``), ``diverges`` (ranks may run
#: different programs: ranked before every time cost), ``estimate:<severity>`` (the most severe an estimated cost
#: of the kind may be); see :class:`~workbench.analyses.findings.KindSpec`.
KIND_TABLE: tuple[tuple[str, type[Evidence], str, str, str], ...] = (
    ("divergent_recompile", DivergentRecompileEvidence, "",
     "A compile of the same code object on some ranks only, while the others wait for it.",
     "the waiting ranks' collective wait in the step of the compile (measured); else their step-time excess over "
     "their median in that step (measured); else the compile time (estimated)"),
    ("different_programs", DifferentProgramsEvidence, "fact diverges",
     "Ranks compile different frames: they run different code, so their compiles are not comparable.",
     "none (a fact about the run)"),
    ("nccl_timeout_risk", TimeoutRiskEvidence, "fact hazard",
     "A one-rank compile takes ≥ 10 % of the collective timeout: a slower one kills the job.",
     "none (a risk)"),
    ("divergent_cache", CacheDivergenceEvidence, "fact",
     "One compile hits the compile cache on some ranks and misses on others.",
     "none"),
    ("divergent_collective_schedule", CollectiveScheduleEvidence, "fact hazard diverges",
     "Inductor ordered a graph's collectives differently on different ranks (hang risk).",
     "none (a risk)"),
    ("divergent_config", ConfigDivergenceEvidence, "fact hazard diverges",
     "The torch version or dynamo/inductor config differs across ranks: they may run different programs (ranked "
     "before every time cost).",
     "none (a hang risk); when the rank whose config differs is also the one whose compile is slower, that compile "
     "skew goes under it and is its cost"),
    ("divergent_fingerprint", ConfigDivergenceEvidence, "fact hazard diverges",
     "A library version or config hash in the collectors' fingerprints differs across ranks.",
     "none"),
    ("compile_skew", CompileSkewEvidence, "estimate:low",
     "One rank's first compiles take longer than the others' and it arrives last at the collectives of that step, by "
     "≥ 1 s and more than the run's own noise: the others wait for it (else a zero-cost note that says why it is "
     "not a cause).",
     "the time it held the other ranks back in the step of the compile: its arrival minus the second-latest's "
     "(measured: the collectives' arrivals, else step times less each rank's own compile time); zero when they did "
     "not wait for it; estimated from the compile times (at most a low note) only when no step or collective was "
     "recorded"),
    ("compile_time", CompileTimeEvidence, "fact",
     "Total compile time on a rank ≥ 60 s: a compile-cache warm start would cut start-up.",
     "none (start-up time, outside the steps)"),
    ("compiling", CompilingEvidence, "",
     "Compiles ran inside the profiler window: the idle GPU then waits for the compiler, not the host.",
     "compile time inside the analysed window (measured)"),
    *_RECOMPILE_KINDS,
    ("recompile_limit", CompileGroupEvidence, "hazard",
     "A frame hit the recompile limit and now runs eager, silently, for new input variants.",
     "summed compile time before the limit (measured); the eager slowdown is not measured"),
    ("graph_break", CompileGroupEvidence, "",
     "Dynamo split a frame at unsupported code (the frame still compiles, in pieces).",
     "not measured (unknown): the runtime cost of a break needs a run without it"),
    ("compile_failure", CompileGroupEvidence, "fact hazard",
     "A compile raised (fullgraph=True at a graph break, or a compiler error).",
     "none"),
    ("exposed_communication", ExposedCommEvidence, "symptom",
     "Communication not overlapped with compute ≥ 5 % of a rank's analysed device window.",
     "exposed communication time on the worst rank (measured)"),
    ("host_bound", IdleEvidence, "symptom",
     "GPU idle ≥ 20 % of the window, mostly waiting for the host, with launch gaps inside the steps ≥ 20 %.",
     "launch gaps (host-wait gaps between one step's kernels) on the worst rank (measured)"),
    ("launch_bound", IdleEvidence, "symptom",
     "Host-bound idle where most compute kernels run < 10 µs: launch overhead dominates.",
     "launch gaps (host-wait gaps between one step's kernels) on the worst rank (measured)"),
    ("gpu_idle", IdleEvidence, "symptom",
     "GPU idle ≥ 30 % of the window, not mainly waiting for kernel launches.",
     "idle time on the worst rank (measured)"),
    ("exposed_memcpy", ExposedMemcpyEvidence, "symptom",
     "Memory copies/sets running alone on the GPU ≥ 5 % of the window.",
     "exposed copy time on the worst rank (measured)"),
    ("collective_wait", CollectiveWaitEvidence, "symptom",
     "Time ranks spent in collectives waiting for the last rank to arrive.",
     "last arrival minus own arrival, summed per rank (measured)"),
    ("profiler_overhead", ProfilerOverheadEvidence, "fact",
     "The trace was recorded with with_stack/record_shapes: every host op ran slower while profiled.",
     "none (it inflates host time in the window; measure without them to compare)"),
    ("straggler", StragglerEvidence, "",
     "One rank reaches the synchronisation points last in most steps and holds the others back.",
     "median time it held the others back (its start or arrival minus the second-latest's) × the times it did "
     "(measured)"),
    ("collective_mismatch", CollectiveMismatchEvidence, "fact hazard diverges",
     "Ranks disagree on a collective's name, dtype or size, or a call is missing on some ranks.",
     "none (a hang risk)"),
    ("clock_offset", ClockOffsetEvidence, "fact",
     "Ranks on several hosts with clocks > 100 µs apart (times were aligned).",
     "none"),
    ("collective_drift", CollectiveDriftEvidence, "fact",
     "The rank whose arrival at collectives moved most relative to the others (> 1 ms).",
     "none (a trend, not lost time)"),
    ("pipeline_bubble", PipelineBubbleEvidence, "",
     "Pipeline stages idle ≥ 20 % of the step with ≥ 2 micro-batches per step.",
     "summed bubble time on the worst stage (measured)"),
)


def _declare() -> None:
    for name, evidence, flags, definition, cost_method in KIND_TABLE:
        words = flags.split()
        unknown = [w for w in words if w not in ("fact", "symptom", "hazard", "diverges") and not w.startswith("estimate:")]
        if unknown:
            raise ValueError(f"KIND_TABLE: {name}: unknown flag(s) {unknown}")
        role = "fact" if "fact" in words else "symptom" if "symptom" in words else "cause"
        cap = next((w.split(":", 1)[1] for w in words if w.startswith("estimate:")), None)
        declare_kind(name, evidence, definition, cost_method, role=role, hazard="hazard" in words,
                     diverges="diverges" in words, estimate_severity=cap)  # type: ignore[arg-type]


_declare()
