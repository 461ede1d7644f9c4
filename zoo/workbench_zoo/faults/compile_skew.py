"""Compile skew at start: rank 1's first compile takes seconds longer than the others' (a cold compile
cache, a slower host), so every other rank waits for it in the first all-reduce.

Here rank 1's compiler is simply slower: a compiler that spends 1.5 s more on each of its
forward and backward graphs (``aot_eager`` otherwise) — a slower host, not a cold cache: its compile log shows
no cache miss the other rank does not have (``aot_eager`` uses no compile cache at all).

Fix (code / ops): find what makes that rank's host or compiler slower, at the ``torch.compile`` line. A warm
compile cache (``[cache]``, a shared cache directory) would not remove it, so the recommender does not write it:
it writes the cache only when the slow rank missed the caches where the others hit them.
"""

from __future__ import annotations

import time

import torch

from workbench_zoo.faults._common import all_reduce_grads, batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import excess, fix_line, truth

FAULT = Fault(
    name="compile_skew",
    description="rank 1's compiler is 1.5 s slower per graph; the others wait for it in step 0's all-reduce",
    finding="compile_skew", ranks=(1,), steps=(0,), world_size=2, fix="code", num_steps=8,
)
EXTRA_S = 1.5                # per graph: the forward and the backward graph each


def backend(delay_s: float):
    """``aot_eager``'s path (aot_autograd, graphs run as traced) behind a compiler that is ``delay_s`` slower on
    this rank (a stand-in for a cold cache or a slower host)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_compiler

    def compile_graph(gm, _inputs):
        time.sleep(delay_s)
        return gm

    return aot_autograd(fw_compiler=make_boxed_compiler(compile_graph))


def main(ctx: FaultContext) -> None:
    model = tiny_mlp()
    compiled = torch.compile(model, backend=backend(EXTRA_S if ctx.planted else 0.0))   # fix here: slower on rank 1
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            x, y = batch(16, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                with ctx.timed("allreduce"):
                    all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    healthy = [r for r in records if r not in fault.ranks]
    # step 0 is the planted step: compare its all-reduce with the median of steps 1.. (WARMUP_STEPS = 1)
    per = excess(records, healthy, [0], section="allreduce")
    return truth(fault, per, "the healthy ranks' step-0 all-reduce time over their median all-reduce", agg="max",
                 line=fix_line(__file__))
