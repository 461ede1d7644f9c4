"""Graph break in the hot loop: a ``print`` inside the compiled ``forward`` (debug output left in).

Fix: guard it with ``if not torch.compiler.is_compiling():`` at its line, or let Dynamo reorder ``print`` of
plain strings out of the graph (``[dynamo] reorderable_logging_functions``).
"""

from __future__ import annotations

import torch

from workbench.faults.common import all_reduce_grads, batch
from workbench.faults.registry import Fault, FaultContext
from workbench.faults.truth import truth


class Chatty(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(32, 32), torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        print("forward: hidden ready")      # the graph break: print inside compiled code
        return self.b(h)


FAULT = Fault(
    name="graph_break_print",
    description="a print in the compiled forward breaks the graph on every step",
    finding="graph_break", ranks=(0,), steps=(), world_size=1, fix="code", num_steps=5,
)


def main(ctx: FaultContext) -> None:
    model = Chatty()
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
