"""Divergent recompile (batch dim): rank 1 alone gets a smaller batch at step 5, so only rank 1 recompiles
while the other ranks wait for it in the gradient all-reduce.

Typical cause: the last, uneven batch of an epoch on one rank (no ``drop_last``). Fix: mark the batch dim
dynamic up front (``torch.compiler.config.dynamic_sources``), so every rank compiles one dynamic graph at the start.
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._common import all_reduce_grads, batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import excess, truth

FAULT = Fault(
    name="divergent_recompile_batch",
    description="rank 1 alone gets a smaller batch at step 5 and recompiles; the others wait in the all-reduce",
    finding="divergent_recompile", ranks=(1,), steps=(5,), world_size=3, fix="config", num_steps=9,
)
ODD_BATCH, BATCH = 6, 16


def main(ctx: FaultContext) -> None:
    model = tiny_mlp()
    compiled = torch.compile(model, backend="aot_eager")          # the user's own torch.compile
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    collector = ctx.collector()
    with collector:
        for step in ctx.steps():
            odd = ctx.planted and step in FAULT.steps
            x, y = batch(ODD_BATCH if odd else BATCH, gen=gen)
            with collector.step():
                loss = torch.nn.functional.mse_loss(compiled(x), y)
                loss.backward()
                with ctx.timed("allreduce"):                        # the healthy ranks block here
                    all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    healthy = [r for r in records if r not in fault.ranks]
    per = excess(records, healthy, list(fault.steps), section="allreduce")
    return truth(fault, per, "the longest healthy-rank all-reduce time in the planted step over its median "
                             "all-reduce", agg="max")
