"""A collective inside a compiled region on one rank only: the compiled step all-reduces its activations, and on
rank 1 a rank-dependent branch adds a second functional all-reduce, so the graphs the ranks compile differ.

The compile logs show it before anything hangs (``compiled_desync``: graph [0/0] issues 2 all_reduce on rank 1,
1 on rank 0, with the line); at run time the extra collective desyncs the group (``desync``).
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from workbench_zoo.faults._hang_common import PG_TIMEOUT_S, Counter, failure_truth, flat_grads  # noqa: F401
from workbench_zoo.faults._common import batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_compiled_collective",
    description="rank 1's compiled step issues one more functional all_reduce than rank 0's",
    finding="desync", ranks=(1,), steps=(0,), world_size=2, fix="code", num_steps=4, timeout_s=90,
)
EXTRA_LINE = 0


def main(ctx: FaultContext) -> None:
    model = tiny_mlp(width=16, inp=8)
    rank = ctx.rank
    global EXTRA_LINE

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = funcol.all_reduce(model(x), "sum", dist.group.WORLD)
        if rank == 1:
            h = funcol.all_reduce(h * 0.5, "sum", dist.group.WORLD)   # the planted rank-dependent collective
        return h

    EXTRA_LINE = inspect.getsourcelines(forward)[1] + 3
    compiled = torch.compile(forward, backend="aot_eager")
    gen = torch.Generator().manual_seed(ctx.rank)
    comm = Counter(ctx)
    collector = ctx.collector(profile_repeat=0)
    with collector:
        for step in ctx.steps():
            if ctx.planted and step in FAULT.steps:
                comm.plant("extra compiled all_reduce", EXTRA_LINE)
            x, y = batch(8, inp=8, gen=gen)
            with collector.step():
                with ctx.timed("allreduce"):
                    loss = torch.nn.functional.mse_loss(compiled(x), y)
                loss.backward()
                dist.all_reduce(comm.count(flat_grads(model)))


def ground_truth(records, fault):
    return failure_truth(records, fault)
