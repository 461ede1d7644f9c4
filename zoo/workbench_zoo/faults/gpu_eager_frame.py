"""An eager frame: a data-dependent branch in ``forward``'s loop makes Dynamo skip the frame. GPU: the loop, the model
and the ground truth are :mod:`workbench_zoo.faults._gpu_idle`'s."""

from __future__ import annotations

from workbench_zoo.faults import _gpu_idle
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="gpu_eager_frame",
    description="a data-dependent branch inside forward's loop over the layers: Dynamo skips the frame, forward runs "
                "eagerly",
    finding="skipped_frame", ranks=(0,), steps=(17, 18, 19, 20), world_size=1, fix="code", device="cuda",
    num_steps=24, timeout_s=420.0,
)


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "eager_frame")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "eager_frame")
