"""Size mismatch: at step 3 rank 2's gradient buffer has one element more (a rank-local extra parameter).

Every rank calls the same ``all_reduce`` line; the sizes differ, and gloo aborts the rank that receives a message
of the wrong size. Found as ``desync`` naming rank 2, step 3, the collective (group and sequence id) and its line.
Fix: the code (the same shapes on every rank).
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

from workbench.faults._hang_common import PG_TIMEOUT_S, Counter, failure_truth, flat_grads  # noqa: F401
from workbench.faults.common import batch, tiny_mlp
from workbench.faults.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_size_mismatch",
    description="rank 2's all_reduce at step 3 has one element more than the other ranks'",
    finding="desync", ranks=(2,), steps=(3,), world_size=3, fix="code", num_steps=6, timeout_s=90,
)


def main(ctx: FaultContext) -> None:
    model = tiny_mlp(width=16, inp=8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    comm = Counter(ctx)
    collector = ctx.collector(profile_repeat=0)
    with collector:
        for step in ctx.steps():
            x, y = batch(8, inp=8, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(model(x), y).backward()
                flat = flat_grads(model)
                if ctx.planted and step in FAULT.steps:
                    flat = torch.cat([flat, torch.zeros(1)])           # the planted size mismatch
                    comm.plant("size mismatch", inspect.currentframe().f_lineno + 2, numel=flat.numel())
                with ctx.timed("allreduce"):
                    dist.all_reduce(comm.count(flat))
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    return failure_truth(records, fault)
