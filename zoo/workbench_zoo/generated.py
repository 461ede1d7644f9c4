"""Generated faults: seeded random cases of ranks that hold the others back, with their measured ground truth.

:func:`plan` turns a seed into a :class:`Case`: 2-8 gloo ranks (2-4 for the fast set) training a tiny compiled
model, either under DDP (one gradient all-reduce a step) or with the gradients all-reduced by hand in two pieces
(two collectives a step); 1-2 culprit ranks, each with a :class:`Plant` — a phase (``before_forward``,
``forward``, ``backward``, ``optimizer``, ``between_collectives``, ``data``), a kind (``sleep``, ``cpu``: torch
compute, ``recompile``: the shared compiled model recompiling on that rank alone, always in the forward: see
:func:`main`, ``gc``: garbage collections over a big heap, ``file_write``: written and synced to disk), a size
(5-300 ms; 30-300 in the fast set) and steps (some or all of the steps after the first and before the last); or,
one case in five, a clean control with nothing planted.

:func:`main` is the training loop every rank runs (the zoo's runner starts it, ``name = "generated"``, its spec in
``fault/plan.json``). Each rank times its own planted work per step and phase (``ctx.timed``).
A recompile plant feeds the shared compiled model a batch of another size (``16 - step`` rows) on its rank in its
steps: the model, compiled with ``dynamic=False`` and the same compile config on every rank (a backend whose
forward compiler waits ``size`` the first time it runs in a planted step, as a slower host or a cold cache would;
the backward compiled with the forward; a recompile limit of 64), recompiles there and only there. Its truth is
that rank's model call in the planted step less the median of its model calls in the unplanted steps after the
first.

:func:`ground_truth` is the layered counterfactual over those measured times: the ranks' planted work is grouped by
the interval between two collectives it delays (the gradient all-reduce of a step; the optimizer's work delays the
next step's first collective), and in each interval the rank with the most is charged its excess over the next,
that one its excess over the next, down to zero; a culprit's truth in a step is the sum of its charges for the work
it did in that step (``truth_by_rank_step_ns``), its cost the sum over steps (``cost_by_rank_ns``).

Every rank also notes its own arrival at each collective (``perf_counter_ns``, one clock on the host):
:func:`held_back` is how long a culprit actually held the others back at the collective its planted work delays,
:func:`unplanted_holds` how long each rank held them beyond its planted work; :func:`score` judges a planted step by
the run's own noise bar, its planted size and that hold (docs/critical-path.md, "Ground truth, honestly").

:func:`run_case` records a case into a run directory (the zoo's forked launcher) and returns its ground truth.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench_zoo.registry import GENERATED, PLAN_FILE, Fault, FaultContext, RankRecord

PHASES: tuple[str, ...] = ("before_forward", "forward", "backward", "optimizer", "between_collectives", "data")
#: The plant that recompiles the shared model on its rank (a plant kind, not a finding kind).
RECOMPILE_PLANT = "recompile"
KINDS: tuple[str, ...] = ("sleep", "cpu", RECOMPILE_PLANT, "gc", "file_write")
#: Share of cases that are clean controls.
CONTROL_SHARE = 0.2
PG_TIMEOUT_S = 120


@dataclass(frozen=True)
class Plant:
    """What one culprit rank does on top of the others' work: ``kind`` for ``size_ms`` in ``phase`` of ``steps``."""

    rank: int
    phase: str
    kind: str
    size_ms: float
    steps: tuple[int, ...]


@dataclass(frozen=True)
class Case:
    """One generated case (``plants`` empty: a clean control)."""

    seed: int
    world: int
    num_steps: int
    mode: str                       # "ddp" (one bucket: one all-reduce a step) or "explicit" (two all-reduces)
    plants: tuple[Plant, ...] = ()
    fast: bool = False

    @property
    def control(self) -> bool:
        return not self.plants

    @property
    def culprits(self) -> tuple[int, ...]:
        return tuple(sorted({p.rank for p in self.plants}))

    def fault(self) -> Fault:
        """The zoo :class:`Fault` of this case (``finding``: straggler; ranks and steps: the plants')."""
        steps = tuple(sorted({s for p in self.plants for s in p.steps}))
        case = asdict(self)
        return Fault(name=GENERATED, description=self.describe(), finding="straggler", ranks=self.culprits,
                     steps=steps, world_size=self.world, fix="code", num_steps=self.num_steps,
                     timeout_s=120.0 + 3.0 * self.world * self.num_steps, notes=json.dumps(case))

    def describe(self) -> str:
        if self.control:
            return f"seed {self.seed}: clean control, {self.world} ranks, {self.mode}"
        what = "; ".join(f"rank {p.rank} {p.kind} {p.size_ms:.0f} ms {p.phase} in steps "
                         f"{','.join(map(str, p.steps))}" for p in self.plants)
        return f"seed {self.seed}: {self.world} ranks, {self.mode}: {what}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fault"] = self.fault().to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Case:
        plants = tuple(Plant(int(p["rank"]), p["phase"], p["kind"], float(p["size_ms"]), tuple(p["steps"]))
                       for p in d.get("plants", ()))
        return cls(int(d["seed"]), int(d["world"]), int(d["num_steps"]), d["mode"], plants, bool(d.get("fast")))


def plan(seed: int, *, fast: bool = False) -> Case:
    """The case of ``seed`` (module docstring); ``fast``: 2-4 ranks, sizes 30-300 ms, fewer steps (the CI set)."""
    rnd = random.Random(seed)
    world = rnd.randint(2, 4 if fast else 8)
    num_steps = 7 if fast else 9
    if rnd.random() < CONTROL_SHARE:
        return Case(seed, world, num_steps, rnd.choice(("ddp", "explicit")), (), fast)
    n_culprits = 1 if world < 3 or rnd.random() < 0.7 else 2
    culprits = rnd.sample(range(world), n_culprits)
    lo, hi = (30.0, 300.0) if fast else (5.0, 300.0)
    plantable = list(range(1, num_steps - 1))       # not the first step (compiles) nor the last
    plants = []
    for r in sorted(culprits):
        phase = rnd.choice(PHASES)
        kind = rnd.choice(KINDS)
        if kind == RECOMPILE_PLANT:     # the shared model recompiles where it is called: in its forward
            phase = "forward"
        size = round(math.exp(rnd.uniform(math.log(lo), math.log(hi))), 1)
        if rnd.random() < 0.5:
            steps = tuple(plantable)
        else:
            steps = tuple(sorted(rnd.sample(plantable, rnd.randint(1, len(plantable) - 1))))
        plants.append(Plant(r, phase, kind, size, steps))
    mode = "explicit" if any(p.phase == "between_collectives" for p in plants) else rnd.choice(("ddp", "explicit"))
    return Case(seed, world, num_steps, mode, tuple(plants), fast)


# ---------------------------------------------------------------------------------------------- recording
def run_case(case: Case, out: str | Path, *, timeout_s: float | None = None) -> dict[str, Any]:
    """Record ``case`` into run directory ``out`` (emptied first) and return its ground truth."""
    import shutil

    from workbench_zoo.runner import run_fault

    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "fault").mkdir(parents=True)
    (out / PLAN_FILE).write_text(json.dumps(case.to_dict(), indent=1))
    return run_fault(GENERATED, out, timeout_s=timeout_s)


def _case(ctx: FaultContext) -> Case:
    return Case.from_dict(json.loads((ctx.out / PLAN_FILE).read_text()))


def main(ctx: FaultContext) -> None:
    """The training loop of every rank (module docstring)."""
    import torch
    import torch.distributed as dist

    from workbench_zoo.faults._common import batch

    case = _case(ctx)
    mine = [p for p in case.plants if p.rank == ctx.rank]
    work = _Work(ctx, mine)

    @torch._dynamo.disable
    def probe(h: torch.Tensor) -> torch.Tensor:
        """An eager point inside the model: the forward's planted work here, the backward's in its gradient."""
        work.do("forward")
        return _Probe.apply(h, work)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU())
            self.b = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(probe(self.a(x)))

    net = Net()
    recompiling = any(p.kind == RECOMPILE_PLANT for p in case.plants)
    backend = _delaying_backend(work) if recompiling else "aot_eager"
    if recompiling:      # the same compile config on every rank: only the planted rank's input shape differs
        torch._dynamo.config.recompile_limit = 64
        torch._functorch.config.force_non_lazy_backward_lowering = True
    dyn = False if recompiling else None
    arrivals: dict[str, list[int]] = {}         # "step:slot" -> this rank's perf_counter_ns at the call (ground truth)

    def arrive(slot: int) -> None:
        arrivals.setdefault(f"{work.step}:{slot}", []).append(time.perf_counter_ns())

    if case.mode == "ddp":
        ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=25)
        ddp.register_comm_hook(None, _arrival_hook(lambda: arrive(0)))
        model = torch.compile(ddp, backend=backend, dynamic=dyn)
    else:
        model = torch.compile(net, backend=backend, dynamic=dyn)
    # foreach: the per-parameter update (CPU's default) would be a second, unplanted fault of its own
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, foreach=True)
    gen = torch.Generator().manual_seed(ctx.rank)

    def data():
        while True:
            work.do("data")
            yield batch(16, gen=gen)

    batches = data()
    calls: dict[int, int] = {}
    with ctx.collector() as collector:
        for step in ctx.steps(case.num_steps):
            work.step = step
            x, y = next(batches)                          # the data phase: before the step, as a loader's wait
            with collector.step():
                work.do("before_forward")
                if work.recompiles():                     # another batch size: the shared model recompiles here
                    rows = max(1, 16 - step)
                    x, y = x[:rows], y[:rows]
                t0 = time.perf_counter_ns()
                out = model(x)
                calls[step] = time.perf_counter_ns() - t0
                torch.nn.functional.mse_loss(out, y).backward()
                if case.mode == "explicit":
                    grads = [p.grad for p in net.parameters()]
                    half = len(grads) // 2
                    arrive(0)
                    _all_reduce(grads[:half], dist)
                    work.do("between_collectives")
                    arrive(1)
                    _all_reduce(grads[half:], dist)
                work.do("optimizer")
                opt.step()
                opt.zero_grad(set_to_none=True)
    if recompiling:
        work.record_recompiles(calls)
    ctx.note("arrivals", {k: v[0] for k, v in arrivals.items()})
    ctx.save(finished=True)
    work.close()


def _arrival_hook(arrive: Any) -> Any:
    """A DDP communication hook that notes the rank's arrival (its own clock) and then all-reduces as DDP does."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    import torch
    import torch.distributed as dist

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the real annotations, set below
        arrive()
        return allreduce_hook(state, bucket)

    hook.__annotations__ = {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
    return hook


def _delaying_backend(work: _Work) -> Any:
    """``aot_eager`` whose forward compiler first waits ``work.delay_s`` (then disarms it): the same backend on every
    rank; only a rank with a recompile plant due arms it."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_compiler

    def forward_compiler(gm: Any, _inputs: Any) -> Any:
        if work.delay_s > 0:
            time.sleep(work.delay_s)
            work.delay_s = 0.0
        return gm

    def backward_compiler(gm: Any, _inputs: Any) -> Any:
        return gm

    return aot_autograd(fw_compiler=make_boxed_compiler(forward_compiler),
                        bw_compiler=make_boxed_compiler(backward_compiler))


def _all_reduce(grads: list[Any], dist: Any) -> None:
    import torch

    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


def _make_probe() -> Any:
    import torch

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h: Any, work: Any) -> Any:
            ctx.work = work
            return h.view_as(h)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            ctx.work.do("backward")
            return g, None

    return Probe


class _LazyProbe:
    """``_Probe.apply``: the autograd function is made on first use (importing this module needs no torch)."""

    _fn: Any = None

    def apply(self, h: Any, work: Any) -> Any:
        if _LazyProbe._fn is None:
            _LazyProbe._fn = _make_probe()
        return _LazyProbe._fn.apply(h, work)


_Probe = _LazyProbe()


@dataclass
class _Work:
    """This rank's planted work: ``do(phase)`` runs it when a plant of this rank is due in this step and phase,
    timed as ``inject:<phase>``."""

    ctx: FaultContext
    plants: list[Plant]
    step: int = -1
    heap: list[Any] = field(default_factory=list)
    delay_s: float = 0.0            # the backend's forward-compile delay, armed by a recompile plant
    file: Any = None

    def do(self, phase: str) -> None:
        for p in self.plants:
            if p.phase == phase and p.kind != RECOMPILE_PLANT and self.step in p.steps:
                with self.ctx.timed(f"inject:{phase}"):
                    getattr(self, f"_{p.kind}")(p.size_ms / 1e3)

    # ---- the kinds: each runs until its size has passed (the rank's own timer measures what it took)
    def _sleep(self, s: float) -> None:
        import time

        time.sleep(s)

    def _cpu(self, s: float) -> None:
        import time

        import torch

        a = torch.randn(256, 256)      # ~1 ms an op: a profiler window's trace of it stays small
        b = torch.randn(256, 256) / 16
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            a = torch.tanh(a @ b)

    def _gc(self, s: float) -> None:
        import gc
        import time

        if not self.heap:
            self.heap = [[i, [i]] for i in range(20_000)]       # a heap the collector walks every time
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            gc.collect()

    def _file_write(self, s: float) -> None:
        import os
        import time

        if self.file is None:
            self.file = open(self.ctx.out / "fault" / f"write-rank{self.ctx.rank}.bin", "wb")  # noqa: SIM115
        chunk = os.urandom(1 << 20)
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            self.file.write(chunk)
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.seek(0)

    def _recompile(self, s: float) -> None:
        """Nothing here: a recompile plant is the model's own recompile (:meth:`recompiles`, :func:`main`)."""

    def recompiles(self) -> bool:
        """Whether this rank's model recompiles in this step (a recompile plant is due): arms the backend's delay."""
        due = [p for p in self.plants if p.kind == RECOMPILE_PLANT and self.step in p.steps]
        self.delay_s = sum(p.size_ms for p in due) / 1e3
        return bool(due)

    def record_recompiles(self, calls: dict[int, int]) -> None:
        """The recompile plants' truth (:func:`main`): each planted step's model call less the median of this
        rank's unplanted calls after the first step."""
        planted = {s for p in self.plants if p.kind == RECOMPILE_PLANT for s in p.steps}
        if not planted:
            return
        steady = sorted(ns for s, ns in calls.items() if s > 0 and s not in planted)
        base = steady[len(steady) // 2] if steady else 0
        per = self.ctx.record.timed.setdefault("inject:forward", {})
        for s in sorted(planted & set(calls)):
            per[s] = per.get(s, 0) + max(0, calls[s] - base)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


# ---------------------------------------------------------------------------------------------- ground truth
def _interval(case: Case, phase: str, step: int) -> tuple[int, int]:
    """The collective a phase's work delays, as (step, slot): the optimizer's delays the next step's first."""
    if phase == "optimizer":
        return step + 1, 0
    if phase == "between_collectives":
        return step, 1
    return step, 0


def layered_truth(case: Case, measured: dict[int, dict[str, dict[int, int]]]) -> dict[int, dict[int, int]]:
    """Per culprit and step: the layered counterfactual of the measured planted work (module docstring).
    ``measured``: rank → ``inject:<phase>`` → step → ns."""
    work: dict[tuple[int, int], dict[int, dict[int, int]]] = {}      # interval -> rank -> step -> ns
    for rank, sections in measured.items():
        for name, per_step in sections.items():
            if not name.startswith("inject:"):
                continue
            phase = name.split(":", 1)[1]
            for step, ns in per_step.items():
                iv = _interval(case, phase, int(step))
                work.setdefault(iv, {}).setdefault(rank, {})
                work[iv][rank][int(step)] = work[iv][rank].get(int(step), 0) + int(ns)
    out: dict[int, dict[int, int]] = {}
    for _, ranks in work.items():
        totals = sorted(((sum(v.values()), r) for r, v in ranks.items()), reverse=True)
        for i, (tot, r) in enumerate(totals):
            below = totals[i + 1][0] if i + 1 < len(totals) else 0
            charge = tot - below
            if charge <= 0 or tot <= 0:
                continue
            for step, ns in ranks[r].items():          # split over the steps its work ran in, by their share
                out.setdefault(r, {})[step] = out.get(r, {}).get(step, 0) + int(round(charge * ns / tot))
    return out


def _plant_arrivals(case: Case, arrivals: dict[int, dict[str, int]]):
    """Each plant and planted step with every rank's arrival at the collective its work delays (``arrivals``: rank ->
    ``"step:slot"`` -> ns); steps without every rank's arrival left out."""
    for p in case.plants:
        for st in p.steps:
            step, slot = _interval(case, p.phase, st)
            at = {r: a.get(f"{step}:{slot}") for r, a in arrivals.items()}
            if len(at) == case.world and all(v is not None for v in at.values()):
                yield p, st, (step, slot), at


def held_back(case: Case, arrivals: dict[int, dict[str, int]]) -> dict[int, dict[int, int]]:
    """Per culprit and step of its planted work: how long it actually held the others back at the collective that
    work delays, from every rank's own arrival there (``perf_counter_ns``, one clock on one host): its arrival less
    the arrival just before it (0 when it was first), the layered counterfactual of the arrivals themselves (a
    later rank's own lateness is that rank's layer, as the critical path splits it). Where the other ranks were
    slow too in that step, this is less than the planted work. ``arrivals``: rank -> ``"step:slot"`` -> ns; steps
    without every rank's arrival left out, and so is the collective DDP's second step starts with (its bucket
    rebuild broadcasts, which the arrival hook on the all-reduce does not see): there the planted truth stands in.
    Which of these steps a later, unplanted rank masked: :func:`masked_steps`."""
    out: dict[int, dict[int, int]] = {}
    for p, st, (step, slot), at in _plant_arrivals(case, arrivals):
        if case.mode == "ddp" and (step, slot) == (1, 0) and p.phase in ("data", "before_forward", "optimizer"):
            continue   # DDP's second forward first rebuilds its buckets with broadcasts the hook does not see
        before = [v for r, v in at.items() if r != p.rank and v <= at[p.rank]]
        out.setdefault(p.rank, {})[st] = at[p.rank] - max(before) if before else 0
    return out


def next_arrival_gaps(case: Case, arrivals: dict[int, dict[str, int]]) -> dict[int, dict[int, int]]:
    """Per culprit and planted step: how long after it the next rank arrived at the collective its work delays
    (only where one arrived after it). Two ranks arriving within the run's noise of each other cannot be told
    apart by order: which of them the others waited for is not something the run can show."""
    out: dict[int, dict[int, int]] = {}
    for p, st, _, at in _plant_arrivals(case, arrivals):
        after = [v - at[p.rank] for r, v in at.items() if r != p.rank and v > at[p.rank]]
        if after:
            out.setdefault(p.rank, {})[st] = min(after)
    return out


def masked_steps(case: Case, arrivals: dict[int, dict[str, int]]) -> dict[int, list[int]]:
    """Per culprit, the planted steps where a rank with no plant in that step arrived after it at the collective its
    work delays (a profiler export, a crowded CPU): the others waited for that rank anyway, so the plant need not
    be named there; where it is, its hold (:func:`held_back`) counts in its cost."""
    out: dict[int, list[int]] = {}
    for p, st, _, at in _plant_arrivals(case, arrivals):
        planted = {q.rank for q in case.plants if st in q.steps}
        if any(v > at[p.rank] for r, v in at.items() if r not in planted):
            out.setdefault(p.rank, []).append(st)
    return {r: sorted(set(v)) for r, v in out.items()}


def unplanted_holds(case: Case, arrivals: dict[int, dict[str, int]],
                    measured: dict[int, dict[str, dict[int, int]]]) -> dict[int, dict[int, int]]:
    """Per rank and step: how long its own clock says it held the others back at that step's collectives beyond its
    planted work that delays them (the most over the step's collectives; only where positive). Where this reaches
    the run's noise the rank really was late there without a plant (a busy machine, the collector's own work): the
    analysis may name that step. ``measured``: rank -> ``inject:<phase>`` -> step -> ns (its own timers)."""
    planted: dict[tuple[int, str], int] = {}
    for r, sections in measured.items():
        for name, per_step in sections.items():
            for st, ns in per_step.items():
                step, slot = _interval(case, name.split(":", 1)[1], int(st))
                planted[(r, f"{step}:{slot}")] = planted.get((r, f"{step}:{slot}"), 0) + int(ns)
    out: dict[int, dict[int, int]] = {}
    keys = set.intersection(*(set(a) for a in arrivals.values())) if arrivals else set()
    for key in keys:
        at = {r: a[key] for r, a in arrivals.items()}
        if len(at) < case.world:
            continue
        step = int(key.split(":")[0])
        for r, t in at.items():
            before = [v for q, v in at.items() if q != r and v <= t]
            extra = (t - max(before) if before else 0) - planted.get((r, key), 0)
            if extra > 0:
                out.setdefault(r, {})[step] = max(out.get(r, {}).get(step, 0), extra)
    return out


def ground_truth(records: dict[int, RankRecord], fault: Fault) -> dict[str, Any]:
    """The case's truth from the ranks' own timers (module docstring), plus the healthy ranks' step-time excess
    (the zoo's default measure) for comparison."""
    from workbench_zoo.truth import excess, truth

    case = Case.from_dict(json.loads(fault.notes)) if fault.notes else None
    measured = {r: {k: v for k, v in rec.timed.items() if k.startswith("inject:")} for r, rec in records.items()}
    by = layered_truth(case, measured) if case is not None else {}
    arrivals = {r: rec.notes.get("arrivals") or {} for r, rec in records.items()}
    held = held_back(case, arrivals) if case else {}
    masked = masked_steps(case, arrivals) if case else {}
    gaps = next_arrival_gaps(case, arrivals) if case else {}
    unplanted = unplanted_holds(case, arrivals, measured) if case else {}
    per = {r: sum(v.values()) for r, v in by.items()}
    healthy = [r for r in records if r not in fault.ranks]
    step_excess = excess(records, healthy, list(fault.steps)) if fault.steps else {}
    out = truth(fault, per, "layered counterfactual of the culprits' own timed planted work (per interval between "
                            "collectives)", agg="max")
    out.update({"control": case.control if case else None, "case": case.to_dict() if case else None,
                "truth_by_rank_step_ns": {str(r): {str(s): v for s, v in d.items()} for r, d in by.items()},
                "held_by_rank_step_ns": {str(r): {str(s): v for s, v in d.items()} for r, d in held.items()},
                "masked_steps_by_rank": {str(r): v for r, v in masked.items()},
                "next_arrival_gap_by_rank_step_ns": {str(r): {str(s): v for s, v in d.items()}
                                                     for r, d in gaps.items()},
                "unplanted_hold_by_rank_step_ns": {str(r): {str(s): v for s, v in d.items()}
                                                   for r, d in unplanted.items()},
                "cost_by_rank_ns": {str(r): v for r, v in per.items()},
                "healthy_step_excess_ns": {str(r): v for r, v in step_excess.items()}})
    return out


def truth_for(out: str | Path) -> dict[str, Any]:
    """Recompute ``ground_truth.json`` of a recorded case from its ranks' saved measurements."""
    from workbench_zoo.runner import write_ground_truth

    return write_ground_truth(GENERATED, out)


__all__ = ["Case", "KINDS", "PHASES", "Plant", "ground_truth", "layered_truth", "main", "plan", "run_case",
           "truth_for", "culprit_kinds", "held_back", "masked_steps", "next_arrival_gaps", "score", "unplanted_holds"]


# ---------------------------------------------------------------------------------------------- scoring
def culprit_kinds() -> tuple[Any, ...]:
    """Kinds that name a late rank: the straggler and the compile kinds a one-rank compile is reported as."""
    from workbench.analyses.kinds import Kind

    return (Kind.STRAGGLER, Kind.DIVERGENT_RECOMPILE, Kind.COMPILE_SKEW)
#: A planted step must be found when both its truth and its planted size are at least this many times the run's
#: noise bar (``late_ranks.CLEAR_NOISE``: a rank is named only where it held the others back by that much); a
#: planted step below it may be, and a culprit with no such step is undetectable. The planted size counts too: a
#: plant sized within the noise that ran longer than its size did so because the machine was slow then (one fsync
#: of the shared disk, a late wake-up on a crowded CPU), which slows the other ranks as well. (A recompile plant's
#: size is only the delay added to the compile: its truth alone counts.)
MUST_NOISE = 2.0


@dataclass
class CulpritScore:
    """How the analyses' roots name one planted culprit."""

    rank: int
    truth_ns: int
    truth_steps: dict[int, int]
    must: list[int]
    may: list[int]
    found: bool = False
    found_steps: list[int] = field(default_factory=list)
    clear_steps: list[int] = field(default_factory=list)
    cost_ns: int | None = None
    kinds: list[str] = field(default_factory=list)
    reason: str | None = None
    held_ns: int | None = None     # how long it held the others back in its planted steps, by the ranks' own clocks

    @property
    def detectable(self) -> bool:
        return bool(self.must)

    @property
    def steps_ok(self) -> bool:
        """Every step it clearly cost (truth ≥ twice the noise) is among the finding's steps (lateness above the
        noise), and every step the finding clearly names (lateness ≥ twice the noise) was planted: a step within a
        noise unit of the bar may go either way."""
        return set(self.must) <= set(self.found_steps) and set(self.clear_steps) <= set(self.must) | set(self.may)

    @property
    def right(self) -> bool:
        return self.found and self.steps_ok

    @property
    def cost_error(self) -> float | None:
        """The cost against what the culprit cost the others as their own clocks measured it (``held_ns``, every
        rank's arrival at each collective); against the planted counterfactual (``truth_ns``) where no arrivals
        were recorded. The counterfactual assumes every other rank was on time: on a busy host another rank is
        sometimes late too, and the others then wait for the culprit only beyond that rank."""
        want = self.held_ns if self.held_ns else self.truth_ns
        if self.cost_ns is None or not want:
            return None
        return abs(self.cost_ns - want) / want


@dataclass
class CaseScore:
    """One case scored: its culprits, the roots that name other ranks, and its medium/high roots (controls)."""

    seed: int
    control: bool
    world: int
    describe: str
    noise_ns: int | None
    culprits: list[CulpritScore]
    false_culprits: list[dict[str, Any]]        # culprit-kind roots blaming a rank nothing was planted on
    loud_roots: list[dict[str, Any]]            # medium/high roots of any kind but the run's transfer time
    transfer_roots: list[dict[str, Any]] = field(default_factory=list)   # medium/high exposed communication
    host_late: list[dict[str, Any]] = field(default_factory=list)   # unplanted ranks the ranks' clocks show late
    seconds: float = 0.0
    error: str | None = None

    @property
    def right(self) -> bool:
        """Every detectable culprit named with its steps, and no other rank named at medium/high severity."""
        loud_false = [f for f in self.false_culprits if f["severity"] in ("high", "medium")]
        return self.error is None and all(c.right for c in self.culprits if c.detectable) and not loud_false

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["right"] = self.right
        for c, cs in zip(d["culprits"], self.culprits):
            c.update(right=cs.right, steps_ok=cs.steps_ok, cost_error=cs.cost_error, detectable=cs.detectable)
        return d


def case_steps(case: Case, rank: int) -> list[int]:
    """Every step a plant of ``rank`` ran in."""
    return sorted({s for p in case.plants if p.rank == rank for s in p.steps})


def _per_step(f: Any) -> dict[int, int]:
    """A root's time per step: a straggler's per-step lateness, else its cost on each of its steps."""
    by = getattr(f.evidence, "lateness_by_step", None)
    if by:
        return {int(s): int(v) for s, v in by.items()}
    return {int(s): f.cost_ns for s in f.steps}


def _share(rank: int, f: Any, by: dict[int, dict[int, int]]) -> float:
    """``rank``'s part of finding ``f``'s cost: all of it when ``f`` names it alone, else its planted truth in
    ``f``'s steps over that of every rank ``f`` names (equal parts when none is known)."""
    ranks = list(f.blamed_ranks)
    if len(ranks) == 1:
        return 1.0
    t = {q: sum(by.get(int(q), {}).get(int(s), 0) for s in f.steps) for q in ranks}
    total = sum(t.values())
    return t[rank] / total if total > 0 else 1.0 / len(ranks)


def score(case: Case, truth: dict[str, Any], roots: list[Any], noise_ns: int | None = None) -> CaseScore:
    """Score the analyses' ``roots`` of a recorded ``case`` against its ``truth`` (:func:`ground_truth`).
    ``noise_ns``: the run's noise bar as the engine measured it from the run itself
    (``workbench.analyses.late_ranks.noise_bar`` of its critical path); a planted step whose truth is below
    :data:`MUST_NOISE` times it cannot be told from the run's own spread (a step the analysis may leave out, a
    culprit with no such step undetectable). Without it, the smallest noise a straggler root reports."""
    by = {int(r): {int(s): int(v) for s, v in d.items()} for r, d in (truth.get("truth_by_rank_step_ns") or {}).items()}
    from workbench.analyses.kinds import Kind

    noise = noise_ns
    for f in roots if noise is None else ():
        n = getattr(f.evidence, "noise_ns", None)
        if f.kind == Kind.STRAGGLER and n:
            noise = int(n) if noise is None else min(noise, int(n))
    hold = {int(r): {int(s): int(v) for s, v in d.items()}
            for r, d in (truth.get("held_by_rank_step_ns") or {}).items()}
    unplanted = {int(r): {int(s): int(v) for s, v in d.items()}
                 for r, d in (truth.get("unplanted_hold_by_rank_step_ns") or {}).items()}
    masked = {int(r): {int(s) for s in v} for r, v in (truth.get("masked_steps_by_rank") or {}).items()}
    gap = {int(r): {int(s): int(v) for s, v in d.items()}
           for r, d in (truth.get("next_arrival_gap_by_rank_step_ns") or {}).items()}
    culprit_roots = [f for f in roots if f.kind in culprit_kinds() and f.severity != "info"]   # not a zero-cost note
    out = []
    for r in case.culprits:
        steps = by.get(r, {})
        thr = MUST_NOISE * (noise or 0)
        size = {s: sum(math.inf if p.kind == RECOMPILE_PLANT else p.size_ms     # a recompile's own time is the plant
                       for p in case.plants if p.rank == r and s in p.steps) * 1e6 for s in steps}
        held = hold.get(r, {})
        # may, not must: where a later, unplanted rank held the others anyway, and at the collective that closes
        # the warm-up (step 1's first: its interval holds step 0's tail, the optimizer's first step building its
        # state, a backward compiled late, which the engine leaves to the compile findings)
        # ... and where another rank arrived after it within the noise (their order is noise)
        hidden = masked.get(r, set()) | {s for p in case.plants if p.rank == r for s in p.steps
                                         if _interval(case, p.phase, s) == (1, 0)} | {
            s for s, v in gap.get(r, {}).items() if noise and v < noise}
        must = sorted(s for s, v in steps.items()     # never the first step: its compiles, never judged
                      if s > 0 and v > 0 and s not in hidden and min(v, size.get(s, 0), held.get(s, v)) >= thr)
        # late there without a plant (its own clock): the step of that collective, or the one before (work after
        # the previous step's last collective delays it)
        real = {x for s, v in unplanted.get(r, {}).items() if noise and v >= noise for x in (s, s - 1)}
        may = sorted((set(case_steps(case, r)) | real) - set(must))
        cs = CulpritScore(r, sum(steps.values()), steps, must, may)
        # a finding naming this rank alone, or with other planted culprits only (two ranks recompiling the same
        # frame in the same steps are one divergent recompile of both)
        mine = [f for f in culprit_roots if r in f.blamed_ranks and set(f.blamed_ranks) <= set(case.culprits)]
        if mine:
            cs.found = True
            cs.found_steps = sorted({int(s) for f in mine for s in f.steps})    # above the run's noise
            cs.clear_steps = sorted({int(s) for f in mine for s, v in _per_step(f).items() if v >= thr})
            # every second once: the frames of one step's divergent recompile share its wait (recompiles.py); a
            # finding of several culprits is shared by their planted truth in its steps
            cs.cost_ns = sum(round(int(f.cost_ns) * _share(r, f, by)) for f in mine)
            cs.kinds = sorted({f.kind.value for f in mine})
            cs.reason = next((getattr(f.evidence, "reason", None) for f in mine if f.kind == Kind.STRAGGLER), None)
        if held:   # the planted truth where no arrivals; a step never judged (the first) or hidden counts where
            # the finding names it
            cs.held_ns = sum(held.get(s, v) for s, v in steps.items()
                             if (s > 0 and s not in hidden) or s in cs.found_steps)
            # ... and so does a collective no plant delays where the rank's own clock shows it late by the noise or
            # more and the finding names its step (or the one before): what the clocks show it cost there
            delayed = {_interval(case, p.phase, s)[0] for p in case.plants if p.rank == r for s in p.steps}
            cs.held_ns += sum(v for s, v in unplanted.get(r, {}).items()
                              if s > 0 and s not in delayed and noise and v >= noise
                              and {s, s - 1} & set(cs.found_steps))
        out.append(cs)
    planted = set(case.culprits)

    def confirmed(f: Any) -> bool:
        """A rank named late in steps where the ranks' own clocks show it held the others back beyond its planted
        work by the noise bar or more (the host made it late there): true, though nothing was planted."""
        ranks = set(getattr(f, "blamed_ranks", f.ranks))
        real = {x for r in ranks for s, v in unplanted.get(r, {}).items() if noise and v >= noise for x in (s, s - 1)}
        return bool(f.steps) and f.kind in culprit_kinds() and set(int(s) for s in f.steps) <= real

    host_late = [{"kind": f.kind.value, "ranks": list(f.blamed_ranks), "steps": list(f.steps), "severity": f.severity,
                  "cost_ns": f.cost_ns} for f in culprit_roots if not set(f.blamed_ranks) <= planted and confirmed(f)]
    false = [{"kind": f.kind.value, "ranks": list(f.blamed_ranks), "steps": list(f.steps), "severity": f.severity,
              "cost_ns": f.cost_ns} for f in culprit_roots if not set(f.blamed_ranks) <= planted and not confirmed(f)]
    # a control must have no medium/high root; its exposed communication (transfer time after the last arrival,
    # waits removed) is the workload's own and is reported apart: on these tiny CPU models it can be a large share;
    # so is a rank the ranks' own clocks show late (the host's doing, not a plant)
    loud_roots = [f for f in roots if f.severity in ("high", "medium") and not confirmed(f)]
    loud = [{"kind": f.kind.value, "ranks": list(f.ranks), "severity": f.severity, "cost_ns": f.cost_ns}
            for f in loud_roots]
    transfer = [x for x in loud if x["kind"] == Kind.EXPOSED_COMMUNICATION.value]
    loud = [x for x in loud if x["kind"] != Kind.EXPOSED_COMMUNICATION.value]
    return CaseScore(case.seed, case.control, case.world, case.describe(), noise, out, false, loud, transfer,
                     host_late)
