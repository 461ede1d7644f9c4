"""An eager frame: a data-dependent branch in ``forward``'s loop makes Dynamo skip the frame (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_eager_frame", "a data-dependent branch inside forward's loop over the layers: Dynamo skips the frame, forward runs eagerly", "skipped_frame", "code")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "eager_frame")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "eager_frame")
