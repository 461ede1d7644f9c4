"""Launch-bound small kernels (GPU): a deep, narrow MLP on a small batch. Every kernel runs a few microseconds,
so the GPU spends most of each step waiting for the host to launch the next one.

Fix: replay the step's kernels as CUDA graphs (``[compile] mode = "reduce-overhead"``, applied to the user's own
``torch.compile`` by the collector), or fewer, larger kernels (bigger batches, fused optimizers).
"""

from __future__ import annotations

import time
from statistics import median

import torch

from workbench.faults.registry import Fault, FaultContext
from workbench.faults.truth import WARMUP_STEPS, truth

FAULT = Fault(
    name="launch_bound",
    description="a 32-layer 64-wide MLP on 16 rows: microsecond kernels, the GPU waits for launches",
    finding="launch_bound", ranks=(0,), steps=(), world_size=1, fix="config", device="cuda", num_steps=16,
)
LAYERS, WIDTH, ROWS = 32, 64, 16


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 1))


def main(ctx: FaultContext) -> None:
    dev = torch.device(ctx.device)
    model = build().to(dev)
    collector = ctx.collector(profile_start=6, profile_length=4)
    compiled = torch.compile(model)                          # the user's own call (inductor, default mode)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=True)
    x, y = torch.randn(ROWS, WIDTH, device=dev), torch.randn(ROWS, 1, device=dev)
    with collector:
        for step in ctx.steps():
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()                     # the step's own wall time, GPU included
    ctx.note("graph_step_ns", _graph_step_ns(model, x, y, opt))
    ctx.save()


def _graph_step_ns(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, opt: torch.optim.Optimizer) -> int:
    """The same step with the forward/backward replayed as CUDA graphs: the step without launch gaps (the
    script's own reference for what the launches cost)."""
    graphed = torch.compile(model, mode="reduce-overhead")
    times = []
    for i in range(12):
        t0 = time.perf_counter_ns()
        torch.nn.functional.mse_loss(graphed(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 4:
            times.append(time.perf_counter_ns() - t0)
    return int(median(times))


def ground_truth(records, fault):
    rec = records.get(0)
    ref = rec.notes.get("graph_step_ns") if rec else None
    if rec is None or ref is None:
        return truth(fault, {}, "not measured (the run did not finish)")
    by_step = {s: max(0, v - ref) for s, v in rec.step_ns.items() if s >= WARMUP_STEPS + 2}
    med = int(median(by_step.values()))
    return truth(fault, {0: int(sum(by_step.values()))},
                 "step wall time over the same step replayed as CUDA graphs (the launch gaps), summed",
                 agg="max", by_step={0: by_step}, launch_cost_per_step_ns=med, graph_step_ns=ref,
                 step_median_ns=int(median(v for s, v in rec.step_ns.items() if s >= WARMUP_STEPS + 2)))
