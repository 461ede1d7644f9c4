"""Extra collective: rank 1 alone all-reduces a metric at step 4 (a logging call under ``if rank == 1``).

Its extra ``all_reduce`` of 1 float pairs with the other ranks' gradient all-reduce of step 5; gloo aborts the
rank that receives more bytes than it expects. Found as ``desync`` naming rank 1, step 4, the extra call's line,
and the group / sequence id the other ranks were in. Fix: the code line (run the collective on every rank, or none).
The loop is the one the three planted-collective faults share (:func:`workbench_zoo.faults._hang_common.train`).
"""

from __future__ import annotations

from workbench_zoo.faults._hang_common import PG_TIMEOUT_S, failure_truth, train  # noqa: F401
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_extra_collective",
    description="rank 1 alone calls one extra all_reduce at step 4; the group desyncs and gloo aborts",
    finding="desync", ranks=(1,), steps=(4,), world_size=3, fix="code", num_steps=8, timeout_s=90,
)


def main(ctx: FaultContext) -> None:
    train(ctx, "extra")


def ground_truth(records, fault):
    return failure_truth(records, fault)
