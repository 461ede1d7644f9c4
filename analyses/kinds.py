"""Every finding kind, declared once: its name (:class:`Kind`), its evidence dataclass and its :class:`KindSpec`.

A :class:`KindSpec` holds every fact the code branches on for a kind: its definition and cost method, its role
(``cause`` findings can explain other findings' time, ``symptom`` findings — idle, exposed communication,
collective waits — are attributed to a cause when they overlap it in time, ``fact`` findings neither cost nor
explain time), whether it is a hazard, whether ranks may run different programs (``diverges``), whether it ends the
job, what its cost is a total over (``cost_scope``), its threshold, the app page that explains it, what other ranks
wait for when it is a root cause (``wait_reason``), the noun messages use, the kinds the same problem may also be
reported as, and the old names that meant it (``aliases``). :func:`kind_spec` reads it; declaring a kind twice
raises.

Adding a fault kind: a member of :class:`Kind`, one evidence class and one :class:`KindSpec` here; one detector
(``@register_detector`` in :mod:`workbench.analyses.detectors`) and one fixer (``@register_fixer(TheEvidence)`` in
:mod:`workbench.analyses.recommendations`).

Which ranks a finding blames is its evidence's :meth:`Evidence.blamed` (the compiling ranks of a divergent
recompile, the slowest rank of a compile skew, the straggler, the ranks whose config differs, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

Row = dict[str, Any]
Role = Literal["cause", "symptom", "fact"]
Severity = Literal["high", "medium", "low", "info"]
#: What a kind's cost is a total over: the analysed profiler ``window`` (compared per window step), the collector
#: ``steps`` (per collector step), or the whole ``run`` (an event: compared by whether and how often it happens).
CostScope = Literal["window", "steps", "run"]
#: The per-rank intervals of :class:`workbench.analyses.rootcause.DeviceTime` a symptom kind's time is.
SymptomTime = Literal["idle", "exposed_comm", "exposed_memory"]
#: The app page (its ``KEY``) that explains a kind best.
Page = Literal["breakdown", "recompiles", "drift", "pipeline", "hangs"]


class Kind(StrEnum):
    """The name of every finding kind (the one list; a member compares equal to its string)."""

    DIVERGENT_RECOMPILE = "divergent_recompile"
    DIFFERENT_PROGRAMS = "different_programs"
    NCCL_TIMEOUT_RISK = "nccl_timeout_risk"
    DIVERGENT_CACHE = "divergent_cache"
    DIVERGENT_COLLECTIVE_SCHEDULE = "divergent_collective_schedule"
    DIVERGENT_CONFIG = "divergent_config"
    DIVERGENT_FINGERPRINT = "divergent_fingerprint"
    COMPILE_SKEW = "compile_skew"
    COMPILE_TIME = "compile_time"
    COMPILING = "compiling"
    RECOMPILE_SHAPE = "recompile_shape"
    RECOMPILE_STRIDE = "recompile_stride"
    RECOMPILE_DTYPE = "recompile_dtype"
    RECOMPILE_DEVICE = "recompile_device"
    RECOMPILE_REQUIRES_GRAD = "recompile_requires_grad"
    RECOMPILE_GRAD_MODE = "recompile_grad_mode"
    RECOMPILE_GLOBAL_STATE = "recompile_global_state"
    RECOMPILE_TENSOR_META = "recompile_tensor_meta"
    RECOMPILE_INT_ARG = "recompile_int_arg"
    RECOMPILE_FLOAT_ARG = "recompile_float_arg"
    RECOMPILE_CONSTANT = "recompile_constant"
    RECOMPILE_GLOBAL = "recompile_global"
    RECOMPILE_MODULE = "recompile_module"
    RECOMPILE_OBJECT_ID = "recompile_object_id"
    RECOMPILE_TYPE = "recompile_type"
    RECOMPILE_LENGTH = "recompile_length"
    RECOMPILE_BACKEND = "recompile_backend"
    RECOMPILE_CACHE_MISS = "recompile_cache_miss"
    RECOMPILE_OTHER = "recompile_other"
    RECOMPILE_LIMIT = "recompile_limit"
    GRAPH_BREAK = "graph_break"
    COMPILE_FAILURE = "compile_failure"
    SKIPPED_FRAME = "skipped_frame"
    EXPOSED_COMMUNICATION = "exposed_communication"
    HOST_BOUND = "host_bound"
    LAUNCH_BOUND = "launch_bound"
    GPU_IDLE = "gpu_idle"
    EXPOSED_MEMCPY = "exposed_memcpy"
    COLLECTIVE_WAIT = "collective_wait"
    PROFILER_OVERHEAD = "profiler_overhead"
    STRAGGLER = "straggler"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    CLOCK_OFFSET = "clock_offset"
    COLLECTIVE_DRIFT = "collective_drift"
    PIPELINE_BUBBLE = "pipeline_bubble"
    DESYNC = "desync"
    HANG = "hang"
    RANK_DIED = "rank_died"
    COMPILED_DESYNC = "compiled_desync"
    CONFIG_NOT_APPLIED = "config_not_applied"
    HOST_SYNC = "host_sync"
    UNFUSED_OPTIMIZER = "unfused_optimizer"
    DATA_LOADING = "data_loading"
    CONFIG_NO_EFFECT = "config_no_effect"


#: Every kind's name as a plain string.
NAMES: frozenset[str] = frozenset(k.value for k in Kind)

#: Why a frame was compiled (``compiles.cause``), as ``analyses.recompiles.classify_compiles`` writes it.
CAUSES: tuple[str, ...] = (
    "first", "shape", "stride", "dtype", "device", "requires_grad", "grad_mode", "global_state", "tensor_meta",
    "int_arg", "float_arg", "constant", "global", "module", "object_id", "type", "length", "backend", "limit",
    "graph_break", "compile_error", "cache_miss", "skipped_frame", "other",
)
#: Causes with a kind of their own (or none: ``first``) rather than a ``recompile_<cause>`` kind.
_NOT_RECOMPILES = ("first", "limit", "graph_break", "compile_error", "skipped_frame")
#: The ``recompile_<cause>`` kinds: recompiles of one frame whose failed guard is that cause.
RECOMPILE_KINDS: frozenset[Kind] = frozenset(Kind(f"recompile_{c}") for c in CAUSES if c not in _NOT_RECOMPILES)


def recompile_kind(cause: str) -> Kind:
    """The ``recompile_<cause>`` kind of a recompile cause (ValueError for a cause without one)."""
    kind = Kind(f"recompile_{cause}")
    if kind not in RECOMPILE_KINDS:
        raise ValueError(f"cause {cause!r} has no recompile kind")
    return kind


# ---------------------------------------------------------------------------------------------- evidence base
def odd_ranks(by_rank: Mapping[int, Any]) -> set[int]:
    """Ranks whose value differs from the one most ranks have (none when no value has a majority)."""
    counts: dict[str, list[int]] = {}
    for r, v in by_rank.items():
        counts.setdefault(repr(v), []).append(int(r))
    if len(counts) < 2:
        return set()
    groups = sorted(counts.values(), key=len, reverse=True)
    if len(groups[0]) == len(groups[1]):
        return set()
    return {r for g in groups[1:] for r in g}


@dataclass(frozen=True, slots=True)
class Evidence:
    """Base of every kind's evidence: a frozen dataclass of the numbers behind a finding."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        """The ranks the finding blames (``ranks``: the finding's own; the default)."""
        return ranks

    def wait_reason(self, declared: str | None) -> str | None:
        """What the other ranks wait for when this finding is a root cause (``declared``: its kind's)."""
        return declared


def _plain(v: Any) -> Any:
    if isinstance(v, Evidence):
        return v.to_dict()
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


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

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return self.compiling_ranks


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
class SkippedFrameEvidence(Evidence):
    """A frame dynamo gave up on without raising: it runs eagerly from ``since`` on (per rank)."""

    co_name: str | None
    co_filename: str | None
    co_firstlineno: int | None
    skip_reason: str                 # graph_break_in_loop, suppressed_error, no_reason_logged, recompile_limit
    cause_line: str | None           # file:line of the break / error that made dynamo give up
    break_reason: str | None         # what dynamo could not trace, in one line
    compile_ids: tuple[str, ...]
    since: dict[int, int]            # per rank: when dynamo gave up (end of that compile, ns)
    attempt_ns: int | None           # dynamo's time before giving up (compile log)
    eager_ns: dict[int, int] = field(default_factory=dict)   # per rank: idle the profiler window shows after it


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

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(odd_ranks(self.by_rank))) or ranks


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

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return (self.slowest_rank,)


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
class IdleCauseEvidence(Evidence):
    """GPU idle attributed to one thing the host did (``analyses/idle_causes.py``)."""

    rank: int
    stream: int | None
    cause: str                       # idle_causes.CAUSES: sync, optimizer, data
    label: str | None                # the op or annotation (aten::item, AdamW step (per-parameter), DataLoader ...)
    site: str | None                 # file:line of the user's call (the trace's stack, else run.json's source sites)
    site_text: str | None            # that line's source (escaped text, never run)
    site_detail: str | None          # what matters on it (foreach=False, num_workers=0, .item())
    idle_ns: int                     # GPU idle attributed to it in the analysed window
    gaps: int                        # idle gaps it caused
    by_step: dict[int, int] = field(default_factory=dict)   # step -> idle ns
    per_step_ns: int = 0             # median over its steps
    window_ns: int | None = None     # the rank's analysed device window
    labels: tuple[Row, ...] = ()     # label, ns: every op of this cause (largest first)


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
#: A straggler's data loading explains its lateness when its median data wait exceeds twice the others' plus this.
DATA_WAIT_MARGIN_NS = 1_000_000


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
    # from the cross-rank critical path (analyses/critical_path.py, late_ranks.py); defaults: the heuristic's
    reason: str | None = None                # what made it late: an activity category (analyses/activities.py)
    what: str | None = None                  # the top activity's label (op, function, compiled frame, ...)
    site: str | None = None                  # where: file:line (the activity's, else the late collective's call)
    lateness_by_step: dict[int, int] = field(default_factory=dict)   # step -> time it held the others back
    wait_by_rank: dict[int, int] = field(default_factory=dict)       # victim -> its wait for this rank
    activities: tuple[Row, ...] = ()         # category, label, site, ns: the activities its lateness is split over
    noise_ns: int | None = None              # the lateness the run's own noise allows at these collectives

    @property
    def slow_data_loading(self) -> bool:
        """Data loading makes it late: the critical path says so, or (heuristic) its median data wait is more than
        twice the others' plus :data:`DATA_WAIT_MARGIN_NS`."""
        if self.reason is not None:
            return self.reason == "data"
        return (self.data_wait_median_ns or 0) > 2 * (self.others_data_wait_median_ns or 0) + DATA_WAIT_MARGIN_NS

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return (self.rank,)

    def wait_reason(self, declared: str | None) -> str | None:
        if self.reason is not None and self.reason != "untraced":
            return "data loading" if self.reason == "data" else self.reason.replace("_", " ")
        return "data loading" if self.slow_data_loading else declared


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

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return (self.rank,)


@dataclass(frozen=True, slots=True)
class PipelineBubbleEvidence(Evidence):
    per_rank: tuple[Row, ...]
    theoretical_pct: float | None = None
    microbatches: float | None = None
    stages: int | None = None


# ---------------------------------------------------------------------------------------------- hangs
@dataclass(frozen=True, slots=True)
class JobFailureEvidence(Evidence):
    """What the ranks were doing when the job hung or died, around the first collective that did not match."""

    problem: str                           # extra / missing / op / size / dtype / contents / misaligned / timeout / died
    pg_name: str | None                    # process group of the first collective that does not match
    pg_desc: str | None
    seq: int | None                        # its collective sequence id in that group
    op: str | None                         # what the other ranks issued there
    sizes: str | None
    dtypes: str | None
    call_site: str | None                  # where the other ranks issued it
    odd_ranks: tuple[int, ...]
    odd: dict[int, str]                    # odd rank -> what it issued / did instead
    odd_call_site: str | None              # file:line of the odd rank's call (Flight Recorder stack / fatal traceback)
    steps_by_rank: dict[int, int | None]   # the step each rank reached
    state_by_rank: dict[int, str]          # finished / timeout / peer_lost / error / aborted / gone / stalled
    wait_ns_by_rank: dict[int, int]        # healthy ranks' time blocked in that collective (measured)
    timeout_ms: int | None
    compile_id: str | None                 # the odd rank's compile at that time, if any
    co_name: str | None
    compile_ns: int | None
    compile_step: int | None
    fix: str                               # what to change, for this case (the fixers turn it into a Fix)
    sources: tuple[str, ...]               # flight_recorder / steps / fatal_traceback / compile_log / heartbeat

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return self.odd_ranks or ranks


@dataclass(frozen=True, slots=True)
class CompiledDesyncEvidence(Evidence):
    """A compiled graph whose collectives differ across ranks."""

    compile_id: str
    graph: str
    index: int                             # first position where the ranks' collective lists differ
    by_rank: dict[int, tuple[str, ...]]    # rank -> its collectives, "op group dtype[shape]"
    odd_ranks: tuple[int, ...]
    odd_call_site: str | None
    fix: str

    def blamed(self, ranks: tuple[int, ...]) -> tuple[int, ...]:
        return self.odd_ranks or ranks


# ---------------------------------------------------------------------------------------------- applied config
@dataclass(frozen=True, slots=True)
class ConfigNotAppliedEvidence(Evidence):
    setting: str                      # "compiler.dynamic_sources", "mark_dynamic.0:0", "compile.mode"
    value: Any
    reason: str
    ranks: tuple[int, ...]
    config_path: str | None


# ---------------------------------------------------------------------------------------------- the specs
@dataclass(frozen=True, slots=True, kw_only=True)
class KindSpec:
    """Everything the code knows about one kind (see the module docstring)."""

    kind: Kind
    evidence: type[Evidence]
    definition: str
    cost_method: str
    role: Role = "cause"
    hazard: bool = False              # can hang or kill the job or silently change what runs: at least ``high``
    diverges: bool = False            # ranks may run different programs: ranked before every time cost
    ends_job: bool = False            # why the job stopped: listed first
    estimate_cap: Severity | None = None   # the most severe an estimated cost of this kind may be
    cost_scope: CostScope = "run"
    one_shot: bool = False            # one timing a run decides it: absent from one rerun proves nothing
    threshold_pct: float | None = None     # share (percent) its detector needs: of the window, step or timeout
    threshold_ns: int | None = None        # the time its detector needs (compile time, clock offset, drift)
    symptom_time: SymptomTime | None = None
    page: Page = "breakdown"
    wait_reason: str | None = None    # what others wait for when it is a root cause ("compile", "late arrival")
    noun: str = ""                    # in messages ("GPU idle waiting for the host"); default: the name in words
    names_culprit: bool = False       # its blamed ranks are the ranks at fault (else a job-wide kind, per rank)
    also_found_as: tuple[Kind, ...] = ()   # other kinds the same planted problem may be reported as
    aliases: tuple[str, ...] = ()     # names once used for it (never valid kinds)

    def __post_init__(self) -> None:
        if not self.noun:
            object.__setattr__(self, "noun", self.kind.value.replace("_", " "))


#: Every declared kind (filled once, below).
KINDS: dict[Kind, KindSpec] = {}


def declare(spec: KindSpec) -> KindSpec:
    """Declare ``spec``'s kind. Declaring a kind twice, or an alias that names a kind, is an error."""
    if spec.kind in KINDS:
        raise ValueError(f"finding kind {spec.kind.value!r} declared twice")
    bad = [a for a in spec.aliases if a in NAMES]
    if bad:
        raise ValueError(f"{spec.kind.value}: alias(es) {bad} name declared kinds")
    if not issubclass(spec.evidence, Evidence):
        raise TypeError(f"{spec.kind.value}: evidence {spec.evidence!r} is not an Evidence dataclass")
    KINDS[spec.kind] = spec
    return spec


def declare_kind(name: str | Kind, evidence: type[Evidence], definition: str, cost_method: str, **facts: Any
                 ) -> KindSpec:
    """:func:`declare` from the name and facts (``name`` must be a :class:`Kind`)."""
    return declare(KindSpec(kind=Kind(name), evidence=evidence, definition=definition, cost_method=cost_method,
                            **facts))


def kind_spec(kind: str | Kind) -> KindSpec:
    """The declaration of ``kind`` (KeyError when it is not a declared kind)."""
    try:
        return KINDS[Kind(kind)]
    except ValueError:
        raise KeyError(f"finding kind {kind!r} is not declared (analyses/kinds.py)") from None


def specs() -> Iterable[KindSpec]:
    """Every declaration, in :class:`Kind` order."""
    return (KINDS[k] for k in Kind)


def kinds_where(**facts: Any) -> tuple[Kind, ...]:
    """The kinds whose spec has every given fact, in :class:`Kind` order (``kinds_where(ends_job=True)``)."""
    return tuple(s.kind for s in specs() if all(getattr(s, k) == v for k, v in facts.items()))


def kinds_of(evidence: type[Evidence]) -> tuple[Kind, ...]:
    """The kinds whose evidence is ``evidence`` (or a subclass of it), in :class:`Kind` order."""
    return tuple(s.kind for s in specs() if issubclass(s.evidence, evidence))


def resolve(name: str) -> tuple[Kind, ...]:
    """The kinds ``name`` means: itself when declared, else the kinds that list it as an alias (empty: none)."""
    if name in NAMES:
        return (Kind(name),)
    return tuple(s.kind for s in specs() if name in s.aliases)


#: Thresholds the detectors use (percent of the analysed window unless said otherwise).
EXPOSED_COMM_PCT = 5.0
IDLE_HOST_PCT = 20.0        # GPU idle, and the launch gaps inside the steps, for host_bound / launch_bound
IDLE_PCT = 30.0             # GPU idle for gpu_idle
IDLE_CAUSE_PCT = 2.0        # GPU idle one host cause left (host_sync, unfused_optimizer, data_loading)
EXPOSED_MEMCPY_PCT = 5.0
BUBBLE_PCT = 20.0           # percent of the step
TIMEOUT_RISK_PCT = 10.0     # percent of the collective timeout
COMPILE_TIME_NS = 60_000_000_000
CLOCK_OFFSET_NS = 100_000
DRIFT_NS = 1_000_000


def _declare_all() -> None:
    declare(KindSpec(
        kind=Kind.DIVERGENT_RECOMPILE, evidence=DivergentRecompileEvidence,
        definition="A compile of the same code object on some ranks only, while the others wait for it.",
        cost_method="the waiting ranks' collective wait in the step of the compile (measured); else their step-time "
                    "excess over their median in that step (measured); else the compile time (estimated)",
        wait_reason="compile", names_culprit=True, page="recompiles"))
    declare(KindSpec(
        kind=Kind.DIFFERENT_PROGRAMS, evidence=DifferentProgramsEvidence,
        definition="Ranks compile different frames: they run different code, so their compiles are not comparable.",
        cost_method="none (a fact about the run)", role="fact", diverges=True, page="recompiles"))
    declare(KindSpec(
        kind=Kind.NCCL_TIMEOUT_RISK, evidence=TimeoutRiskEvidence,
        definition=f"A one-rank compile takes ≥ {TIMEOUT_RISK_PCT:g} % of the collective timeout: a slower one kills "
                   "the job.",
        cost_method="none (a risk)", role="fact", hazard=True, one_shot=True, threshold_pct=TIMEOUT_RISK_PCT,
        aliases=("timeout_risk",)))
    declare(KindSpec(
        kind=Kind.DIVERGENT_CACHE, evidence=CacheDivergenceEvidence,
        definition="One compile hits the compile cache on some ranks and misses on others.",
        cost_method="none", role="fact"))
    declare(KindSpec(
        kind=Kind.DIVERGENT_COLLECTIVE_SCHEDULE, evidence=CollectiveScheduleEvidence,
        definition="Inductor ordered a graph's collectives differently on different ranks (hang risk).",
        cost_method="none (a risk)", role="fact", hazard=True, diverges=True))
    declare(KindSpec(
        kind=Kind.DIVERGENT_CONFIG, evidence=ConfigDivergenceEvidence,
        definition="The torch version or dynamo/inductor config differs across ranks: they may run different "
                   "programs (ranked before every time cost).",
        cost_method="none (a hang risk); when the rank whose config differs is also the one whose compile is "
                    "slower, that compile skew goes under it and is its cost",
        role="fact", hazard=True, diverges=True, names_culprit=True, also_found_as=(Kind.DIVERGENT_FINGERPRINT,)))
    declare(KindSpec(
        kind=Kind.DIVERGENT_FINGERPRINT, evidence=ConfigDivergenceEvidence,
        definition="A library version or config hash in the collectors' fingerprints differs across ranks.",
        cost_method="none", role="fact", hazard=True, diverges=True, names_culprit=True))
    declare(KindSpec(
        kind=Kind.COMPILE_SKEW, evidence=CompileSkewEvidence,
        definition="One rank's first compiles take longer than the others' and it arrives last at the collectives of "
                   "that step, by ≥ 1 s and more than the run's own noise: the others wait for it (else a zero-cost "
                   "note that says why it is not a cause).",
        cost_method="the time it held the other ranks back in the step of the compile: its arrival minus the "
                    "second-latest's (measured: the collectives' arrivals, else step times less each rank's own "
                    "compile time); zero when they did not wait for it; estimated from the compile times (at most a "
                    "low note) only when no step or collective was recorded",
        estimate_cap="low", one_shot=True, names_culprit=True))
    declare(KindSpec(
        kind=Kind.COMPILE_TIME, evidence=CompileTimeEvidence,
        definition=f"Total compile time on a rank ≥ {COMPILE_TIME_NS // 1_000_000_000} s: a compile-cache warm start "
                   "would cut start-up.",
        cost_method="none (start-up time, outside the steps)", role="fact", threshold_ns=COMPILE_TIME_NS))
    declare(KindSpec(
        kind=Kind.COMPILING, evidence=CompilingEvidence,
        definition="Compiles ran inside the profiler window: the idle GPU then waits for the compiler, not the host.",
        cost_method="compile time inside the analysed window (measured)", cost_scope="window", wait_reason="compile",
        page="recompiles"))
    for kind in sorted(RECOMPILE_KINDS):
        cause = kind.value.removeprefix("recompile_")
        declare(KindSpec(
            kind=kind, evidence=CompileGroupEvidence,
            definition=f"Recompiles of one frame whose failed guard is a {cause.replace('_', ' ')} change.",
            cost_method="summed compile time of those recompiles (measured from the compile log)",
            wait_reason="compile", aliases=("recompile",), page="recompiles"))
    declare(KindSpec(
        kind=Kind.RECOMPILE_LIMIT, evidence=CompileGroupEvidence,
        definition="A frame hit the recompile limit and now runs eager, silently, for new input variants.",
        cost_method="summed compile time before the limit (measured); the eager slowdown is not measured",
        hazard=True, also_found_as=(Kind.RECOMPILE_SHAPE,), page="recompiles"))
    declare(KindSpec(
        kind=Kind.GRAPH_BREAK, evidence=CompileGroupEvidence,
        definition="Dynamo split a frame at unsupported code (the frame still compiles, in pieces).",
        cost_method="not measured (unknown): the runtime cost of a break needs a run without it",
        wait_reason="compile", page="recompiles"))
    declare(KindSpec(
        kind=Kind.COMPILE_FAILURE, evidence=CompileGroupEvidence,
        definition="A compile raised (fullgraph=True at a graph break, or a compiler error).",
        cost_method="none", role="fact", hazard=True, aliases=("compile_failed",), page="recompiles"))
    declare(KindSpec(
        kind=Kind.SKIPPED_FRAME, evidence=SkippedFrameEvidence,
        definition="Dynamo gave a frame up without raising (a graph break inside a loop, an error under "
                   "suppress_errors, torch.compiler.disable): the frame runs eagerly from then on.",
        cost_method="what running the frame eagerly costs: the GPU idle (launch gaps) the profiler window shows "
                    "after the skip on the worst rank (measured); without such a window, estimated and labelled so",
        hazard=True, cost_scope="window", wait_reason="eager frame", page="recompiles",
        also_found_as=(Kind.COMPILE_FAILURE, Kind.GRAPH_BREAK, Kind.LAUNCH_BOUND)))
    declare(KindSpec(
        kind=Kind.EXPOSED_COMMUNICATION, evidence=ExposedCommEvidence,
        definition=f"Communication not overlapped with compute ≥ {EXPOSED_COMM_PCT:g} % of a rank's analysed device "
                   "window.",
        cost_method="exposed communication time on the worst rank (measured)", role="symptom", cost_scope="window",
        threshold_pct=EXPOSED_COMM_PCT, symptom_time="exposed_comm", noun="exposed communication",
        also_found_as=(Kind.COLLECTIVE_WAIT,)))
    launch_gaps = "launch gaps (host-wait gaps between one step's kernels) on the worst rank (measured)"
    declare(KindSpec(
        kind=Kind.HOST_BOUND, evidence=IdleEvidence,
        definition=f"GPU idle ≥ {IDLE_HOST_PCT:g} % of the window, mostly waiting for the host, with launch gaps "
                   f"inside the steps ≥ {IDLE_HOST_PCT:g} %.",
        cost_method=launch_gaps, role="symptom", cost_scope="window", threshold_pct=IDLE_HOST_PCT,
        symptom_time="idle", noun="GPU idle waiting for the host"))
    declare(KindSpec(
        kind=Kind.LAUNCH_BOUND, evidence=IdleEvidence,
        definition="Host-bound idle where most compute kernels run < 10 µs: launch overhead dominates.",
        cost_method=launch_gaps, role="symptom", cost_scope="window", threshold_pct=IDLE_HOST_PCT,
        symptom_time="idle", noun="GPU idle waiting for launches", also_found_as=(Kind.HOST_BOUND,)))
    declare(KindSpec(
        kind=Kind.GPU_IDLE, evidence=IdleEvidence,
        definition=f"GPU idle ≥ {IDLE_PCT:g} % of the window, not mainly waiting for kernel launches.",
        cost_method="idle time on the worst rank (measured)", role="symptom", cost_scope="window",
        threshold_pct=IDLE_PCT, symptom_time="idle", noun="GPU idle"))
    idle_cause = ("GPU idle attributed to it: the idle gaps of the main stream during which the thread that launched "
                  "the next kernel was doing it (measured, analysed window)")
    declare(KindSpec(
        kind=Kind.HOST_SYNC, evidence=IdleCauseEvidence,
        definition=f"Host-device syncs (.item(), .cpu(), .tolist(), torch.cuda.synchronize, a DtoH copy) leave the GPU "
                   f"idle ≥ {IDLE_CAUSE_PCT:g} % of the window: each one empties the queue the host had run ahead.",
        cost_method=idle_cause, cost_scope="window", threshold_pct=IDLE_CAUSE_PCT, noun="host-device syncs"))
    declare(KindSpec(
        kind=Kind.UNFUSED_OPTIMIZER, evidence=IdleCauseEvidence,
        definition=f"An optimizer stepping per parameter outside the compiled model (neither fused nor foreach) leaves "
                   f"the GPU idle between its small kernels ≥ {IDLE_CAUSE_PCT:g} % of the window.",
        cost_method=idle_cause, cost_scope="window", threshold_pct=IDLE_CAUSE_PCT, noun="an unfused optimizer"))
    declare(KindSpec(
        kind=Kind.DATA_LOADING, evidence=IdleCauseEvidence,
        definition=f"The GPU idles while the training thread loads the next batch (a DataLoader in the trace, the "
                   f"collector's data wait) ≥ {IDLE_CAUSE_PCT:g} % of the window.",
        cost_method=idle_cause, cost_scope="window", threshold_pct=IDLE_CAUSE_PCT, noun="data loading"))
    declare(KindSpec(
        kind=Kind.EXPOSED_MEMCPY, evidence=ExposedMemcpyEvidence,
        definition=f"Memory copies/sets running alone on the GPU ≥ {EXPOSED_MEMCPY_PCT:g} % of the window.",
        cost_method="exposed copy time on the worst rank (measured)", role="symptom", cost_scope="window",
        threshold_pct=EXPOSED_MEMCPY_PCT, symptom_time="exposed_memory", noun="exposed memory copies"))
    declare(KindSpec(
        kind=Kind.COLLECTIVE_WAIT, evidence=CollectiveWaitEvidence,
        definition="Time ranks spent in collectives waiting for the last rank to arrive.",
        cost_method="last arrival minus own arrival, summed per rank (measured)", role="symptom",
        cost_scope="window", page="drift", aliases=("collective_skew",)))
    declare(KindSpec(
        kind=Kind.PROFILER_OVERHEAD, evidence=ProfilerOverheadEvidence,
        definition="The trace was recorded with with_stack/record_shapes: every host op ran slower while profiled.",
        cost_method="none (it inflates host time in the window; measure without them to compare)", role="fact"))
    declare(KindSpec(
        kind=Kind.STRAGGLER, evidence=StragglerEvidence,
        definition="One rank reaches the synchronisation points last in most steps and holds the others back.",
        cost_method="median time it held the others back (its start or arrival minus the second-latest's) × the "
                    "times it did (measured)",
        cost_scope="steps", page="drift", wait_reason="late arrival", names_culprit=True, aliases=("data_wait",)))
    declare(KindSpec(
        kind=Kind.COLLECTIVE_MISMATCH, evidence=CollectiveMismatchEvidence,
        definition="Ranks disagree on a collective's name, dtype or size, or a call is missing on some ranks.",
        cost_method="none (a hang risk)", role="fact", hazard=True, diverges=True, cost_scope="window"))
    declare(KindSpec(
        kind=Kind.CLOCK_OFFSET, evidence=ClockOffsetEvidence,
        definition=f"Ranks on several hosts with clocks > {CLOCK_OFFSET_NS // 1000} µs apart (times were aligned).",
        cost_method="none", role="fact", cost_scope="window", threshold_ns=CLOCK_OFFSET_NS))
    declare(KindSpec(
        kind=Kind.COLLECTIVE_DRIFT, evidence=CollectiveDriftEvidence,
        definition=f"The rank whose arrival at collectives moved most relative to the others "
                   f"(> {DRIFT_NS // 1_000_000} ms).",
        cost_method="none (a trend, not lost time)", role="fact", cost_scope="window", threshold_ns=DRIFT_NS,
        page="drift"))
    declare(KindSpec(
        kind=Kind.PIPELINE_BUBBLE, evidence=PipelineBubbleEvidence,
        definition=f"Pipeline stages idle ≥ {BUBBLE_PCT:g} % of the step with ≥ 2 micro-batches per step.",
        cost_method="summed bubble time on the worst stage (measured)", cost_scope="window",
        threshold_pct=BUBBLE_PCT, page="pipeline"))
    declare(KindSpec(
        kind=Kind.DESYNC, evidence=JobFailureEvidence,
        definition="Ranks issued different collectives at one sequence id of a process group (missing on a rank, or "
                   "a different op, size or dtype): the job hangs or aborts there.",
        cost_method="the healthy ranks' time blocked in that collective until the job failed (measured)",
        hazard=True, diverges=True, ends_job=True))
    declare(KindSpec(
        kind=Kind.HANG, evidence=JobFailureEvidence,
        definition="Ranks timed out (or stalled) in a collective that one rank entered late or never, with no "
                   "mismatch: that rank was busy elsewhere (compiling, in other code).",
        cost_method="the waiting ranks' time blocked in that collective until the timeout (measured)", hazard=True,
        ends_job=True))
    declare(KindSpec(
        kind=Kind.RANK_DIED, evidence=JobFailureEvidence,
        definition="A rank ended (killed, crashed or aborted) while the others waited for it in a collective.",
        cost_method="the other ranks' time blocked in that collective until the job failed (measured)", hazard=True,
        ends_job=True))
    declare(KindSpec(
        kind=Kind.COMPILED_DESYNC, evidence=CompiledDesyncEvidence,
        definition="A compiled graph issues different collectives on different ranks (from the compile logs): the "
                   "job hangs or aborts when it runs.",
        cost_method="none (a hang risk found before it hangs)", role="fact", hazard=True, diverges=True))
    declare(KindSpec(
        kind=Kind.CONFIG_NOT_APPLIED, evidence=ConfigNotAppliedEvidence,
        definition="A setting of the run's compile config did not take effect (the collector recorded why).",
        cost_method="none (the fix it carries did not run)", role="fact", hazard=True))
    declare(KindSpec(
        kind=Kind.CONFIG_NO_EFFECT, evidence=ConfigNotAppliedEvidence,
        definition="A setting of the run's compile config was applied but did not act on this torch (the collector "
                   "checked after the first compile: no symbol for the dim, or the fix matrix says this torch "
                   "ignores it).",
        cost_method="none (the fix it carries did not run)", role="fact", hazard=True,
        also_found_as=(Kind.CONFIG_NOT_APPLIED,)))
    missing = [k.value for k in Kind if k not in KINDS]
    if missing:
        raise ValueError(f"kinds without a KindSpec: {missing}")


_declare_all()
