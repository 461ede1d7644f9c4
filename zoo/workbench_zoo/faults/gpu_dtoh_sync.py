"""A device-to-host copy and sync: the predictions copied with ``.cpu()`` every step. GPU: the loop, the model and the
ground truth are :mod:`workbench_zoo.faults._gpu_idle`'s."""

from __future__ import annotations

from workbench_zoo.faults import _gpu_idle
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="gpu_dtoh_sync",
    description="the step's predictions copied to the host with .cpu() for a metric: a device-to-host copy and a sync",
    finding="host_sync", ranks=(0,), steps=(17, 18, 19, 20), world_size=1, fix="code", device="cuda",
    num_steps=24, timeout_s=420.0,
)


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "dtoh_sync")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "dtoh_sync")
