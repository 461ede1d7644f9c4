"""What each thing the collector does on the training thread costs on this machine (not a test).

Two parts, in one process (CUDA initialised when there is a GPU):

1. **Per call** — each operation the collector's step code runs, timed over many calls (median and p90, µs):
   ``time.time_ns()``, ``orjson.dumps`` of a step row, an appending ``os.write`` of one line into a file in each
   of ``--dirs`` (default: the temp dir, /dev/shm, the current folder: their file systems are printed), CUDA event
   ``record`` / ``query`` / ``elapsed_time``, and a whole ``with collector.step(): pass`` for several set-ups;
   then (``--cold N``) the step's parts each right after a pass that evicts the CPU caches, as after a training
   step, where each Python call and C function costs microseconds; and (``--around N``) what ``with
   collector.step():`` adds at a step's start and end around a real ``torch.compile``d step, against the same clock
   reads with nothing around the step and against ``with nullcontext():``.
2. **In a training loop** (``--steps N``, 0 to skip) — the small eager model of bench/overhead.py; every round runs
   one step of each condition in a random order: ``bare``; ``collector`` (default options, no profiler window);
   ``sync_write`` (the same, but ``steps.jsonl`` formatted and written on the training thread at every step, as
   before the step writer process); ``no_device_timing``. Per condition minus ``bare`` of the same round: the median
   difference of wall time and of the training thread's CPU time, with a bootstrap 95 % interval (µs).

Where system calls are slow (gVisor on the device machine; NFS or Lustre on clusters) part 1 shows it directly.

    python bench/host_costs.py [--reps 3000] [--cold 500] [--steps 1500] [--around 300] [--shape small]
        [--dirs /tmp,/dev/shm,.] [--json out.json]
    python bench/host_costs.py --smoke           # CPU, few repetitions; no claims
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import overhead  # noqa: E402  (bench/overhead.py: shapes, the workbench import on the device machine)


def _per_call(fn: Callable[[], Any], reps: int) -> dict[str, float]:
    """Median and p90 of one call of ``fn`` (µs), timed call by call."""
    for _ in range(min(reps, 200)):
        fn()
    times = []
    clock = time.perf_counter_ns
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append((clock() - t0) / 1e3)
    times.sort()
    return {"median_us": round(times[len(times) // 2], 2), "p90_us": round(times[int(len(times) * 0.9)], 2)}


def _fs_type(path: str) -> str:
    try:
        out = subprocess.run(["df", "-T", path], capture_output=True, text=True, timeout=10).stdout.split("\n")
        return out[1].split()[1] if len(out) > 1 and out[1].split() else "?"
    except Exception:
        return "?"


def per_call_costs(reps: int, dirs: list[str]) -> dict[str, Any]:
    import orjson
    import torch

    from workbench.collectors import Collector

    out: dict[str, Any] = {}
    row = {"step": 123456, "start_ns": time.time_ns(), "end_ns": time.time_ns(), "data_wait_ns": 1234,
           "profiled": False}
    out["time.time_ns"] = _per_call(time.time_ns, reps)
    out["orjson.dumps(row)"] = _per_call(lambda: orjson.dumps(row) + b"\n", reps)
    line = orjson.dumps(row) + b"\n"
    for d in dirs:
        folder = Path(tempfile.mkdtemp(prefix="wb-costs-", dir=d))
        fd = os.open(folder / "steps.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        out[f"os.write line ({d}, {_fs_type(str(folder))})"] = _per_call(lambda: os.write(fd, line), reps)
        os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
    if torch.cuda.is_available():
        torch.cuda.init()
        x = torch.ones(1 << 16, device="cuda")
        events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 400)]
        it = iter(events)
        out["cuda Event.record"] = _per_call(lambda: next(it).record(), reps)
        torch.cuda.synchronize()
        e0, e1 = events[0], events[-1]
        e1.record()
        torch.cuda.synchronize()
        out["cuda Event.query (completed)"] = _per_call(e1.query, reps)
        out["cuda Event.elapsed_time"] = _per_call(lambda: e0.elapsed_time(e1), reps)
        out["torch op x.add_(1) (launch)"] = _per_call(lambda: x.add_(1), reps)
        torch.cuda.synchronize()
    out["torch.compiler.is_compiling"] = _per_call(torch.compiler.is_compiling, reps)
    out["torch.autograd._profiler_enabled"] = _per_call(torch.autograd._profiler_enabled, reps)
    setups = {"default, no window": {"profile_repeat": 0},
              "steps only": {"profile_repeat": 0, "compile_capture": False, "device_timing": False, "nvtx": False},
              "default, no window, device timing every step": {"profile_repeat": 0, "device_timing_every": 1}}
    for name, options in setups.items():
        for sync in (False, True):
            c = Collector(tempfile.mkdtemp(prefix="wb-costs-"), **options)
            c.start()
            if sync:
                overhead.write_every_step(c)   # steps.jsonl written on this thread at every step
            ctx = c.step

            def one() -> None:
                with ctx():
                    pass

            key = f"with collector.step(): pass — {name}" + (", sync write" if sync else "")
            out[key] = _per_call(one, reps)
            c.close()
            shutil.rmtree(c.path, ignore_errors=True)
    return out


def started_per_step_impl(prefix: str) -> dict[str, Any]:
    """A started collector (default options, no profiler window) per step context built here ("c", "python"), each
    in a scratch folder named ``prefix...``."""
    from workbench.collectors import Collector
    from workbench.collectors.collector import STEP_IMPL_ENV, STEP_IMPLS

    before = os.environ.get(STEP_IMPL_ENV)
    out = {}
    try:
        for impl in STEP_IMPLS:
            os.environ[STEP_IMPL_ENV] = impl      # read when the Collector is made
            out[impl] = Collector(tempfile.mkdtemp(prefix=prefix), profile_repeat=0).start()
    finally:
        if before is None:
            os.environ.pop(STEP_IMPL_ENV, None)
        else:
            os.environ[STEP_IMPL_ENV] = before
    return out


def cold_call_costs(reps: int, evict_mb: int = 32) -> dict[str, Any]:
    """Per call right after a pass over ``evict_mb`` MB that evicts the CPU caches (as a training step does):
    the calls in a random order every round, each timed alone; median µs, and the median minus that of an empty
    Python call (``empty call``), which is what the call adds."""
    from workbench.collectors.collector import STEP_IMPLS
    from workbench.collectors.step_log import StepLog

    evict = overhead.cache_evictor(evict_mb)
    collectors = started_per_step_impl("wb-costs-")
    c = collectors[STEP_IMPLS[0]]
    steps = StepLog(c.path / "ring-only.jsonl", on_error=lambda exc: None)  # not the collector's: its step context
    #                                                                        stores into that ring between records

    def empty() -> None:
        pass

    def null() -> None:
        with contextlib.nullcontext():
            pass

    def two_time_ns() -> None:
        time.time_ns()
        time.time_ns()

    def ring_record() -> None:
        steps.record(1, 2, 3, 3, 0)

    def stepper(collector: Any) -> Callable[[], None]:
        def step() -> None:
            with collector.step():
                pass
        return step

    calls: dict[str, Callable[[], Any]] = {
        "empty call": empty, "with nullcontext(): pass": null, "time.time_ns() x2": two_time_ns,
        "StepLog.record (the step ring)": ring_record,
        **{f"with collector.step(): pass — default, no window [{impl}]": stepper(col)
           for impl, col in collectors.items()}}
    times: dict[str, list[float]] = {k: [] for k in calls}
    rng = random.Random(0)
    clock = time.perf_counter_ns
    for _ in range(reps):
        order = list(calls)
        rng.shuffle(order)
        for name in order:
            evict()
            fn = calls[name]
            t0 = clock()
            fn()
            times[name].append((clock() - t0) / 1e3)
    for col in collectors.values():
        col.close()
        shutil.rmtree(col.path, ignore_errors=True)
    steps.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"evict_mb": evict_mb, "reps": reps,
            "calls": {k: {"median_us": round(v, 2), "extra_us": round(v - med["empty call"], 2)}
                      for k, v in med.items()}}


def _ci(values: list[float], rng: random.Random, n: int = 2000) -> list[float]:
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return [round(meds[int(n * 0.025)], 1), round(meds[int(n * 0.975)], 1)]


def training_loop_costs(steps: int, device_name: str, shape: str) -> dict[str, Any]:
    """Per round one step of every condition, shuffled; each condition's cost as the median of its difference
    to ``bare`` in the same round (wall and thread CPU, µs), with a bootstrap interval."""
    from workbench.collectors import Collector

    body = overhead.training_step(shape, device_name)
    collectors = {
        "collector": Collector(tempfile.mkdtemp(prefix="wb-loop-"), profile_repeat=0),
        "sync_write": Collector(tempfile.mkdtemp(prefix="wb-loop-"), profile_repeat=0),
        "no_device_timing": Collector(tempfile.mkdtemp(prefix="wb-loop-"), profile_repeat=0, device_timing=False),
    }
    for c in collectors.values():
        c.start()
    overhead.write_every_step(collectors["sync_write"])
    ctxs: dict[str, Callable[[], Any] | None] = {"bare": None, **{k: c.step for k, c in collectors.items()}}
    wall: dict[str, list[float]] = {k: [] for k in ctxs}
    cpu: dict[str, list[float]] = {k: [] for k in ctxs}
    for _ in range(20):
        body()
    rng = random.Random(0)
    for _ in range(steps):
        order = list(ctxs)
        rng.shuffle(order)
        for name in order:
            step = ctxs[name]
            c0 = time.thread_time_ns()
            t0 = time.perf_counter_ns()
            if step is None:
                body()        # bare: no context manager around the step, as in a user's loop
            else:
                with step():
                    body()
            wall[name].append((time.perf_counter_ns() - t0) / 1e3)
            cpu[name].append((time.thread_time_ns() - c0) / 1e3)
    for c in collectors.values():
        c.close()
        shutil.rmtree(c.path, ignore_errors=True)
    out: dict[str, Any] = {"shape": shape, "eager": True, "rounds": steps,
                           "bare_median_us": {"wall": round(statistics.median(wall["bare"]), 1),
                                              "cpu": round(statistics.median(cpu["bare"]), 1)},
                           "errors": {k: c.errors for k, c in collectors.items() if c.errors}}
    for name in collectors:
        for label, series in (("wall", wall), ("cpu", cpu)):
            diffs = [a - b for a, b in zip(series[name], series["bare"])]
            out.setdefault(name, {})[f"{label}_extra_us"] = round(statistics.median(diffs), 1)
            out[name][f"{label}_extra_ci95_us"] = _ci(diffs, rng)
    return out


def wrapper_costs(rounds: int, device_name: str, shape: str, compile_backend: str | None) -> dict[str, Any]:
    """What the step's wrapper adds at its start and at its end, around a real (compiled) training step: every
    round one step of each condition in a random order, with a clock read before and after the ``with`` and at the
    first and last line inside it; ``bare`` reads the same clocks with nothing around the step. Per condition the
    median µs of the entry (``with`` line to first line inside) and of the exit (last line to after the ``with``),
    and what the wrapper adds over ``bare``: their sum minus bare's, as a median (the common step) and as a mean
    (every step counts: also the collector's every 100th, CUDA-timed, step, which goes through the full path).
    The collectors have default options, no profiler window; one runs its step context in C
    (collectors/_fast_step.c, where built), one in Python."""
    body = overhead.training_step(shape, device_name, compile_backend)
    collectors = started_per_step_impl("wb-around-")
    null = contextlib.nullcontext()
    clock = time.perf_counter_ns

    def bare() -> tuple[int, int]:
        a = clock()
        b = clock()
        body()
        c = clock()
        d = clock()
        return b - a, d - c

    def wrapped(make: Callable[[], Any]) -> Callable[[], tuple[int, int]]:
        def run() -> tuple[int, int]:
            a = clock()
            with make():
                b = clock()
                body()
                c = clock()
            d = clock()
            return b - a, d - c
        return run

    conditions = {"bare": bare, "with nullcontext()": wrapped(lambda: null),
                  **{f"with collector.step() [{impl}]": wrapped(c.step) for impl, c in collectors.items()}}
    for _ in range(20):
        body()
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in conditions}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(conditions)
        rng.shuffle(order)
        for name in order:
            enter, leave = conditions[name]()
            times[name][0].append(enter / 1e3)
            times[name][1].append(leave / 1e3)
    for c in collectors.values():
        c.close()
        shutil.rmtree(c.path, ignore_errors=True)
    bare_sum = [e + x for e, x in zip(*times["bare"])]
    out: dict[str, Any] = {"shape": shape, "compile": compile_backend or "inductor", "rounds": rounds,
                           "errors": {k: c.errors for k, c in collectors.items() if c.errors}, "conditions": {}}
    for name, (enters, exits) in times.items():
        added = [e + x - b for e, x, b in zip(enters, exits, bare_sum)]   # paired with bare's step of the round
        out["conditions"][name] = {
            "enter_us": round(statistics.median(enters), 2), "exit_us": round(statistics.median(exits), 2),
            "extra_us": round(statistics.median(added), 2), "extra_ci95_us": _ci(added, rng),
            "extra_mean_us": round(statistics.fmean(added), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3000)
    p.add_argument("--steps", type=int, default=1500, help="rounds of the training-loop part (0: skip it)")
    p.add_argument("--shape", default="small", choices=sorted(overhead.SHAPES))
    p.add_argument("--dirs", default=None, help="comma-separated folders to time os.write in")
    p.add_argument("--cold", type=int, default=500,
                   help="rounds of the per-call part with the caches evicted (0: skip)")
    p.add_argument("--around", type=int, default=0,
                   help="rounds of the step wrapper's entry and exit timed around a compiled step (0: skip)")
    p.add_argument("--device", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--smoke", action="store_true", help="CPU, few repetitions (a test); no claims")
    args = p.parse_args(argv)
    overhead._import_workbench()
    import torch

    if args.smoke:
        args.reps, args.steps, args.shape, args.cold = 50, 3, "tiny", min(args.cold, 5)
        args.around = min(args.around, 3)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dirs = args.dirs.split(",") if args.dirs else [tempfile.gettempdir(), "/dev/shm", os.getcwd()]
    dirs = [d for d in dirs if os.path.isdir(d) and os.access(d, os.W_OK)]
    from workbench.collectors.collector import STEP_IMPLS

    result: dict[str, Any] = {"torch": torch.__version__, "device": device, "python": sys.version.split()[0],
                              "step_impls": list(STEP_IMPLS), "per_call": per_call_costs(args.reps, dirs)}
    print(f"step contexts built: {', '.join(STEP_IMPLS)} (the first is the default)")
    for name, cost in result["per_call"].items():
        print(f"{cost['median_us']:10.2f} µs  (p90 {cost['p90_us']:9.2f})  {name}")
    if args.cold:
        cold = cold_call_costs(args.cold)
        result["cold"] = cold
        print(f"after a {cold['evict_mb']} MB pass that evicts the caches ({cold['reps']} rounds):")
        for name, cost in cold["calls"].items():
            print(f"{cost['median_us']:10.2f} µs  (+{cost['extra_us']:6.2f} over an empty call)  {name}")
    if args.steps:
        loop = training_loop_costs(args.steps, device, args.shape)
        result["training_loop"] = loop
        print(f"training loop ({loop['shape']}, eager, {loop['rounds']} rounds): bare step "
              f"{loop['bare_median_us']['wall']:.0f} µs wall, {loop['bare_median_us']['cpu']:.0f} µs CPU")
        for name in ("collector", "sync_write", "no_device_timing"):
            r = loop[name]
            print(f"  {name:18s} +{r['wall_extra_us']:7.1f} µs wall {r['wall_extra_ci95_us']}   "
                  f"+{r['cpu_extra_us']:7.1f} µs CPU {r['cpu_extra_ci95_us']}")
    if args.around:
        around = wrapper_costs(args.around, device, args.shape, "eager" if args.smoke else None)
        result["around"] = around
        print(f"the step wrapper around a {around['compile']} {around['shape']} step ({around['rounds']} rounds):")
        for name, cost in around["conditions"].items():
            print(f"  enter {cost['enter_us']:7.2f} µs  exit {cost['exit_us']:7.2f} µs  added over bare: median "
                  f"{cost['extra_us']:+7.2f} µs {cost['extra_ci95_us']}, mean {cost['extra_mean_us']:+7.2f} µs  {name}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
