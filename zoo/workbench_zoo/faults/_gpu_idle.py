"""GPU idle faults: a small compiled bf16 transformer trained on one GPU, clean in the first half of the run and with
one host-side fault planted from step :data:`FAULT_FROM` on. The model is small on purpose: like many real models
at a small batch, its compiled step is itself partly launch-bound, so the faults add to an idle GPU that already
waits for the host, which is where telling them apart matters.

Faults (one module each, all running :func:`train`; each module's ``FAULT`` plants its fault in
:data:`FAULT_WINDOW` of :data:`NUM_STEPS`, on one GPU):

- ``item_sync``: after backward, every parameter's gradient norm is logged with ``.item()`` (a host-device sync
  per parameter);
- ``dtoh_sync``: the step's predictions are copied to the host with ``.cpu()`` for a metric (a device-to-host
  copy and a sync);
- ``unfused_optimizer``: ``AdamW(foreach=False)``: one small kernel per op per parameter, outside the compiled model;
- ``cpu_dataload``: batches built on the CPU by a ``DataLoader`` with no workers, between steps;
- ``eager_frame``: a data-dependent branch inside the ``for`` loop over the layers: Dynamo skips the frame and
  ``forward`` runs eagerly;
- ``clean``: nothing planted (the model's own launch-bound nature is all there is).

Ground truth, measured by the script itself: a CUDA event is recorded at the top of every loop iteration; a
step's period is the time from its event to the next one's on the GPU clock (the loop's period, without adding a
synchronisation). Two profiler windows of the same length record a clean stretch (steps 5-8) and a planted one
(steps 17-20); a planted window step's cost is its period less the median period of the clean window (both
windows carry the same profiler overhead). The steps outside the windows give the same difference without the
profiler (``unprofiled_cost_per_step_ns``).
"""

from __future__ import annotations

import time
from statistics import median
from typing import Any

import torch

from workbench_zoo.registry import Fault, FaultContext, RankRecord
from workbench_zoo.truth import truth

NUM_STEPS = 24
FAULT_FROM = 12
#: Profiler windows: steps 5-8 (clean) and 17-20 (planted); steps 4 and 16 are the profiler's warm-up.
WINDOW = {"profile_start": 5, "profile_length": 4, "profile_every": 12, "profile_repeat": 2}
CLEAN_WINDOW = tuple(range(5, 9))
FAULT_WINDOW = tuple(range(17, 21))
LAYERS, WIDTH, HEADS, SEQ, BATCH = 6, 384, 6, 256, 16
#: Rows built per batch by the CPU data loader, and the Python work per row (the planted data-loading cost).
CPU_ROWS, CPU_WORK = BATCH, 12_000


class Net(torch.nn.Module):
    """Six pre-norm transformer encoder layers on (batch, seq, width) inputs, a scalar head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True,
                                             norm_first=True) for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class Branchy(torch.nn.Module):
    """The same layers with a data-dependent branch inside the loop: Dynamo skips the whole frame."""

    def __init__(self, net: Net) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.net.layers:
            x = layer(x)
            if x.float().abs().mean() > 1e4:    # fix here: eager_frame (a branch on a tensor's value in the loop)
                x = x * 0.5
        return self.net.head(x)


class CpuBatches(torch.utils.data.IterableDataset):
    """Batches built on the CPU, row by row, with Python work per row (a tokenizer or augmentation stand-in)."""

    def __iter__(self):
        gen = torch.Generator().manual_seed(1)
        while True:
            rows = []
            for _ in range(CPU_ROWS):
                acc = 0
                for i in range(CPU_WORK):
                    acc = (acc * 31 + i) % 1_000_003
                rows.append(torch.randn(SEQ, WIDTH, generator=gen) * (1 + acc % 3))
            yield torch.stack(rows).to(torch.bfloat16)


def train(ctx: FaultContext, kind: str) -> None:
    """The user's loop; ``kind`` names the fault planted from step :data:`FAULT_FROM` on."""
    dev = torch.device(ctx.device)
    cuda = dev.type == "cuda"
    net = Net().to(dev, torch.bfloat16)
    params = list(net.parameters())
    compiled = torch.compile(net)
    branchy = torch.compile(Branchy(net))
    opt = torch.optim.AdamW(params, lr=1e-5, fused=cuda)
    unfused = torch.optim.AdamW(params, lr=1e-5, foreach=False)   # fix here: unfused_optimizer
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(BATCH, SEQ, WIDTH, generator=gen).to(dev, torch.bfloat16) for _ in range(2)]
    loader = iter(torch.utils.data.DataLoader(CpuBatches(), batch_size=None, num_workers=0))  # fix here: cpu_dataload
    marks: list[Any] = []
    collector = ctx.collector(**WINDOW)
    with collector:
        for step in ctx.steps():
            planted = step >= FAULT_FROM and kind != "clean"
            marks.append(_mark(cuda))
            if planted and kind == "cpu_dataload":
                x = next(loader).to(dev, non_blocking=False)
            else:
                x = batches[step % 2]
            with collector.step():
                model = branchy if planted and kind == "eager_frame" else compiled
                out = model(x)
                out.float().pow(2).mean().backward()
                if planted and kind == "item_sync":
                    norms = [p.grad.norm().item() for p in params]    # fix here: item_sync
                    ctx.note("last_grad_norm", max(norms))
                if planted and kind == "dtoh_sync":
                    preds = out.detach().argmax(-1).cpu()            # fix here: dtoh_sync
                    ctx.note("last_pred", int(preds.sum()))
                (unfused if planted and kind == "unfused_optimizer" else opt).step()
                opt.zero_grad(set_to_none=True)
        marks.append(_mark(cuda))
    if cuda:
        torch.cuda.synchronize()
        ctx.record.timed["period"] = {s: int(marks[s].elapsed_time(marks[s + 1]) * 1e6) for s in range(NUM_STEPS)}
    else:
        ctx.record.timed["period"] = {s: marks[s + 1] - marks[s] for s in range(NUM_STEPS)}
    ctx.save()


def _mark(cuda: bool) -> Any:
    if not cuda:
        return time.perf_counter_ns()
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def fix_line_of(kind: str) -> str:
    """``file:line`` of the line this module marks as ``kind``'s fix."""
    mark = f"# fix here: {kind}"
    with open(__file__) as fh:
        n = next(i for i, line in enumerate(fh, 1) if mark in line and not line.lstrip().startswith("#"))
    return f"{__file__}:{n}"


def ground_truth(records: dict[int, RankRecord], flt: Fault, kind: str) -> dict[str, Any]:
    """Per planted window step: its period less the clean window's median period (see the module doc)."""
    rec = records.get(0)
    period = rec.timed.get("period", {}) if rec else {}
    if not all(s in period for s in (*CLEAN_WINDOW, *FAULT_WINDOW)):
        return truth(flt, {}, "not measured (the run did not finish)")
    clean = median(period[s] for s in CLEAN_WINDOW)
    by_step = {s: int(period[s] - clean) for s in FAULT_WINDOW}
    outside_clean = median(period[s] for s in range(1, FAULT_FROM) if s not in CLEAN_WINDOW and s != 4)
    outside_fault = median(period[s] for s in range(FAULT_FROM + 1, NUM_STEPS) if s not in FAULT_WINDOW and s != 16)
    return truth(flt, {0: max(0, sum(by_step.values()))},
                 "the planted window steps' periods (CUDA events at the top of each loop iteration) less the clean "
                 "window's median period, summed over the planted window", agg="max", by_step={0: by_step},
                 line=None if kind in ("clean",) else fix_line_of(kind),
                 clean_period_ns=int(clean), cost_per_step_ns=int(median(by_step.values())),
                 unprofiled_cost_per_step_ns=int(outside_fault - outside_clean))
