"""Recompile-limit fallback: ``torch.compile(model, dynamic=False)`` fed 10 sequence lengths. Every length
compiles a new graph until ``recompile_limit`` (8) is hit; from then on the frame silently runs eagerly.

Fix: one dynamic graph for the length dim (``torch.compiler.config.dynamic_sources``): at most 2 compiles,
not a raised limit (which would compile all 10).
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._common import SeqModel, all_reduce_grads
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import truth, typical

FAULT = Fault(
    name="recompile_limit",
    description="dynamic=False with 10 sequence lengths: 8 compiles, then the frame falls back to eager",
    finding="recompile_limit", ranks=(0,), steps=(8,), world_size=1, fix="config",
    num_steps=14,
)
COMPILE_STEPS = range(1, 9)               # the recompiles (1-7) and the one that hits the limit (8)
LENGTHS = [8 + 2 * i for i in range(10)]  # steps 0-9: a new length each (1-7 recompile, 8 hits the limit, 9 runs
#                                           eager); steps 10-13 repeat lengths that have a graph


def main(ctx: FaultContext) -> None:
    model = SeqModel()
    compiled = torch.compile(model, backend="aot_eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            seq = LENGTHS[step % len(LENGTHS)] if step < len(LENGTHS) else LENGTHS[step % 4]
            x, y = torch.randn(8, seq, 32, generator=gen), torch.randn(8, 1, generator=gen)
            with collector.step():
                with ctx.timed("forward"):
                    out = compiled(x)
                torch.nn.functional.mse_loss(out, y).backward()
                all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    """Per rank: the forward time of steps 1-8 (the recompiles up to the limit) over the forward of the steps that
    reuse a graph. The planted step is 8, where the frame falls back to eager."""
    per = {}
    for r, rec in records.items():
        fwd = rec.timed.get("forward", {})
        base = typical({s: v for s, v in fwd.items() if s >= len(LENGTHS)}, set())
        if base is not None:
            per[r] = int(sum(max(0.0, fwd[s] - base) for s in COMPILE_STEPS if s in fwd))
    return truth(fault, per, "forward time of the steps with a new length over the median forward of the steps "
                             "that reuse a length (the compile time the recompiles cost)")
