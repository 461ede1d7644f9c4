"""A clean control: nothing planted, the small model's own launch-bound nature (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_clean", "nothing planted: a small compiled transformer, partly launch-bound by nature", "launch_bound", "none")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "clean")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "clean")
