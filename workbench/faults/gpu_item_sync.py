"""Host-device syncs: every parameter's gradient norm logged with ``.item()`` after backward (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_item_sync", "every parameter's gradient norm logged with .item() after backward: a host-device sync per parameter", "host_sync", "code")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "item_sync")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "item_sync")
