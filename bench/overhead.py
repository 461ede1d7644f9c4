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
    plain_wrap = Wrap(compiled)        # the bare loop: same call depth, no hooks
    wrapped = Wrap(compiled)           # the collector's loop: hooked by instrument()
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
        body(plain_wrap, opt_bare)
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
            body(plain_wrap, opt_bare)
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

    def step_bare() -> float:
        t0 = time.perf_counter()
        body(plain_wrap, opt_bare)
        sync(device)
        return time.perf_counter() - t0

    def step_coll() -> float:
        t0 = time.perf_counter()
        with coll.step():
            body(wrapped, opt_coll)
        sync(device)
        return time.perf_counter() - t0

    bare, on = [], []
    for rep in range(args.reps):
        order = (block_bare, block_coll) if rep % 2 == 0 else (block_coll, block_bare)
        for fn in order:
            (bare if fn is block_bare else on).append(fn())
    # an A/A control: a second bare arm built like the collector's (its own Wrap and optimizer, no collector),
    # so the measurement's own bias between two identical arms is known
    ctrl_wrap = Wrap(compiled)
    opt_ctrl = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")

    def step_ctrl() -> float:
        t0 = time.perf_counter()
        body(ctrl_wrap, opt_ctrl)
        sync(device)
        return time.perf_counter() - t0

    sbare, son, sctrl = [], [], []
    arms = [(step_bare, sbare), (step_coll, son), (step_ctrl, sctrl)]
    for i in range(args.alt_steps):      # alternate single steps (sync each): drift cancels, host cost exposed
        for fn, out in arms[i % 3:] + arms[:i % 3]:
            out.append(fn())
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
                body(plain_wrap, opt_bare)
                sync(device)
                prof.step()
                if i >= 1:
                    times.append(time.perf_counter() - t0)
        return times

    def window_coll(k: int, ranges: bool = True) -> list[float]:
        c = Collector(tmp / f"{name}-window-{k}-{ranges}", profile_start=1, profile_length=w, nvtx=ranges)
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
            body(plain_wrap, opt_bare)
            sync(device)
            times.append(time.perf_counter() - t0)
        return times

    def window_coll_noranges(k: int) -> list[float]:
        return window_coll(k, ranges=False)

    wb, wc, wn, plain = [], [], [], []
    for k in range(args.window_reps):
        plain.append(statistics.median(plain_steps()))
        order = [window_bare, window_coll, window_coll_noranges]
        order = order[k % 3:] + order[:k % 3]
        for fn in order:
            {window_bare: wb, window_coll: wc, window_coll_noranges: wn}[fn].append(statistics.median(fn(k)))
    return {
        "size": name, "d_model": d_model, "layers": layers, "seq": seq, "batch": n,
        "warmup_and_compile_s": round(compile_s, 2),
        "always_on": {"alternating_steps": args.alt_steps,
                      "alt_bare_ms": round(statistics.median(sbare) * 1e3, 4),
                      "alt_collector_ms": round(statistics.median(son) * 1e3, 4),
                      "ratio_alternating": statistics.median(son) / statistics.median(sbare),
                      "alt_control_ms": round(statistics.median(sctrl) * 1e3, 4),
                      "ratio_control": statistics.median(sctrl) / statistics.median(sbare),
                      "ratio_vs_control": statistics.median(son) / statistics.median(sctrl),
                      "bare_ms": [round(v * 1e3, 4) for v in bare], "collector_ms": [round(v * 1e3, 4) for v in on],
                      "ratio_median": statistics.median(ratios), "ratio_total": sum(on) / sum(bare)},
        "window": {"plain_ms": [round(v * 1e3, 4) for v in plain], "bare_profiler_ms": [round(v * 1e3, 4) for v in wb],
                   "collector_ms": [round(v * 1e3, 4) for v in wc],
                   "collector_no_ranges_ms": [round(v * 1e3, 4) for v in wn],
                   "ratio_median": statistics.median(c / b for b, c in zip(wb, wc)),
                   "ratio_no_ranges_median": statistics.median(c / b for b, c in zip(wb, wn)),
                   "profiler_vs_plain": statistics.median(wb) / statistics.median(plain)},
    }


def ablate(name: str, device: torch.device, args: argparse.Namespace, tmp: Path) -> dict:
    """Always-on cost by part: alternating single steps, bare vs the collector with one part turned off."""
    d_model, layers, seq, n = SIZES[name]
    model = build(d_model, layers, device)
    compiled = torch.compile(model, backend=args.backend)
    x, y = batch(n, seq, device)
    variants = {
        "full": ({}, True), "no_hooks": ({}, False), "no_device_timing": ({"device_timing": False}, True),
        "no_compile_capture": ({"compile_capture": False}, True), "no_nvtx": ({"nvtx": False}, True),
        "steps_only": ({"device_timing": False, "compile_capture": False, "nvtx": False}, False),
    }
    out = {}
    for vname, (kwargs, hooks) in variants.items():
        plain_wrap, wrapped = Wrap(compiled), Wrap(compiled)
        opt_b = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
        opt_c = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.type == "cuda")
        c = Collector(tmp / f"ablate-{vname}", profile_repeat=0, **kwargs)
        if hooks:
            c.instrument(wrapped, opt_c)

        def body(fn, opt) -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(fn(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(5):
            body(plain_wrap, opt_b)
            body(wrapped, opt_c)
        tb, tc = [], []
        with c:
            for i in range(args.alt_steps):
                for which in ((0, 1) if i % 2 == 0 else (1, 0)):
                    sync(device)
                    t0 = time.perf_counter()
                    if which == 0:
                        body(plain_wrap, opt_b)
                    else:
                        with c.step():
                            body(wrapped, opt_c)
                    sync(device)
                    (tb if which == 0 else tc).append(time.perf_counter() - t0)
        out[vname] = {"bare_ms": round(statistics.median(tb) * 1e3, 4),
                      "collector_ms": round(statistics.median(tc) * 1e3, 4),
                      "ratio": round(statistics.median(tc) / statistics.median(tb), 4)}
        print(json.dumps({"ablate": vname, **out[vname]}), flush=True)
    return out


def host_cost_us(tmp: Path, device: torch.device, n: int = 20000) -> dict:
    """The collector's own host time per step: an empty step, with and without the forward/optimizer hooks."""
    lin = torch.nn.Linear(2, 2, device=device)
    bare_mod, hooked = Wrap(lin), Wrap(lin)
    c = Collector(tmp / "host-cost", profile_repeat=0)
    c.instrument(hooked)
    x = torch.randn(1, 2, device=device)
    with c:
        for _ in range(100):
            with c.step():
                pass
        out = {}
        for k in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                pass
            empty = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(n):
                with c.step():
                    pass
            step = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(n):
                bare_mod(x)
            fwd = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(n):
                hooked(x)
            fwd_hooked = time.perf_counter() - t0
            for key, value in (("empty", empty), ("step", step), ("fwd", fwd), ("fwd_hooked", fwd_hooked)):
                out.setdefault(key, []).append(value / n * 1e6)
    sync(device)
    best = {k: min(v) for k, v in out.items()}
    return {"step_us": round(best["step"] - best["empty"], 2),
            "forward_hooks_us": round(best["fwd_hooked"] - best["fwd"], 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="small,medium")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default=None, help="torch.compile backend (default inductor; cpu: aot_eager)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=30, help="always-on: block pairs")
    p.add_argument("--block", type=int, default=10, help="always-on: steps per block")
    p.add_argument("--alt-steps", type=int, default=300, help="always-on: alternating single-step pairs")
    p.add_argument("--window", type=int, default=8, help="profiled steps per window")
    p.add_argument("--window-reps", type=int, default=8)
    p.add_argument("--ablate", default=None, help="a size: always-on cost by part (alternating steps)")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--keep", default=None, help="keep the run directories here")
    args = p.parse_args()
    args.backend = args.backend or ("inductor" if args.device == "cuda" else "aot_eager")
    device = torch.device(args.device)
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wb-overhead-"))
    results = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "torch": torch.__version__, "backend": args.backend, "sizes": []}
    if args.ablate:
        results["ablate"] = ablate(args.ablate, device, args, tmp)
    results["host_cost"] = host_cost_us(tmp, device)
    print(json.dumps({"host_cost": results["host_cost"]}), flush=True)
    for name in args.sizes.split(","):
        r = bench_size(name, device, args, tmp)
        results["sizes"].append(r)
        print(json.dumps(r), flush=True)
    print(f"\n{results['device']}, torch {results['torch']}, backend {args.backend}")
    for r in results["sizes"]:
        a = r["always_on"]
        print(f"{r['size']:8} A/A control (bare vs an identical bare arm): {a['ratio_control']:.4f}x; "
              f"collector vs that control: {a['ratio_vs_control']:.4f}x")
    print(f"{'size':8} {'bare ms':>8} {'+coll ms':>8} {'always-on':>9} {'(blocks)':>9} | {'prof ms':>8} "
          f"{'+coll ms':>8} {'window':>8} {'no-ranges':>9} {'prof/bare':>9}")
    for r in results["sizes"]:
        a, w = r["always_on"], r["window"]
        print(f"{r['size']:8} {a['alt_bare_ms']:8.3f} {a['alt_collector_ms']:8.3f} {a['ratio_alternating']:8.4f}x "
              f"{a['ratio_median']:8.4f}x | {statistics.median(w['bare_profiler_ms']):8.3f} "
              f"{statistics.median(w['collector_ms']):8.3f} {w['ratio_median']:7.4f}x {w['ratio_no_ranges_median']:8.4f}x "
              f"{w['profiler_vs_plain']:8.3f}x")
    hc = results["host_cost"]
    print(f"collector host time per step: {hc['step_us']:.1f} us (steps.jsonl line, CUDA events, NVTX), "
          f"+{hc['forward_hooks_us']:.1f} us per hooked forward")
    print("targets: always-on <= 1.01x, window <= 1.05x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
