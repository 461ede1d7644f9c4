"""Rank killed mid-step: rank 2 is SIGKILL-ed at step 5 after its backward, before the gradient all-reduce (an OOM
kill or a preempted node looks the same).

The other ranks block in that all-reduce until gloo sees the closed connection. Found as ``rank_died`` naming
rank 2, gone in step 5 after step 4 (its ``steps.jsonl``; no exit record), and the collective the others waited in.
The loop is the one the three planted-collective faults share (:func:`workbench_zoo.faults._hang_common.train`).
"""

from __future__ import annotations

from workbench_zoo.faults._hang_common import PG_TIMEOUT_S, failure_truth, train  # noqa: F401
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_rank_killed",
    description="rank 2 is killed (SIGKILL) in step 5, before the gradient all_reduce",
    finding="rank_died", ranks=(2,), steps=(5,), world_size=3, fix="none", num_steps=8, timeout_s=90,
)


def main(ctx: FaultContext) -> None:
    train(ctx, "kill")


def ground_truth(records, fault):
    return failure_truth(records, fault)
