"""CPU data loading: a ``DataLoader`` with no workers builds each batch on the CPU between steps. GPU: the loop, the
model and the ground truth are :mod:`workbench_zoo.faults._gpu_idle`'s."""

from __future__ import annotations

from workbench_zoo.faults import _gpu_idle
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="gpu_cpu_dataload",
    description="batches built on the CPU by a DataLoader without workers, between steps",
    finding="data_loading", ranks=(0,), steps=(17, 18, 19, 20), world_size=1, fix="code", device="cuda",
    num_steps=24, timeout_s=420.0,
)


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "cpu_dataload")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "cpu_dataload")
