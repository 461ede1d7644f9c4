"""A 2+-rank gloo training run where one rank alone gets a different batch size at one step.

Used by ``test_end_to_end.py``: ``DDP(collector.compile(model, backend="aot_eager"))`` under the collector, with an
optional ``--compile-config`` (what ``workbench recommend -o`` wrote) applied by ``Collector(compile_config=...)``.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.collectors import Collector


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--odd-batch", type=int, default=6)
    p.add_argument("--odd-rank", type=int, default=1)
    p.add_argument("--odd-step", type=int, default=4)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),
                                torch.nn.GELU(), torch.nn.Linear(64, 1))
    collector = Collector(args.out, profile_start=2, profile_length=2, compile_config=args.compile_config)
    ddp = DDP(collector.compile(model, backend="aot_eager"))
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    collector.instrument(ddp, opt)
    gen = torch.Generator().manual_seed(rank)
    with collector:
        for step in range(args.steps):
            n = args.odd_batch if (rank == args.odd_rank and step == args.odd_step) else args.batch
            x, y = torch.randn(n, 32, generator=gen), torch.randn(n, 1, generator=gen)
            with collector.step():
                loss = torch.nn.functional.mse_loss(ddp(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
    if collector.errors:
        print(f"rank {rank}: collector errors: {collector.errors}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
