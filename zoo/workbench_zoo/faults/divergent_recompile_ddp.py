"""Divergent recompile under DDP: ``DDP(torch.compile(model))``; rank 1 alone gets a smaller batch at step 5,
recompiles, and the other ranks wait for it inside backward (DDP's gradient all-reduce).

Fix: mark the batch dim dynamic up front (``torch.compiler.config.dynamic_sources``), or ``drop_last=True``.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench_zoo.faults._common import batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="divergent_recompile_ddp",
    description="DDP(torch.compile(model)): rank 1 alone gets a smaller batch at step 5; the others stall in backward",
    finding="divergent_recompile", ranks=(1,), steps=(5,), world_size=2, fix="config", num_steps=9,
)


def main(ctx: FaultContext) -> None:
    model = DDP(torch.compile(tiny_mlp(), backend="aot_eager"))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():                       # the ground truth: the healthy ranks' step-time excess
            x, y = batch(6 if (ctx.planted and step in FAULT.steps) else 16, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
