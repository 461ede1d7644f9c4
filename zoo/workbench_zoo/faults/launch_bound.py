"""Launch-bound small kernels (GPU): a deep, narrow MLP on a small batch, trained by one compiled step (forward,
backward and the SGD update in one ``torch.compile``'d function). Every kernel runs a few microseconds, so in the
default mode the GPU spends most of each step waiting for the host to launch the next one.

Fix: replay the step's kernels as a CUDA graph (``[compile] mode = "reduce-overhead"``, applied to the user's own
``torch.compile`` by the collector). A graph covers only what the compiled function holds, so the whole step is in
it: the backward is traced (``trace_autograd_ops``), the update is a ``torch._foreach_add_`` rather than
``optimizer.step()`` (whose graph breaks would split the step into several graphs with host work between them), and
the batch keeps one address (``mark_static_address``) so the graph reads it without a copy in front of it.

Ground truth: the step's own time (the user's step body, synchronised) less the same step replayed as a CUDA graph
(measured after the run, without the collector), per step: the launch gaps a graph removes.
"""

from __future__ import annotations

import time
from statistics import median

import torch

from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import WARMUP_STEPS, truth

FAULT = Fault(
    name="launch_bound",
    description="a 16-layer 64-wide MLP on 16 rows, one compiled train step: microsecond kernels, the GPU waits "
                "for launches",
    finding="launch_bound", ranks=(0,), steps=(), world_size=1, fix="config", device="cuda", num_steps=16,
)
LAYERS, WIDTH, ROWS, LR = 16, 64, 16, 1e-4
#: Steps the truth skips: the compile (0) and, under CUDA graphs, their warm-up and recording (1, 2).
SETTLE_STEPS = WARMUP_STEPS + 2


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def make_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    """The user's train step: forward, backward and the SGD update, to be compiled as one function."""
    params = list(model.parameters())

    def train_step() -> None:
        torch.nn.functional.mse_loss(model(x), y).backward()
        with torch.no_grad():
            torch._foreach_add_(params, [p.grad for p in params], alpha=-LR)
        for p in params:
            p.grad = None

    return train_step


def main(ctx: FaultContext) -> None:
    torch._dynamo.config.trace_autograd_ops = True          # loss.backward() inside the compiled step
    dev = torch.device(ctx.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = build().to(dev)
    x, y = torch.randn(ROWS, WIDTH, device=dev), torch.randn(ROWS, 1, device=dev)
    for t in (x, y):
        torch._dynamo.mark_static_address(t)                 # the batch stays at one address
    collector = ctx.collector(profile_start=6, profile_length=4)
    step = torch.compile(make_step(model, x, y))              # the user's own call (inductor, default mode)
    with collector:
        for _ in ctx.steps():
            with collector.step():
                with ctx.timed("step"):                       # the user's step body, GPU included
                    step()
                    sync()
    ctx.note("graph_step_ns", _graph_step_ns(make_step(model, x, y), sync))
    ctx.save()


def _graph_step_ns(train_step, sync) -> int:
    """The same step replayed as a CUDA graph (``mode="reduce-overhead"``, compiled after the collector closed):
    the step without launch gaps, timed like the run's steps."""
    graphed = torch.compile(train_step, mode="reduce-overhead")
    times = []
    for i in range(12):
        t0 = time.perf_counter_ns()
        graphed()
        sync()
        if i >= 4:
            times.append(time.perf_counter_ns() - t0)
    return int(median(times))


def ground_truth(records, fault):
    rec = records.get(0)
    ref = rec.notes.get("graph_step_ns") if rec else None
    body = rec.timed.get("step", {}) if rec else {}
    if rec is None or ref is None or not body:
        return truth(fault, {}, "not measured (the run did not finish)")
    by_step = {s: max(0, v - ref) for s, v in body.items() if s >= SETTLE_STEPS}
    return truth(fault, {0: int(sum(by_step.values()))},
                 "the step body's wall time (synchronised) less the same step replayed as a CUDA graph: the launch "
                 "gaps a graph removes, summed over the steps",
                 agg="max", by_step={0: by_step}, launch_cost_per_step_ns=int(median(by_step.values())),
                 graph_step_ns=ref, step_median_ns=int(median(v for s, v in body.items() if s >= SETTLE_STEPS)))
