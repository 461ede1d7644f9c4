"""Straggler: rank 2's data loading is slow on every step (a slow disk, a busy host, too few loader workers),
so the other ranks wait for it in every gradient all-reduce.

Fix (code): more DataLoader workers / prefetching on that rank, or find what makes its host slower.
"""

from __future__ import annotations

import time
from statistics import median

import torch

from workbench_zoo.faults._common import all_reduce_grads, batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import WARMUP_STEPS, fix_line, truth

FAULT = Fault(
    name="straggler_data",
    description="rank 2 loads each batch 60 ms slower; the others wait for it in every all-reduce",
    finding="straggler", ranks=(2,), steps=(), world_size=3, fix="code", num_steps=10,
)
DELAY_S = 0.06


def loader(ctx: FaultContext, gen: torch.Generator):
    """A stand-in data loader; the straggling rank's 'disk' is slow."""
    while True:
        if ctx.planted:
            time.sleep(DELAY_S)
        yield batch(16, gen=gen)


def main(ctx: FaultContext) -> None:
    model = tiny_mlp()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = loader(ctx, torch.Generator().manual_seed(ctx.rank))
    with ctx.collector() as collector:
        for step in ctx.steps():
            x, y = next(data)             # fix here: the data wait (outside the step), slow on rank 2
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                with ctx.timed("allreduce"):
                    all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    """Per healthy rank and step: its all-reduce time minus the straggler's (who arrives last, so waits least)."""
    slow = records.get(fault.ranks[0])
    per, per_step = {}, {}
    if slow is not None:
        ref = slow.timed.get("allreduce", {})
        for r, rec in records.items():
            if r in fault.ranks:
                continue
            ar = rec.timed.get("allreduce", {})
            waits = [max(0, ar[s] - ref[s]) for s in ar if s >= WARMUP_STEPS and s in ref]
            per[r] = int(sum(waits))
            per_step[str(r)] = int(median(waits)) if waits else None
    return truth(fault, per, "healthy ranks' all-reduce time minus the straggler's, summed over steps 1..N",
                 steps_measured=fault.num_steps - WARMUP_STEPS, wait_per_step_ns=per_step,
                 delay_per_step_ns=int(DELAY_S * 1e9), line=fix_line(__file__))
