"""Graph break in the hot loop: a data-dependent ``if`` in ``forward`` splits the compiled graph in two on every
call (Dynamo cannot trace a branch on a tensor's value).

Fix (code): ``torch.where`` (both branches are cheap) or ``torch.cond`` — at the line of the ``if``.
"""

from __future__ import annotations

import torch

from workbench.faults.common import batch
from workbench.faults.registry import Fault, FaultContext
from workbench.faults.truth import truth


class Gated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        if h.mean() > 0.1:                  # the graph break: a branch on a tensor's value
            h = h * 2
        return self.b(h)


FAULT = Fault(
    name="graph_break_branch",
    description="a data-dependent if in forward breaks the graph on every step",
    finding="graph_break", ranks=(0,), steps=(), world_size=1, fix="code", num_steps=5,
)


def main(ctx: FaultContext) -> None:
    from workbench.faults.common import all_reduce_grads

    model = Gated()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            x, y = batch(16, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    return truth(fault, {}, "no time measured: a graph break is found by its location, not its cost",
                 line=f"{__file__}:{_IF_LINE}")


_IF_LINE = next(i for i, line in enumerate(open(__file__), 1) if "the graph break:" in line)
