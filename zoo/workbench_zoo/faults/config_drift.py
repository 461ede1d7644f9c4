"""Config drift across ranks: rank 1 runs with a different inductor setting in its environment
(``TORCHINDUCTOR_FX_GRAPH_CACHE=0``), so its compile config differs from the other ranks'. Ranks that compile
under different settings can compile different graphs and collective schedules.

Fix (code / launch): export the same ``TORCH*`` variables and apply one compile config on every rank.
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._common import all_reduce_grads, batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import truth

FAULT = Fault(
    name="config_drift",
    description="rank 1 alone has TORCHINDUCTOR_FX_GRAPH_CACHE=0 in its environment: its compile config differs",
    finding="divergent_config", ranks=(1,), steps=(), world_size=3, fix="code", num_steps=4,
    rank_env={1: {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}},
)


def main(ctx: FaultContext) -> None:
    model = tiny_mlp()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    ctx.note("fx_graph_cache", bool(torch._inductor.config.fx_graph_cache))
    with ctx.collector() as collector:
        for step in ctx.steps():
            x, y = batch(16, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    seen = {r: rec.notes.get("fx_graph_cache") for r, rec in records.items()}
    # no line of the script sets it: the fix is in how the ranks are launched (FAULT.rank_env)
    return truth(fault, {}, "no time cost: a configuration difference (a risk)", fx_graph_cache_by_rank=seen,
                 line=None, fix_where="launch environment")
