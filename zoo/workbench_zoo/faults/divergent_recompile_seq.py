"""Divergent recompile (sequence dim): rank 1 alone gets longer sequences at step 5 (an unbucketed batch of
long documents), so only rank 1 recompiles while the others wait in the gradient all-reduce.

Fix: mark the sequence dim dynamic up front (``torch.compiler.config.dynamic_sources``), or pad sequences to a
few bucket lengths.
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._common import SeqModel, all_reduce_grads
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import excess, truth

FAULT = Fault(
    name="divergent_recompile_seq",
    description="rank 1 alone gets longer sequences at step 5 and recompiles; the others wait in the all-reduce",
    finding="divergent_recompile", ranks=(1,), steps=(5,), world_size=2, fix="config", num_steps=9,
)
SEQ, LONG_SEQ = 16, 40


def main(ctx: FaultContext) -> None:
    model = SeqModel()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            seq = LONG_SEQ if (ctx.planted and step in FAULT.steps) else SEQ
            x, y = torch.randn(8, seq, 32, generator=gen), torch.randn(8, 1, generator=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                with ctx.timed("allreduce"):
                    all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    healthy = [r for r in records if r not in fault.ranks]
    per = excess(records, healthy, list(fault.steps), section="allreduce")
    return truth(fault, per, "the longest healthy-rank all-reduce time in the planted step over its median "
                             "all-reduce", agg="max")
