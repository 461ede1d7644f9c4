"""The cost of the collector's call-site scan (``collectors/source_sites.py``) as a share of a run (not a test).

The scan is the collector's one piece of work that reads the user's source: at the first ``with collector.step():``
it notes the user's frames (``call_site``), and at ``close()`` rank 0 parses those files with :mod:`ast`
(``scan_safely``: the loop, the DataLoader, sync calls, optimizer constructions...). Nothing runs per step after
the first, so its cost is a fixed amount per run. Two measurements:

* **in the run** (``scan`` arm): a real CPU training loop (an MLP, AdamW, the collector with its default profiler
  window) in a fresh process per run; the script times the collector's own calls of ``call_site`` and
  ``scan_safely`` there (wrapped, so exactly the work the collector does) and the run's wall time, from entering
  ``with collector`` to leaving it (close included). Share = (call_site + scan) / run wall time; also per step.
* **against a run without it** (``off`` arm): the same process with ``call_site`` and ``scan_safely`` replaced by
  no-ops; the arms alternate in rounds (random order each round, seeded), the paired ratio scan/off of the run
  wall times is printed with its spread (it is within the run-to-run noise, which the direct share is not).

Each round also times ``scan_safely`` alone on this file and on a large real script (``--big``, default
torch's ``nn/modules/module.py``) 20 times: median and spread.

    python bench/source_scan_cost.py --rounds 9 --steps 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child(arm: str, steps: int, out: str) -> None:
    """One run of the training loop with the scan on (``scan``) or replaced by no-ops (``off``)."""
    import torch

    from workbench.collectors import Collector, source_sites

    timed = {"call_site": 0, "scan": 0}
    real_site, real_scan = source_sites.call_site, source_sites.scan_safely

    def call_site(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return real_site(*a, **k) if arm == "scan" else None
        finally:
            timed["call_site"] += time.perf_counter_ns() - t0

    def scan_safely(frames: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return real_scan(frames) if arm == "scan" else {}
        finally:
            timed["scan"] += time.perf_counter_ns() - t0

    source_sites.call_site, source_sites.scan_safely = call_site, scan_safely
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 256)
    step_ns: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        t_run = time.perf_counter_ns()
        with Collector(Path(tmp) / "run") as collector:
            for _ in range(steps):
                t0 = time.perf_counter_ns()
                with collector.step():
                    model(x).pow(2).mean().backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                step_ns.append(time.perf_counter_ns() - t0)
        run_ns = time.perf_counter_ns() - t_run
        meta = json.loads((Path(tmp) / "run" / "run.json").read_text())
    Path(out).write_text(json.dumps({"arm": arm, "run_ns": run_ns, "step_ns": statistics.median(step_ns),
                                     "call_site_ns": timed["call_site"], "scan_ns": timed["scan"],
                                     "sites": len((meta.get("source_sites") or {}).get("sites") or [])}))


def scan_alone(path: str, line: int, repeats: int = 20) -> list[int]:
    """``scan_safely`` of one ``(file, line)`` frame, ``repeats`` times (ns each)."""
    from workbench.collectors.source_sites import scan_safely

    out = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        scan_safely(((path, line),))
        out.append(time.perf_counter_ns() - t0)
    return out


def _spread(v: list[float]) -> str:
    v = sorted(v)
    q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
    return f"median {statistics.median(v):.4g} (IQR {q[0]:.4g}-{q[2]:.4g}, min {v[0]:.4g}, max {v[-1]:.4g}, n={len(v)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--big", default=None, help="a large script to scan alone (default: torch's nn/modules/module.py)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", choices=("scan", "off"), default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.steps, a.out)
        return 0
    big = a.big
    if big is None:
        import torch

        big = str(Path(torch.__file__).parent / "nn" / "modules" / "module.py")
    this_line = next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1)
                     if "with collector.step():" in ln)
    rng = random.Random(a.seed)
    runs: list[dict[str, Any]] = []
    alone: dict[str, list[int]] = {"this": [], "big": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            arms = ["scan", "off"]
            rng.shuffle(arms)
            for arm in arms:
                out = Path(tmp) / f"{r}-{arm}.json"
                subprocess.run([sys.executable, __file__, "--child", arm, "--steps", str(a.steps), "--out", str(out)],
                               check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                runs.append({"round": r, **json.loads(out.read_text())})
            alone["this"] += scan_alone(__file__, this_line)
            alone["big"] += scan_alone(big, 100)
    on = [x for x in runs if x["arm"] == "scan"]
    off = {x["round"]: x for x in runs if x["arm"] == "off"}
    cost = [x["call_site_ns"] + x["scan_ns"] for x in on]
    share = [100.0 * c / x["run_ns"] for c, x in zip(cost, on)]
    per_step = [100.0 * c / (x["step_ns"] * a.steps) for c, x in zip(cost, on)]
    ratio = [on_["run_ns"] / off[on_["round"]]["run_ns"] for on_ in on]
    summary = {
        "steps": a.steps, "rounds": a.rounds, "sites_found": on[0]["sites"],
        "scan_ms": [c / 1e6 for c in cost], "run_ms": [x["run_ns"] / 1e6 for x in on],
        "off_run_ms": [x["run_ns"] / 1e6 for x in off.values()], "step_ms": [x["step_ns"] / 1e6 for x in on],
        "share_of_run_pct": share, "share_of_steps_pct": per_step, "run_ratio_scan_over_off": ratio,
        "scan_alone_this_ms": [v / 1e6 for v in alone["this"]], "scan_alone_big_ms": [v / 1e6 for v in alone["big"]],
        "big": big, "load": os.getloadavg(), "cpus": os.cpu_count(),
    }
    print(f"run: {a.steps} steps, {a.rounds} rounds; the scan found {summary['sites_found']} sites")
    print(f"scan in the run (call_site + scan_safely), ms: {_spread(summary['scan_ms'])}")
    print(f"run wall time with it, ms:                  {_spread(summary['run_ms'])}")
    print(f"run wall time without it, ms:               {_spread(summary['off_run_ms'])}")
    print(f"median step, ms:                            {_spread(summary['step_ms'])}")
    print(f"SHARE of the run's wall time, %:            {_spread(share)}")
    print(f"share of the steps' time, %:                {_spread(per_step)}")
    print(f"run wall ratio scan/off (paired):           {_spread(ratio)}")
    print(f"scan_safely alone, this file, ms:           {_spread(summary['scan_alone_this_ms'])}")
    print(f"scan_safely alone, {Path(big).name} ({sum(1 for _ in open(big))} lines), ms: "
          f"{_spread(summary['scan_alone_big_ms'])}")
    print(f"load average {summary['load']}, {summary['cpus']} CPUs")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
