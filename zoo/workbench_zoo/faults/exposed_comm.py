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
    finding="exposed_communication", ranks=(0, 1), steps=(), world_size=2, fix="code", num_steps=8,
)


def main(ctx: FaultContext) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1024))
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            x = torch.randn(32, 1024, generator=gen)
            with collector.step():
                compiled(x).square().mean().backward()
                flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
                with ctx.timed("allreduce"):
                    dist.all_reduce(flat)         # fix here: nothing left to overlap with, fully exposed
                torch.nn.utils.vector_to_parameters(flat / ctx.world_size, [p.grad for p in model.parameters()])
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    """Each rank's own time in the blocking dist.all_reduce per step (communication time not overlapped with
    compute, waits for a late peer included, as HTA counts it), summed over steps 1..N."""
    by_step = {r: {s: v for s, v in rec.timed.get("allreduce", {}).items() if s >= WARMUP_STEPS}
               for r, rec in records.items()}
    share = {}
    for r, rec in records.items():
        total = sum(v for s, v in rec.step_ns.items() if s >= WARMUP_STEPS)
        share[str(r)] = round(100.0 * sum(by_step[r].values()) / max(1, total), 1)
    return truth(fault, {r: int(sum(d.values())) for r, d in by_step.items()},
                 "each rank's own time in the blocking dist.all_reduce, summed over steps 1..N", agg="max",
                 by_step=by_step, exposed_pct_of_step=share, line=fix_line(__file__))
