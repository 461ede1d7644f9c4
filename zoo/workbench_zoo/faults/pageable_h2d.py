"""Pageable host→device copies (GPU): every step copies a 128 MiB batch from ordinary (pageable) host memory. The
copy is staged through a bounce buffer and blocks the stream, so the GPU sits in the copy instead of computing.

Fix (code): ``DataLoader(..., pin_memory=True)`` (or ``tensor.pin_memory()``) and ``.to(device, non_blocking=True)``
at the copy's line, so the copy runs at full bandwidth and overlaps compute.
"""

from __future__ import annotations

import torch

from workbench_zoo.registry import Fault, FaultContext
from workbench_zoo.truth import WARMUP_STEPS, fix_line, truth

FAULT = Fault(
    name="pageable_h2d",
    description="a 128 MiB pageable host->device copy every step: the GPU waits in the copy",
    finding="exposed_memcpy", ranks=(0,), steps=(), world_size=1, fix="code", device="cuda", num_steps=12,
)
ROWS, WIDTH = 32768, 1024              # 32768 x 1024 float32 = 128 MiB


def main(ctx: FaultContext) -> None:
    dev = torch.device(ctx.device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1)).to(dev)
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    host = [torch.randn(ROWS, WIDTH) for _ in range(2)]     # pageable: no pin_memory()
    collector = ctx.collector(profile_start=4, profile_length=4)
    with collector:
        for step in ctx.steps():
            with collector.step():
                with ctx.timed("h2d"):
                    x = host[step % 2].to(dev)               # fix here: the pageable copy
                    torch.cuda.synchronize()
                compiled(x).square().mean().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()


def ground_truth(records, fault):
    rec = records.get(0)
    h2d = {s: v for s, v in (rec.timed.get("h2d", {}) if rec else {}).items() if s >= WARMUP_STEPS}
    return truth(fault, {0: int(sum(h2d.values()))}, "the copy's own time (synchronised), summed over steps 1..N",
                 agg="max", by_step={0: h2d}, line=fix_line(__file__))
