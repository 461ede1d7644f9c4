"""Graph break in the hot loop: a data-dependent ``if`` in ``forward`` splits the compiled graph in two on every
call (Dynamo cannot trace a branch on a tensor's value).

Fix (code): ``torch.where`` (both branches are cheap) or ``torch.cond`` — at the line of the ``if``.
The loop is the one the three graph-break faults share (:mod:`workbench_zoo.faults._graph_break`).
"""

from __future__ import annotations

import torch

from workbench_zoo.faults._graph_break import break_truth, train
from workbench_zoo.registry import Fault, FaultContext


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
    train(ctx, Gated())


def ground_truth(records, fault):
    return break_truth(fault, __file__)
