"""A clean control: nothing planted, the small model's own launch-bound nature. GPU: the loop, the model and the ground
truth are :mod:`workbench_zoo.faults._gpu_idle`'s."""

from __future__ import annotations

from workbench_zoo.faults import _gpu_idle
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="gpu_clean",
    description="nothing planted: a small compiled transformer, partly launch-bound by nature",
    finding="launch_bound", ranks=(0,), steps=(17, 18, 19, 20), world_size=1, fix="none", device="cuda",
    num_steps=24, timeout_s=420.0,
)


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "clean")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "clean")
