"""Shared pieces of the ``hang_*`` faults: a numbered all-reduce, the ground truth of a job that failed, and the
loop of the three that plant one thing into plain data-parallel training (:func:`train`).

Each hang fault counts the collectives it issues on the default group itself (``Counter``), so its ground truth
names the sequence id (1-based, as the Flight Recorder numbers them) and the file:line of the planted call without
reading anything the workbench wrote.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
from typing import Any, Literal

import torch
import torch.distributed as dist

from workbench_zoo.faults._common import batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext, RankRecord

#: The process-group timeout of the faults that fail fast by themselves (an abort, a closed connection): long, so a
#: slow start on a loaded machine never times out first. The timeout fault sets its own short one.
PG_TIMEOUT_S = 60


class Counter:
    """Counts this rank's collectives on the default group; ``plant()`` notes the one that is the fault."""

    def __init__(self, ctx: FaultContext) -> None:
        self.ctx = ctx
        self.seq = 0

    def count(self, t: torch.Tensor) -> torch.Tensor:
        """``dist.all_reduce(comm.count(t))``: counts the call, which stays on the fault's own line."""
        self.seq += 1
        return t

    def plant(self, what: str, line: int, **extra: Any) -> None:
        """Record (before it runs) that the next collective / event at ``line`` of the caller is the fault."""
        caller = sys._getframe(1).f_code.co_filename
        self.ctx.note("planted", {"what": what, "step": self.ctx.step, "seq": next_seq(self.seq),
                                  "call_site": f"{caller}:{line}", **extra})
        self.ctx.save()


def next_seq(counted: int) -> int:
    """The sequence id the default group's next collective gets (torch's own counter, which also counts calls
    the Flight Recorder does not list, such as ``monitored_barrier``), else this script's count + 1."""
    try:
        return int(dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()) + 1
    except Exception:
        return counted + 1


def settle(timeout_s: float = 300.0) -> None:
    """Wait for every rank (``monitored_barrier`` with its own long timeout): after a warm-up compile, so a slow
    first compile on a loaded machine never trips the short timeout of the fault."""
    import datetime

    dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s))


def flat_grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


def failure_truth(records: dict[int, RankRecord], fault: Fault, section: str = "allreduce") -> dict[str, Any]:
    """Ground truth of a job that failed: the planted rank, step, collective (from the planted rank's own note) and
    the cost — the healthy ranks' time in ``section`` in the step they were in when the job failed (their last
    timed step), measured by their own timers."""
    planted = next((rec.notes.get("planted") for r, rec in records.items() if r in fault.ranks
                    and rec.notes.get("planted")), None) or {}
    per = {}
    for r, rec in records.items():
        if r in fault.ranks:
            continue
        timed = rec.timed.get(section, {})
        if timed:
            last = max(timed)
            per[r] = timed[last]
    cost = int(sum(per.values()) / len(per)) if per else None
    return {"fault": fault.name, "finding": fault.finding, "ranks": list(fault.ranks), "steps": list(fault.steps),
            "collective": planted, "cost_ns": cost, "cost_per_rank_ns": {str(k): v for k, v in per.items()},
            "cost_method": f"healthy ranks' time in '{section}' in the step they failed in (their own timers)"}


def train(ctx: FaultContext, plant: Literal["extra", "size", "kill"]) -> None:
    """Data-parallel training of a tiny MLP (SGD, one gradient all-reduce per step); in the fault's steps its ranks
    plant ``plant``: ``"kill"`` — the rank is killed (SIGKILL) after backward, before the all-reduce; ``"size"`` —
    its gradient buffer has one element more; ``"extra"`` — it all-reduces its loss once more after the gradients."""
    model = tiny_mlp(width=16, inp=8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    comm = Counter(ctx)
    collector = ctx.collector(profile_repeat=0)
    with collector:
        for step in ctx.steps():
            planted = ctx.planted and step in ctx.fault.steps
            x, y = batch(8, inp=8, gen=gen)
            with collector.step():
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                if planted and plant == "kill":
                    comm.plant("SIGKILL", inspect.currentframe().f_lineno + 1)
                    os.kill(os.getpid(), signal.SIGKILL)                       # the planted kill
                flat = flat_grads(model)
                if planted and plant == "size":
                    flat = torch.cat([flat, torch.zeros(1)])                   # the planted size mismatch
                    comm.plant("size mismatch", inspect.currentframe().f_lineno + 2, numel=flat.numel())
                with ctx.timed("allreduce"):
                    dist.all_reduce(comm.count(flat))
                if planted and plant == "extra":
                    comm.plant("extra all_reduce", inspect.currentframe().f_lineno + 1)
                    dist.all_reduce(comm.count(loss.detach().reshape(1)))      # the planted extra collective
                opt.step()
                opt.zero_grad(set_to_none=True)
