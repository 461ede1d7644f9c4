"""Exposed communication: the gradients are all-reduced in one blocking call after ``backward`` finished, so no
communication overlaps compute and every step waits for the whole all-reduce.

Fix (code): let DDP overlap the all-reduce with backward (``DDP(model, bucket_cap_mb=25)``), or launch it with
``async_op=True`` per layer as its gradients are ready and wait before ``optimizer.step()``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import WARMUP_STEPS, fix_line, truth

FAULT = Fault(
    name="exposed_comm",
    description="a blocking all-reduce of 4M gradients after backward: communication never overlaps compute",
    finding="exposed_communication", ranks=(0, 1), steps=(), world_size=2, fix="code", num_steps=12,
)


def main(ctx: FaultContext) -> None:
    torch.manual_seed(0)
    width = 1024
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width))
    # eager: the fault is the communication alone (a first compile on a busy machine can take seconds longer on
    # one rank than on the other, a second, unplanted fault of its own: compile_skew)
    compiled = model
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(ctx.rank)
    # a window of six steps: the exposed time it sums stays large against the one-step lateness a busy machine's
    # scheduler gives a rank now and then (a real straggler of that run, but not this fault)
    with ctx.collector(profile_length=6) as collector:
        for step in ctx.steps():
            x = torch.randn(2, width, generator=gen)   # little compute: the all-reduce is most of the step
            with collector.step():
                compiled(x).square().mean().backward()
                flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
                with ctx.timed("allreduce"):
                    dist.all_reduce(flat)         # fix here: nothing left to overlap with, fully exposed
                torch.nn.utils.vector_to_parameters(flat / ctx.world_size, [p.grad for p in model.parameters()])
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    """The transfer time of the blocking dist.all_reduce per step, summed over steps 1..N: the shortest of the
    ranks' own times in the call, which is the time after the last rank arrived (a rank that arrived early also
    waited for the late one; that wait is not communication but the late rank's cost)."""
    timed = {r: rec.timed.get("allreduce", {}) for r, rec in records.items()}
    steps = sorted(set.intersection(*(set(t) for t in timed.values()))) if timed else []
    transfer = {s: min(t[s] for t in timed.values()) for s in steps if s >= WARMUP_STEPS}
    by_step = {r: dict(transfer) for r in records}
    # how long the others waited for the rank that arrived last, by their own clocks (a busy host's lateness, not
    # this fault): the most any one rank cost the others over steps 1..N
    hold: dict[int, int] = {}
    for s in steps:
        if s < WARMUP_STEPS:
            continue
        last = min(timed, key=lambda r: timed[r][s])      # the shortest time in the call: the last to arrive
        hold[last] = hold.get(last, 0) + max(timed[q][s] for q in timed) - timed[last][s]
    share = {}
    for r, rec in records.items():
        total = sum(v for s, v in rec.step_ns.items() if s >= WARMUP_STEPS)
        share[str(r)] = round(100.0 * sum(by_step[r].values()) / max(1, total), 1)
    return truth(fault, {r: int(sum(d.values())) for r, d in by_step.items()},
                 "the blocking dist.all_reduce's transfer time (the shortest rank's time in it) per step, summed "
                 "over steps 1..N", agg="max",
                 by_step=by_step, exposed_pct_of_step=share, line=fix_line(__file__),
                 unplanted_hold_ns=max(hold.values()) if hold else 0)
