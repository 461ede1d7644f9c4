"""Graph break in the hot loop: ``.item()`` inside the compiled ``forward`` (a Python float from a tensor).

Fix: keep the value a tensor (code, at its line), or capture scalars in the graph
(``[dynamo] capture_scalar_outputs = true``).
The loop is the one the three graph-break faults share (:mod:`workbench_zoo.faults._graph_break`).
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._graph_break import break_truth, train
from workbench_zoo.registry import Fault, FaultContext


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
    train(ctx, Scaled())


def ground_truth(records, fault):
    return break_truth(fault, __file__)
