"""An unfused optimizer: ``AdamW(foreach=False)`` launches one small kernel per op per parameter (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_unfused_optimizer", "AdamW(foreach=False): one small kernel per op per parameter outside the compiled model", "unfused_optimizer", "code")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "unfused_optimizer")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "unfused_optimizer")
