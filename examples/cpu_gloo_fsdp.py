"""FSDP2 (``fully_shard``) + ``torch.compile`` on CPU with gloo, instrumented by the collector; records
``sample_traces/cpu-gloo-fsdp2``.

Every ``Linear`` block of an MLP is its own FSDP2 unit (``fully_shard`` on each block, then on the root), so each
step runs one parameter all-gather per unit in forward (and again in backward, ``reshard_after_forward=True``) and
one gradient reduce-scatter per unit in backward: on gloo these are ``all_gather_into_tensor`` (``_allgather_base``)
and ``reduce_scatter_tensor`` (``_reduce_scatter_base``). The sharded model is compiled with
``torch.compile(backend="aot_eager")`` (FSDP2's hooks run eagerly, outside the graphs).

Run (2 ranks)::

    python -m torch.distributed.run --standalone --nproc-per-node 2 examples/cpu_gloo_fsdp.py \\
        --out sample_traces/cpu-gloo-fsdp2
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from workbench.collectors import Collector


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--profile-start", type=int, default=3)
    p.add_argument("--profile-length", type=int, default=4)
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: NCCL, one GPU per rank")
    return p.parse_args(argv)


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
    mesh = init_device_mesh(device.type, (world,))
    torch.manual_seed(0)
    d = args.hidden
    blocks = [torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.GELU()) for _ in range(args.layers)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(d, 1)).to(device)
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    collector = Collector(args.out, profile_start=args.profile_start, profile_length=args.profile_length,
                          extra={"example": "cpu_gloo_fsdp", "fsdp": 2, "units": args.layers + 1,
                                 "layers": args.layers, "hidden": d, "batch": args.batch,
                                 "backend": args.backend})
    compiled = collector.compile(model, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    collector.instrument(compiled, opt)
    gen = torch.Generator().manual_seed(rank)
    with collector:
        for _ in range(args.steps):
            x = torch.randn(args.batch, d, generator=gen).to(device)
            y = torch.randn(args.batch, 1, generator=gen).to(device)
            with collector.step():
                loss = torch.nn.functional.mse_loss(compiled(x), y)
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
