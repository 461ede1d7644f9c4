"""CPU data loading: a ``DataLoader`` with no workers builds each batch on the CPU between steps (GPU; the loop, the model and the ground truth are in :mod:`workbench.faults._gpu_idle`)."""

from __future__ import annotations

from workbench.faults import _gpu_idle
from workbench.faults.registry import FaultContext

FAULT = _gpu_idle.fault("gpu_cpu_dataload", "batches built on the CPU by a DataLoader without workers, between steps", "data_loading", "code")


def main(ctx: FaultContext) -> None:
    _gpu_idle.train(ctx, "cpu_dataload")


def ground_truth(records, fault):
    return _gpu_idle.ground_truth(records, fault, "cpu_dataload")
