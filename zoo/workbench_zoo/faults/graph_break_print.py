"""Graph break in the hot loop: a ``print`` inside the compiled ``forward`` (debug output left in).

Fix: guard it with ``if not torch.compiler.is_compiling():`` at its line, or let Dynamo reorder ``print`` of
plain strings out of the graph (``[dynamo] reorderable_logging_functions``).
The loop is the one the three graph-break faults share (:mod:`workbench_zoo.faults._graph_break`).
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._graph_break import break_truth, train
from workbench_zoo.registry import Fault, FaultContext


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
    train(ctx, Chatty())


def ground_truth(records, fault):
    return break_truth(fault, __file__)
