"""Rank killed mid-step: rank 2 is SIGKILL-ed at step 5 after its backward, before the gradient all-reduce (an OOM
kill or a preempted node looks the same).

The other ranks block in that all-reduce until gloo sees the closed connection. Found as ``rank_died`` naming
rank 2, gone in step 5 after step 4 (its ``steps.jsonl``; no exit record), and the collective the others waited in.
"""

from __future__ import annotations

import inspect
import os
import signal

import torch
import torch.distributed as dist

from workbench.faults._hang_common import PG_TIMEOUT_S, Counter, failure_truth, flat_grads  # noqa: F401
from workbench.faults.common import batch, tiny_mlp
from workbench.faults.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_rank_killed",
    description="rank 2 is killed (SIGKILL) in step 5, before the gradient all_reduce",
    finding="rank_died", ranks=(2,), steps=(5,), world_size=3, fix="none", num_steps=8, timeout_s=90,
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
                if ctx.planted and step in FAULT.steps:
                    comm.plant("SIGKILL", inspect.currentframe().f_lineno + 1)
                    os.kill(os.getpid(), signal.SIGKILL)               # the planted kill
                with ctx.timed("allreduce"):
                    dist.all_reduce(comm.count(flat_grads(model)))
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    return failure_truth(records, fault)
