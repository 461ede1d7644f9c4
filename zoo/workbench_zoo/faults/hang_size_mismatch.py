"""Size mismatch: at step 3 rank 2's gradient buffer has one element more (a rank-local extra parameter).

Every rank calls the same ``all_reduce`` line; the sizes differ, and gloo aborts the rank that receives a message
of the wrong size. Found as ``desync`` naming rank 2, step 3, the collective (group and sequence id) and its line.
Fix: the code (the same shapes on every rank).
The loop is the one the three planted-collective faults share (:func:`workbench_zoo.faults._hang_common.train`).
"""

from __future__ import annotations

from workbench_zoo.faults._hang_common import PG_TIMEOUT_S, failure_truth, train  # noqa: F401
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_size_mismatch",
    description="rank 2's all_reduce at step 3 has one element more than the other ranks'",
    finding="desync", ranks=(2,), steps=(3,), world_size=3, fix="code", num_steps=6, timeout_s=90,
)


def main(ctx: FaultContext) -> None:
    train(ctx, "size")


def ground_truth(records, fault):
    return failure_truth(records, fault)
