"""Pipeline bubble: a 2-stage GPipe pipeline with only 2 micro-batches per step. Each stage idles while the
other fills or drains the pipeline: the bubble is (p-1)/(m+p-1) = 1/3 of the step in theory.

Fix (code): more micro-batches per step (m=8: 1/9), or an interleaved / 1F1B schedule with more micro-batches.
"""

from __future__ import annotations

import functools

import torch
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import WARMUP_STEPS, fix_line, truth

MICROBATCHES = 2                 # fix here: more micro-batches per step
#: Rows per micro-batch: enough compute that the bubble (a third of the step) stands well above the per-step
#: overhead of the schedule, the optimizer and the profiler.
ROWS = 512
FAULT = Fault(
    name="pipeline_bubble",
    description="GPipe, 2 stages, 2 micro-batches: a third of every step is pipeline bubble",
    finding="pipeline_bubble", ranks=(0, 1), steps=(), world_size=2, fix="code", num_steps=6,
)


def main(ctx: FaultContext) -> None:
    torch.manual_seed(ctx.rank)
    layers: list[torch.nn.Module] = [torch.nn.Linear(16, 256)] if ctx.rank == 0 else []
    for _ in range(8):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    if ctx.rank == 1:
        layers.append(torch.nn.Linear(256, 1))
    module = torch.nn.Sequential(*layers)
    collector = ctx.collector()
    stage = PipelineStage(module, ctx.rank, ctx.world_size, torch.device("cpu"))
    for name, prefix in (("forward_one_chunk", "forward_mb"), ("backward_one_chunk", "backward_mb")):
        fn = getattr(stage, name)

        @functools.wraps(fn)
        def timed(i, *a, _fn=fn, _prefix=prefix, **kw):  # compute of one micro-batch (the rank's own timer)
            with ctx.timed("compute"), collector.range(f"{_prefix}{i}"):
                return _fn(i, *a, **kw)

        setattr(stage, name, timed)
    schedule = ScheduleGPipe(stage, MICROBATCHES, loss_fn=lambda out, y: torch.nn.functional.mse_loss(out, y))
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    with collector:
        for step in ctx.steps():
            gen = torch.Generator().manual_seed(step)
            x, y = torch.randn(MICROBATCHES * ROWS, 16, generator=gen), torch.randn(MICROBATCHES * ROWS, 1, generator=gen)
            with collector.step():
                if ctx.rank == 0:
                    schedule.step(x)
                else:
                    schedule.step(target=y, losses=[])
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    per, pct, by_step = {}, {}, {}
    for r, rec in records.items():
        comp = rec.timed.get("compute", {})
        by_step[r] = {s: max(0, rec.step_ns[s] - comp.get(s, 0)) for s in rec.step_ns if s >= WARMUP_STEPS}
        idle = list(by_step[r].values())
        per[r] = int(sum(idle))
        total = sum(v for s, v in rec.step_ns.items() if s >= WARMUP_STEPS)
        pct[str(r)] = round(100.0 * sum(idle) / max(1, total), 1)
    return truth(fault, per, "each stage's step time outside its own micro-batch compute, summed over steps 1..N",
                 agg="max", by_step=by_step, bubble_pct=pct, theoretical_pct=round(100.0 / (MICROBATCHES + 1), 1),
                 line=fix_line(__file__))
