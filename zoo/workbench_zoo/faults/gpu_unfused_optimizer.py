"""An unfused optimizer: ``AdamW(foreach=False)`` launches one small kernel per op per parameter. GPU: the loop, the
model and the ground truth are :mod:`workbench_zoo.faults._gpu_idle`'s."""

from __future__ import annotations

from workbench_zoo.faults import _gpu_idle
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="gpu_unfused_optimizer",
    description="AdamW(foreach=False): one small kernel per op per parameter outside the compiled model",
    finding="unfused_optimizer", ranks=(0,), steps=(17, 18, 19, 20), world_size=1, fix="code", device="cuda",
    num_steps=24, timeout_s=420.0,
)


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "unfused_optimizer")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "unfused_optimizer")
