"""A compiled transformer in bf16 under the collector, one NCCL process group; records the H200 samples.

``sample_traces/h200-1gpu`` (one rank, NCCL world size 1, an all-reduce on a side stream each step so
communication kernels exist next to the compute)::

    torchrun --standalone --nproc-per-node 1 examples/h200_transformer.py --out sample_traces/h200-1gpu

``sample_traces/h200-2rank-shared-gpu`` (two NCCL ranks on the ONE GPU: ``--shared-gpu`` sets
``NCCL_HOSTID=h<rank>`` and ``NCCL_SOCKET_IFNAME=lo`` before the process group starts, see FACTS §1; the two
processes time-share the GPU, so collective times and skew are plumbing only, never performance truth)::

    torchrun --standalone --nproc-per-node 2 examples/h200_transformer.py --shared-gpu \\
        --out sample_traces/h200-2rank-shared-gpu

On a machine without CUDA, ``--device cpu`` runs the same loop with gloo (a smoke test of the script).
``bench/overhead.py`` imports :func:`build` and :func:`batch` from here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shared-gpu", action="store_true", help="all ranks on GPU 0 (NCCL_HOSTID per rank)")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--comm-mb", type=float, default=16.0, help="side-stream all-reduce size per step (MB)")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; cpu: aot_eager)")
    p.add_argument("--mode", default="collector", choices=("collector", "always-on", "bare"),
                   help="always-on: collector without a profiler window; bare: no collector (overhead baseline)")
    p.add_argument("--profile-start", type=int, default=5)
    p.add_argument("--profile-length", type=int, default=3)
    return p.parse_args(argv)


class Transformer(torch.nn.Module):
    def __init__(self, d_model: int, layers: int, vocab: int = 8192) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, nhead=max(1, d_model // 64), dim_feedforward=4 * d_model,
                                                 batch_first=True, norm_first=True, dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def build(d_model: int, layers: int, device: torch.device) -> Transformer:
    torch.manual_seed(0)
    return Transformer(d_model, layers).to(device)


def batch(n: int, seq: int, device: torch.device, vocab: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, vocab, (n, seq + 1), device=device)
    return tokens[:, :-1], tokens[:, 1:]


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), target.flatten())


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = args.device == "cuda"
    if cuda:
        if args.shared_gpu:   # FACTS §1: two NCCL ranks on one GPU need distinct host ids over loopback
            os.environ["NCCL_HOSTID"] = f"h{rank}"
            os.environ["NCCL_SOCKET_IFNAME"] = "lo"
        device = torch.device("cuda", 0 if args.shared_gpu else local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")

    from workbench.collectors import Collector

    label = ("time-shared GPU: two NCCL ranks on one GPU (NCCL_HOSTID per rank); collective times and skew "
             "are not meaningful" if args.shared_gpu else None)
    if args.mode == "bare":
        collector = _NoCollector()
    else:
      collector = Collector(args.out, profile_start=args.profile_start, profile_length=args.profile_length,
                          profile_repeat=0 if args.mode == "always-on" else 1,
                          extra={"example": "h200_transformer", "label": label, "d_model": args.d_model,
                                 "layers": args.layers, "seq": args.seq, "batch": args.batch,
                                 "dtype": "bfloat16", "comm_mb": args.comm_mb})
    model = build(args.d_model, args.layers, device)
    backend = args.backend or ("inductor" if cuda else "aot_eager")
    ddp = DDP(collector.compile(model, backend=backend), device_ids=[device.index] if cuda else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=cuda)
    collector.instrument(ddp, opt)
    comm = torch.ones(int(args.comm_mb * 2**20 / 4), device=device)
    # AVG: with one NCCL rank a SUM is a plain copy, AVG still runs an NCCL kernel (FACTS §1: oneRankReduce)
    op = dist.ReduceOp.AVG if cuda else dist.ReduceOp.SUM
    side = torch.cuda.Stream(device) if cuda else None

    timed_from = max(0, args.steps - 20)     # the overhead bench times the last 20 steps
    with collector:
        for i in range(args.steps):
            if i == timed_from:
                if cuda:
                    torch.cuda.synchronize(device)
                t_start = time.perf_counter()
            x, y = batch(args.batch, args.seq, device)
            with collector.step():
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    loss = loss_fn(ddp(x), y)
                loss.backward()
                if side is not None:      # an extra all-reduce on a side stream, overlapping the optimizer
                    side.wait_stream(torch.cuda.current_stream(device))
                    with collector.range("side_allreduce"), torch.cuda.stream(side):
                        dist.all_reduce(comm, op=op)
                    torch.cuda.current_stream(device).wait_stream(side)
                else:
                    with collector.range("side_allreduce"):
                        dist.all_reduce(comm, op=op)
                opt.step()
                opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize(device)
    mean_ms = (time.perf_counter() - t_start) * 1e3 / (args.steps - timed_from)
    print(f"rank {rank} mode {args.mode}: mean step {mean_ms:.3f} ms over the last {args.steps - timed_from} steps",
          flush=True)
    if collector.errors:
        print(f"rank {rank}: collector errors: {collector.errors}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"wrote {os.path.abspath(args.out)}", flush=True)


class _NoCollector:
    """The same loop without the workbench (``--mode bare``): the overhead baseline."""

    errors: list[str] = []

    def compile(self, model, **kwargs):
        return torch.compile(model, **kwargs)

    def range(self, name):
        return contextlib.nullcontext()

    def step(self):
        return contextlib.nullcontext()

    def instrument(self, *args):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
