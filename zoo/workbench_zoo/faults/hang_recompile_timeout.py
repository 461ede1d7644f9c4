"""One rank recompiling past the timeout: at step 4 rank 1 alone gets a batch of another size and recompiles; its
compile takes longer than the process group's timeout (a backend that needs 10 s here, as a large model's
inductor compile can), so the other ranks time out in the gradient all-reduce.

Found as ``hang`` naming rank 1 (compiling the model's frame since step 4), the ranks that waited, the group and
sequence id they waited in and the timeout. Fix: a compile config (mark the batch dim dynamic up front).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from workbench_zoo.faults._hang_common import Counter, failure_truth, flat_grads, settle
from workbench_zoo.faults._common import batch, tiny_mlp
from workbench_zoo.registry import Fault, FaultContext

FAULT = Fault(
    name="hang_recompile_timeout",
    description="rank 1 alone recompiles at step 4 (new batch size) for longer than the 4 s collective timeout",
    finding="hang", ranks=(1,), steps=(4,), world_size=3, fix="config", num_steps=7, timeout_s=90,
)
PG_TIMEOUT_S = 4
#: How long the planted recompile takes (s): longer than the timeout.
SLOW_COMPILE_S = 8.0
ODD_BATCH, BATCH = 6, 8


def slow_backend(ctx: FaultContext):
    """aot_eager, but a recompile (any compile after the first) takes :data:`SLOW_COMPILE_S` more."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop

    compiles = [0]
    inner = aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop)

    def backend(gm, example_inputs):
        compiles[0] += 1
        if compiles[0] > 1:
            t0 = time.perf_counter_ns()
            time.sleep(SLOW_COMPILE_S)
            ctx.note("slow_compile_ns", time.perf_counter_ns() - t0)
        return inner(gm, example_inputs)

    return backend


def main(ctx: FaultContext) -> None:
    model = tiny_mlp(width=16, inp=8)
    compiled = torch.compile(model, backend=slow_backend(ctx), dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(ctx.rank)
    comm = Counter(ctx)
    x, y = batch(BATCH, inp=8, gen=gen)
    torch.nn.functional.mse_loss(compiled(x), y).backward()     # warm-up: the first compile, on every rank
    opt.zero_grad(set_to_none=True)
    settle()                                                     # a slow first compile never trips the timeout
    collector = ctx.collector(profile_repeat=0)
    with collector:
        for step in ctx.steps():
            odd = ctx.planted and step in FAULT.steps
            if odd:
                comm.plant("recompile", 0, seconds=SLOW_COMPILE_S)
            x, y = batch(ODD_BATCH if odd else BATCH, inp=8, gen=gen)
            with collector.step():
                torch.nn.functional.mse_loss(compiled(x), y).backward()
                with ctx.timed("allreduce"):
                    dist.all_reduce(comm.count(flat_grads(model)))
                opt.step()
                opt.zero_grad(set_to_none=True)


def ground_truth(records, fault):
    return failure_truth(records, fault)
