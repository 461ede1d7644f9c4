"""Pipeline parallelism on CPU with gloo (``torch.distributed.pipelining``), instrumented by the collector;
records ``sample_traces/cpu-gloo-pipeline``.

Two stages (one per rank), GPipe (or 1F1B) schedule, ``--microbatches`` micro-batches per step. The stages are
built to cost the same so the measured bubble can be set against the schedule's theoretical one
(GPipe: ``(p-1)/(m+p-1)`` with ``p`` stages and ``m`` micro-batches):

- each stage holds ``--layers`` ``Linear(d, d)`` + ReLU blocks (the matmuls are >97% of the FLOPs);
- stage 0 starts with a tiny ``Linear(in, d)`` (in=16) so that all of its ``d x d`` layers compute input
  gradients like stage 1's do (otherwise stage 0's first layer would skip its dgrad and stage 0's backward
  would be 1/(2L) cheaper); stage 1 ends with a tiny ``Linear(d, 1)`` head and an MSE loss;
- parameters are few relative to the micro-batch rows (SGD, no momentum), so the optimizer step, which counts
  as bubble, is small.

Compute-only ranges ``forward_mb<i>`` / ``backward_mb<i>`` wrap ``PipelineStage.forward_one_chunk`` and
``backward_one_chunk``. The schedule's own ``record_function`` ranges (``Forward <i>`` / ``Backward <i>``) also
exist but include the wait for the neighbouring stage's activations or gradients (``_wait_batch_p2p`` runs inside
them; ``pipeline_bubbles`` takes the ``gloo:recv`` time inside them out as ``p2p_wait_ns``). ``Schedule1F1B``
(``--schedule 1f1b``) in torch 2.13 writes no per-micro-batch ranges at all: there only the example's ranges exist.

Run (2 ranks)::

    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/cpu_gloo_pipeline.py \\
        --out sample_traces/cpu-gloo-pipeline
"""

from __future__ import annotations

import argparse
import functools
import os

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from workbench.collectors import Collector

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="gpipe")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--mb-size", type=int, default=256, help="rows per micro-batch")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=32, help="Linear(d, d) blocks per stage")
    p.add_argument("--in-features", type=int, default=16)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: NCCL, one GPU per stage")
    p.add_argument("--profile-start", type=int, default=3)
    p.add_argument("--profile-length", type=int, default=5)
    return p.parse_args(argv)


def build_stage(stage: int, args: argparse.Namespace) -> torch.nn.Module:
    d = args.hidden
    blocks: list[torch.nn.Module] = []
    if stage == 0:
        blocks.append(torch.nn.Linear(args.in_features, d))
    for _ in range(args.layers):
        blocks += [torch.nn.Linear(d, d), torch.nn.ReLU()]
    if stage == 1:
        blocks.append(torch.nn.Linear(d, 1))
    return torch.nn.Sequential(*blocks)


def with_range(collector: Collector, fn, prefix: str):
    """Wrap a PipelineStage method ``fn(mb_index, ...)`` in ``collector.range(f"{prefix}{mb_index}")``."""

    @functools.wraps(fn)
    def wrapped(i, *a, **kw):
        with collector.range(f"{prefix}{i}"):
            return fn(i, *a, **kw)

    return wrapped


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit("this example has exactly 2 stages: run it with 2 ranks")
    torch.manual_seed(rank)
    module = build_stage(rank, args).to(device)
    collector = Collector(args.out, profile_start=args.profile_start, profile_length=args.profile_length,
                          extra={"example": "cpu_gloo_pipeline", "schedule": args.schedule, "stages": world,
                                 "microbatches": args.microbatches, "mb_size": args.mb_size,
                                 "hidden": args.hidden, "layers_per_stage": args.layers,
                                 "theoretical_bubble": (world - 1) / (args.microbatches + world - 1)})
    stage = PipelineStage(module, rank, world, device)
    stage.forward_one_chunk = with_range(collector, stage.forward_one_chunk, "forward_mb")
    stage.backward_one_chunk = with_range(collector, stage.backward_one_chunk, "backward_mb")
    schedule = SCHEDULES[args.schedule](stage, args.microbatches,
                                        loss_fn=lambda out, y: torch.nn.functional.mse_loss(out, y))
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)
    collector.instrument(optimizer=opt)
    n = args.microbatches * args.mb_size
    with collector:
        for step in range(args.steps):
            gen = torch.Generator().manual_seed(step)
            x = torch.randn(n, args.in_features, generator=gen).to(device)
            y = torch.randn(n, 1, generator=gen).to(device)
            with collector.step():
                if rank == 0:
                    schedule.step(x)
                else:
                    losses: list[torch.Tensor] = []
                    schedule.step(target=y, losses=losses)
                opt.step()
                opt.zero_grad(set_to_none=True)
    if collector.errors:
        print(f"rank {rank}: collector errors: {collector.errors}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"wrote {os.path.abspath(args.out)}", flush=True)


if __name__ == "__main__":
    main()
