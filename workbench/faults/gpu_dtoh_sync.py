"""A device-to-host copy and sync: the predictions copied with ``.cpu()`` every step (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_dtoh_sync", "the step's predictions copied to the host with .cpu() for a metric: a device-to-host copy and a sync", "host_sync", "code")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "dtoh_sync")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "dtoh_sync")
