"""Cost of hang capture and of the Flight Recorder on a training step (one gloo rank, CPU), as ratios.

Configurations, each in a fresh process (the Flight Recorder buffer is read when the process group is created),
run interleaved ``--repeats`` times:

* ``baseline``: the collector with hang capture off, ``TORCH_FR_BUFFER_SIZE=0``;
* ``fr_on``: the collector with hang capture off, the Flight Recorder at torch's default (gloo records by default);
* ``hang_capture``: what a user gets — the collector with hang capture on (watchdog thread, faulthandler, exit
  dump, the periodic Flight Recorder dumps that keep every step's collectives: docs/critical-path.md) and the Flight
  Recorder on;
* ``no_periodic``: the same with the periodic dumps off (``WORKBENCH_FR_DUMP_BUDGET=0``).

For the periodic dumps it also prints what the collector measured of them itself (``fr_dump`` events of
``rank0/hang/events.jsonl``): how many, entries lost, and their time as a share of the run's wall time — the
training thread's cost bound (a dump holds the GIL), never above the budget (``FR_DUMP_BUDGET``, 0.1 %).
``--buffer N`` sets ``TORCH_FR_BUFFER_SIZE`` (default: the collector's 2000) so that short runs dump too.

Each step is a small forward/backward plus one blocking ``all_reduce`` (the collective is where the Flight
Recorder adds its entry). Prints the median step time and the process CPU time per step per configuration and
their ratios to ``baseline``, then the calling thread's CPU time per tiny ``all_reduce`` (the Flight Recorder's
own per-collective cost); no assertion (timing belongs here, not in tests). On a loaded machine read the CPU
columns: wall times there measure the other tenants.

    python bench/hang_overhead.py [--steps 3000] [--repeats 3] [--buffer 2000] [--step-ms 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r'''
import json, os, socket, sys, time
import torch, torch.distributed as dist
from workbench.collectors import Collector, hang_capture
config, steps, out, step_s = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
if config not in ("hang_capture", "no_periodic"):
    hang_capture.start = lambda *a, **k: None        # the collector without hang capture
torch.set_num_threads(1)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 1))
x = torch.randn(32, 64)
grad = torch.zeros(64 * 64 + 64 + 64 + 1)
times = []
with Collector(out, profile_repeat=0, compile_capture=False) as c:
    for step in range(steps):
        if step == steps // 10:
            cpu0, w0 = time.process_time_ns(), time.perf_counter_ns()
        t0 = time.perf_counter_ns()
        with c.step():
            model(x).sum().backward()
            dist.all_reduce(grad)
            model.zero_grad(set_to_none=True)
            if step_s:
                time.sleep(step_s)                     # a longer step (--step-ms): fewer collectives a second
        times.append(time.perf_counter_ns() - t0)
    cpu = (time.process_time_ns() - cpu0) / (steps - steps // 10)
    wall = (time.perf_counter_ns() - w0) / (steps - steps // 10)
# the Flight Recorder's own cost per collective: the calling thread's CPU time per tiny all_reduce
tiny = torch.ones(4)
for _ in range(200):
    dist.all_reduce(tiny)
t0 = time.thread_time_ns()
for _ in range(steps):
    dist.all_reduce(tiny)
per_call = (time.thread_time_ns() - t0) / steps
from torch._C._distributed_c10d import _dump_fr_trace
import pickle
entries = len(pickle.loads(_dump_fr_trace())["entries"])
warm = times[steps // 10:]
ev = os.path.join(out, "rank0", "hang", "events.jsonl")
dumps = [json.loads(x) for x in open(ev) if '"fr_dump"' in x] if os.path.exists(ev) else []
cover = [json.loads(x) for x in open(ev) if '"fr_coverage"' in x] if os.path.exists(ev) else []
print(json.dumps({"config": config, "median_ns": sorted(warm)[len(warm) // 2], "mean_ns": sum(warm) / len(warm),
                  "cpu_ns": cpu, "wall_ns": wall, "call_cpu_ns": per_call, "fr_entries": entries,
                  "dumps": len(dumps), "lost": cover[0]["lost"] if cover else sum(d["lost"] for d in dumps),
                  "dump_s": sum(d["seconds"] for d in dumps),
                  "dump_wall_s": sum(d.get("wall_seconds", 0) for d in dumps),
                  "run_s": sum(times) / 1e9, "recorded": cover[0]["recorded"] if cover else None}))
'''

CONFIGS = ("baseline", "fr_on", "no_periodic", "hang_capture")


def run_one(config: str, steps: int, tmp: Path, buffer: int | None = None, step_ms: float = 0.0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    env.pop("WORKBENCH_FR_DUMP_BUDGET", None)
    if buffer is not None:
        env["TORCH_FR_BUFFER_SIZE"] = str(buffer)
    if config == "baseline":
        env["TORCH_FR_BUFFER_SIZE"] = "0"
    if config == "no_periodic":
        env["WORKBENCH_FR_DUMP_BUDGET"] = "0"
    script = tmp / "worker.py"
    script.write_text(WORKER)
    out = tmp / f"run-{config}-{os.urandom(3).hex()}"
    argv = [sys.executable, str(script), config, str(steps), str(out), str(step_ms / 1e3)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{config}: worker failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--buffer", type=int, default=None, help="TORCH_FR_BUFFER_SIZE (default: the collector's)")
    ap.add_argument("--step-ms", type=float, default=0.0, help="sleep this long in every step (a longer step)")
    args = ap.parse_args(argv)
    results: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for c in CONFIGS:
                results[c].append(run_one(c, args.steps, Path(tmp), args.buffer, args.step_ms))
    base = statistics.median(r["median_ns"] for r in results["baseline"])
    base_cpu = statistics.median(r["cpu_ns"] for r in results["baseline"])
    print(f"{'config':14s} {'median step':>12s} {'ratio':>7s} {'CPU/step':>10s} {'ratio':>7s} {'FR entries':>10s}"
          f"  (each: median of {args.repeats} processes × {args.steps} steps; CPU = the process's, all threads)")
    for c in CONFIGS:
        med = statistics.median(r["median_ns"] for r in results[c])
        cpu = statistics.median(r["cpu_ns"] for r in results[c])
        each = " ".join(f"{r['cpu_ns'] / 1e3:.0f}" for r in results[c])
        print(f"{c:14s} {med / 1e3:10.1f} µs {med / base:7.3f} {cpu / 1e3:8.1f} µs {cpu / base_cpu:7.3f} "
              f"{results[c][0]['fr_entries']:>10d}  [CPU µs: {each}]")
    print("\nperiodic Flight Recorder dumps, as the collector measured them (hang_capture):")
    for r in results["hang_capture"]:
        share = 100 * r["dump_s"] / r["run_s"] if r["run_s"] else 0.0
        print(f"  {r['dumps']:4d} dumps, {r['lost']} of {r['recorded']} entries lost, "
              f"{1e3 * r['dump_s']:.1f} ms of CPU "
              "holding the GIL "
              f"({1e3 * r['dump_wall_s']:.1f} ms wall with the gzip and write) over {r['run_s']:.1f} s of steps: "
              f"{share:.3f} % (budget 0.1 %)")
    base_call = statistics.median(r["call_cpu_ns"] for r in results["baseline"])
    print("\ncalling thread's CPU per tiny all_reduce (the Flight Recorder's own cost is the difference):")
    for c in CONFIGS:
        call = statistics.median(r["call_cpu_ns"] for r in results[c])
        print(f"{c:14s} {call / 1e3:8.1f} µs  (+{(call - base_call) / 1e3:.1f} µs vs baseline)")


if __name__ == "__main__":
    main()
