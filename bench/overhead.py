"""Collector overhead on a compiled model (not a test): prints ratios from one run.

1. Always-on (no profiler window): step time with the collector (steps.jsonl, CUDA events, compile capture,
   NVTX + forward/backward/optimizer hooks) vs the same loop without it. Blocks of steps alternate
   (bare, collector, collector, bare, ...) so drift hits both; each block is timed with one sync at its end.
2. Profiled window: steps inside a collector window vs steps inside a bare ``torch.profiler`` window with the
   same options (CPU + CUDA activities, no shapes/stack/memory). Each step is timed with a sync at its end;
   the median over the window is kept (the step that exports is an outlier in both). Alternated too.

Targets (issue 3): always-on <= 1.01x bare; window <= 1.05x bare torch.profiler.

    python bench/overhead.py --sizes small,medium --json bench_overhead.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from h200_transformer import batch, build, loss_fn  # noqa: E402

from workbench.collectors import Collector  # noqa: E402

SIZES = {  # d_model, layers, seq, batch
    "small": (256, 2, 128, 8),      # launch-bound: the collector's host work shows the most
    "medium": (1024, 4, 512, 16),   # GPU-bound
}


class Wrap(torch.nn.Module):
    """Gives the collector its own module to hook, so the bare loop runs hook-free on the same compiled model."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_size(name: str, device: torch.device, args: argparse.Namespace, tmp: Path) -> dict:
    d_model, layers, seq, n = SIZES[name]
    model = build(d_model, layers, device)
    compiled = torch.compile(model, backend=args.backend)
    wrapped = Wrap(compiled)
    opt_bare = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    opt_coll = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
    x, y = batch(n, seq, device)
    dtype = torch.bfloat16

    def body(fn, opt) -> None:
        with torch.autocast(device.type, dtype=dtype):
            loss = loss_fn(fn(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.perf_counter()
    for _ in range(args.warmup):
        body(compiled, opt_bare)
        body(wrapped, opt_coll)
    sync(device)
    compile_s = time.perf_counter() - t

    # ---------------------------------------------------------------- 1. always-on
    coll = Collector(tmp / f"{name}-always-on", profile_repeat=0)
    coll.instrument(wrapped, opt_coll)
    coll.start()

    def block_bare() -> float:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.block):
            body(compiled, opt_bare)
        sync(device)
        return (time.perf_counter() - t0) / args.block

    def block_coll() -> float:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.block):
            with coll.step():
                body(wrapped, opt_coll)
        sync(device)
        return (time.perf_counter() - t0) / args.block

    bare, on = [], []
    for rep in range(args.reps):
        order = (block_bare, block_coll) if rep % 2 == 0 else (block_coll, block_bare)
        for fn in order:
            (bare if fn is block_bare else on).append(fn())
    coll.close()
    ratios = [c / b for b, c in zip(bare, on)]

    # ---------------------------------------------------------------- 2. profiled window
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    w = args.window

    def window_bare(k: int) -> list[float]:
        out = tmp / f"{name}-bare-{k}.json.gz"
        times = []
        with profile(activities=acts, schedule=schedule(wait=0, warmup=1, active=w, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
            for i in range(w + 1):
                t0 = time.perf_counter()
                body(compiled, opt_bare)
                sync(device)
                prof.step()
                if i >= 1:
                    times.append(time.perf_counter() - t0)
        return times

    def window_coll(k: int) -> list[float]:
        c = Collector(tmp / f"{name}-window-{k}", profile_start=1, profile_length=w, compile_capture=True)
        c.instrument(wrapped, opt_coll)
        times = []
        with c:
            for i in range(w + 1):
                t0 = time.perf_counter()
                with c.step():
                    body(wrapped, opt_coll)
                    sync(device)
                if i >= 1:
                    times.append(time.perf_counter() - t0)
        assert c.errors == [], c.errors
        return times

    def plain_steps() -> list[float]:
        times = []
        for _ in range(w):
            t0 = time.perf_counter()
            body(compiled, opt_bare)
            sync(device)
            times.append(time.perf_counter() - t0)
        return times

    wb, wc, plain = [], [], []
    for k in range(args.window_reps):
        plain.append(statistics.median(plain_steps()))
        order = (window_bare, window_coll) if k % 2 == 0 else (window_coll, window_bare)
        for fn in order:
            (wb if fn is window_bare else wc).append(statistics.median(fn(k)))
    return {
        "size": name, "d_model": d_model, "layers": layers, "seq": seq, "batch": n,
        "warmup_and_compile_s": round(compile_s, 2),
        "always_on": {"bare_ms": [round(v * 1e3, 4) for v in bare], "collector_ms": [round(v * 1e3, 4) for v in on],
                      "ratio_median": statistics.median(ratios), "ratio_total": sum(on) / sum(bare)},
        "window": {"plain_ms": [round(v * 1e3, 4) for v in plain], "bare_profiler_ms": [round(v * 1e3, 4) for v in wb],
                   "collector_ms": [round(v * 1e3, 4) for v in wc],
                   "ratio_median": statistics.median(c / b for b, c in zip(wb, wc)),
                   "profiler_vs_plain": statistics.median(wb) / statistics.median(plain)},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="small,medium")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; cpu: aot_eager)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=8, help="always-on: block pairs")
    p.add_argument("--block", type=int, default=30, help="always-on: steps per block")
    p.add_argument("--window", type=int, default=10, help="profiled steps per window")
    p.add_argument("--window-reps", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--keep", default=None, help="keep the run directories here")
    args = p.parse_args()
    args.backend = args.backend or ("inductor" if args.device == "cuda" else "aot_eager")
    device = torch.device(args.device)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wb-overhead-"))
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "backend": args.backend, "sizes": []}
    for name in args.sizes.split(","):
        r = bench_size(name, device, args, tmp)
        results["sizes"].append(r)
        print(json.dumps(r), flush=True)
    print(f"\n{results['device']}, torch {results['torch']}, backend {args.backend}")
    print(f"{'size':8} {'bare ms':>9} {'+collector':>11} {'always-on':>10} | {'profiler ms':>11} "
          f"{'+collector':>11} {'window':>8} {'prof/plain':>10}")
    for r in results["sizes"]:
        a, w = r["always_on"], r["window"]
        print(f"{r['size']:8} {statistics.median(a['bare_ms']):9.3f} {statistics.median(a['collector_ms']):11.3f} "
              f"{a['ratio_median']:9.4f}x | {statistics.median(w['bare_profiler_ms']):11.3f} "
              f"{statistics.median(w['collector_ms']):11.3f} {w['ratio_median']:7.4f}x {w['profiler_vs_plain']:9.3f}x")
    print("targets: always-on <= 1.01x, window <= 1.05x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
