"""DDP + torch.compile on CPU with gloo, instrumented by the collector; records ``sample_traces/cpu-gloo-4rank``.

Two problems are planted so the analyses have something to find:

- one rank alone gets an uneven (smaller) batch at one step, so only that rank recompiles while the others
  wait for it in the gradient all-reduce (``--recompile-rank``, ``--recompile-step``);
- another rank is a straggler: its data loading is slow on every step (``--straggler-rank``,
  ``--straggler-delay``), which shows as ``data_wait_ns`` in its ``steps.jsonl``.

Run (4 ranks; the tests run it with 2 and 4)::

    python -m torch.distributed.run --standalone --nproc-per-node 4 examples/cpu_gloo_4rank.py \\
        --out sample_traces/cpu-gloo-4rank
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.collectors import Collector


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--uneven-batch", type=int, default=12, help="the recompiling rank's batch at that step")
    p.add_argument("--recompile-rank", type=int, default=1, help="-1: none")
    p.add_argument("--recompile-step", type=int, default=6)
    p.add_argument("--straggler-rank", type=int, default=2, help="-1: none")
    p.add_argument("--straggler-delay", type=float, default=0.04, help="extra data-loading seconds per step")
    p.add_argument("--profile-start", type=int, default=5)
    p.add_argument("--profile-length", type=int, default=3)
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: NCCL, one GPU per rank (LOCAL_RANK); cpu: gloo")
    return p.parse_args(argv)


def batches(args: argparse.Namespace, rank: int):
    """A stand-in data loader: the straggler sleeps while 'loading', the recompiling rank gets a short batch."""
    gen = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        if rank == args.straggler_rank:
            time.sleep(args.straggler_delay)
        n = args.uneven_batch if (rank == args.recompile_rank and step == args.recompile_step) else args.batch
        yield (torch.randn(n, 32, generator=gen).to(args.device_obj),
               torch.randn(n, 1, generator=gen).to(args.device_obj))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    if args.device == "cuda":
        args.device_obj = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(args.device_obj)
        dist.init_process_group("nccl", device_id=args.device_obj)
    else:
        args.device_obj = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, args.hidden), torch.nn.GELU(), torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.GELU(), torch.nn.Linear(args.hidden, 1),
    ).to(args.device_obj)
    collector = Collector(args.out, profile_start=args.profile_start, profile_length=args.profile_length,
                          extra={"example": "cpu_gloo_4rank", "recompile_rank": args.recompile_rank,
                                 "recompile_step": args.recompile_step, "straggler_rank": args.straggler_rank,
                                 "straggler_delay_s": args.straggler_delay})
    cuda_ids = [args.device_obj.index] if args.device == "cuda" else None
    ddp = DDP(collector.compile(model, backend=args.backend), device_ids=cuda_ids)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    collector.instrument(ddp, opt)
    with collector:
        for x, y in batches(args, rank):
            with collector.step():
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                loss.backward()
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
