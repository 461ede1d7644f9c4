"""A real 2-rank CPU gloo training job with host work planted between its ops, for the idle-cause proof on CPU
(tests/analyses/test_idle_causes_gloo.py, docs/gpu-idle.md "On CPU").

``python gloo_host_work.py OUT KIND [KIND ...]`` runs one job per kind, each into ``OUT/<kind>``: two ranks forked
from this process (torch imported once), a gradient all-reduce per step over gloo, the workbench collector with one
profiler window. Every rank plants the same host work in every step of its kind:

- ``sync``: every parameter's gradient norm (one ``_foreach_norm``) read back into Python with ``.item()`` and
  checked on the host;
- ``optimizer``: ``AdamW(foreach=False)``, one small op per op per parameter;
- ``data``: a ``DataLoader`` with no workers whose dataset builds each batch in Python, fetched inside the step;
- ``clean``: nothing planted (``AdamW(foreach=True)``, batches prebuilt).

The script times its own plant (``time.perf_counter_ns`` around it) and writes, per rank, ``OUT/<kind>/plant/
rank<R>.json``: ``{"plant_ns": {step: ns}}``; the lines of the plants are marked ``# plant: <kind>``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from workbench.collectors import Collector

STEPS = 9
#: One profiler window: steps 3-7 (the last is the profiler's stop, left out of the steady window).
WINDOW = {"profile_start": 3, "profile_length": 5}
LAYERS, WIDTH, BATCH = 128, 32, 64
#: Python work per parameter after its ``.item()`` and per row built by the loader (sized for ≥ 20 ms a step).
CHECK_WORK, ROWS, ROW_WORK = 1_000, 64, 4_000


class Net(torch.nn.Module):
    """Many small linear layers: a model with many parameters and cheap ops."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


class Rows(torch.utils.data.IterableDataset):
    """Batches built in Python, row by row (a tokenizer or augmentation stand-in)."""

    def __iter__(self):
        gen = torch.Generator().manual_seed(1)
        while True:
            scale = []
            for _ in range(ROWS):
                acc = 0
                for i in range(ROW_WORK):
                    acc = (acc * 31 + i) % 1_000_003
                scale.append(1 + acc % 3)
            yield torch.randn(BATCH, WIDTH, generator=gen) * torch.tensor(scale, dtype=torch.float32)[:, None]


def host_check(value: float) -> float:
    """Host-side work on a value read back from a tensor (a NaN check, a running statistic)."""
    acc = value
    for i in range(CHECK_WORK):
        acc = (acc * 0.5 + i) % 1_000_003
    return acc


def train(kind: str, out: Path, rank: int) -> None:
    net = Net()
    params = list(net.parameters())
    opt = (torch.optim.AdamW(params, lr=1e-4, foreach=False) if kind == "optimizer"  # plant: optimizer
           else torch.optim.AdamW(params, lr=1e-4, foreach=True))
    gen = torch.Generator().manual_seed(rank)
    prebuilt = [torch.randn(BATCH, WIDTH, generator=gen) for _ in range(2)]
    loader = iter(torch.utils.data.DataLoader(Rows(), batch_size=None, num_workers=0))  # plant: data
    plant: dict[int, int] = {}
    with Collector(out, **WINDOW) as collector:
        for step in range(STEPS):
            with collector.step():
                t0 = time.perf_counter_ns()
                x = next(loader) if kind == "data" else prebuilt[step % 2]
                if kind == "data":
                    plant[step] = time.perf_counter_ns() - t0
                net(x).pow(2).mean().backward()
                grads = [p.grad for p in params]
                flat = torch._utils._flatten_dense_tensors(grads)
                dist.all_reduce(flat)
                torch._foreach_copy_(grads, torch._utils._unflatten_dense_tensors(flat, grads))
                if kind == "sync":
                    norms = torch._foreach_norm(grads)      # one op; the plant is reading them on the host
                    t0 = time.perf_counter_ns()
                    checks = [host_check(n.item()) for n in norms]  # plant: sync
                    plant[step] = time.perf_counter_ns() - t0
                    assert len(checks) == len(params)
                t0 = time.perf_counter_ns()
                opt.step()
                if kind == "optimizer":
                    plant[step] = time.perf_counter_ns() - t0
                opt.zero_grad(set_to_none=True)
    d = out / "plant"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rank{rank}.json").write_text(json.dumps({"plant_ns": plant}))


def _rank(rank: int, kind: str, out: str, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        train(kind, Path(out), rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    out, kinds = Path(argv[0]), argv[1:]
    import socket

    for kind in kinds:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.multiprocessing.start_processes(_rank, args=(kind, str(out / kind), port), nprocs=2,
                                              start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
