"""Graph break in the hot loop: ``.item()`` inside the compiled ``forward`` (a Python float from a tensor).

Fix: keep the value a tensor (code, at its line), or capture scalars in the graph
(``[dynamo] capture_scalar_outputs = true``).
"""

from __future__ import annotations

import torch

from workbench.faults.common import all_reduce_grads, batch
from workbench.faults.registry import Fault, FaultContext
from workbench.faults.truth import truth


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        scale = h.std().item()              # the graph break: .item() inside compiled code
        return self.b(h / (scale + 1.0))


FAULT = Fault(
    name="graph_break_item",
    description=".item() in the compiled forward breaks the graph on every step",
    finding="graph_break", ranks=(0,), steps=(), world_size=1, fix="code", num_steps=5,
)


def main(ctx: FaultContext) -> None:
    model = Scaled()
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
                 line=f"{__file__}:{_LINE}")


_LINE = next(i for i, line in enumerate(open(__file__), 1) if "the graph break:" in line)
