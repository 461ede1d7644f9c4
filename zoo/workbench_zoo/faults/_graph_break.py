"""The loop the three ``graph_break_*`` faults share: one process trains the fault's model, compiled with
``aot_eager``, with SGD on random batches; the model's ``forward`` holds the planted graph break (a line marked
``the graph break:``), which is the ground truth's ``line``. A graph break costs no measured time here: it is found
by its location."""

from __future__ import annotations

from typing import Any

import torch

from workbench_zoo.faults._common import all_reduce_grads, batch
from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import truth

#: The comment on the line of a model's ``forward`` that breaks the graph.
BREAK_MARK = "the graph break:"


def train(ctx: FaultContext, model: torch.nn.Module) -> None:
    """Train ``model`` (compiled) for the fault's steps, recording with the collector."""
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=True)   # no second, unplanted per-parameter fault
    gen = torch.Generator().manual_seed(ctx.rank)
    with ctx.collector() as collector:
        for step in ctx.steps():
            x, y = batch(16, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                all_reduce_grads(model)
                opt.step()
                opt.zero_grad(set_to_none=True)


def break_truth(fault: Fault, script: str) -> dict[str, Any]:
    """The ground truth of a graph-break fault: no time measured, the ``file:line`` of the break in ``script``."""
    with open(script) as fh:
        line = next(i for i, text in enumerate(fh, 1) if BREAK_MARK in text)
    return truth(fault, {}, "no time measured: a graph break is found by its location, not its cost",
                 line=f"{script}:{line}")
