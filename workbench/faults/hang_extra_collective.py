"""Extra collective: rank 1 alone all-reduces a metric at step 4 (a logging call under ``if rank == 1``).

Its extra ``all_reduce`` of 1 float pairs with the other ranks' gradient all-reduce of step 5; gloo aborts the
rank that receives more bytes than it expects. Found as ``desync`` naming rank 1, step 4, the extra call's line,
and the group / sequence id the other ranks were in. Fix: the code line (run the collective on every rank, or none).
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

from workbench.faults._hang_common import PG_TIMEOUT_S, Counter, failure_truth, flat_grads  # noqa: F401
from workbench.faults.common import batch, tiny_mlp
from workbench.faults.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_extra_collective",
    description="rank 1 alone calls one extra all_reduce at step 4; the group desyncs and gloo aborts",
    finding="desync", ranks=(1,), steps=(4,), world_size=3, fix="code", num_steps=8, timeout_s=90,
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
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                with ctx.timed("allreduce"):
                    flat = flat_grads(model)
                    dist.all_reduce(comm.count(flat))
                if ctx.planted and step in FAULT.steps:
                    comm.plant("extra all_reduce", inspect.currentframe().f_lineno + 1)
                    dist.all_reduce(comm.count(loss.detach().reshape(1)))          # the planted extra collective
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    return failure_truth(records, fault)
