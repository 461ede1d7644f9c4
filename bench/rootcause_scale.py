#!/usr/bin/env python
"""Analysing a compile log is linear in its compilations: ``analyze`` (every analysis, root-cause attribution
included) on generated TORCH_TRACE logs of 10k, 20k and 100k compilations, time per compilation.

The logs are :mod:`compile_scale`'s (one record = one compilation of a new frame with a guard failure, so every
compilation becomes a recompile finding of its own: the worst case for attributing findings to their time). The
time is ``workbench.open`` once, then ``analyze`` (``--repeat`` times, median; wall and CPU seconds of the process).
Linear attribution shows as a flat time per compilation from 10k to 100k. Run:

    . .venv/bin/activate
    python bench/rootcause_scale.py                       # 10k, 20k, 100k compilations, 1 repeat
    python bench/rootcause_scale.py --sizes 10000 40000 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 20_000, 100_000])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    import compile_scale

    import workbench
    from workbench.analyses.summary import analyze

    rows = []
    for n in args.sizes:
        run = workbench.open(compile_scale.build(n))
        assert run.compiles.height == n, (run.compiles.height, n)
        wall, cpu, found = [], [], 0
        for _ in range(args.repeat):
            t, c = time.perf_counter(), time.process_time()
            found = len(analyze(run)["findings"])
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        w, c = statistics.median(wall), statistics.median(cpu)
        rows.append((n, found, w, c, w / n * 1e6, c / n * 1e6))
    print(f"`python bench/rootcause_scale.py` — analyze on generated compile logs (one new frame and one recompile "
          f"finding per compilation); median of {args.repeat}. {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}.\n")
    print("| compilations | findings | analyze s | CPU s | µs per compilation (wall) | µs per compilation (CPU) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, found, w, c, pw, pc in rows:
        print(f"| {n:,} | {found:,} | {w:.1f} | {c:.1f} | {pw:.0f} | {pc:.0f} |")
    first = rows[0][5]
    print(f"\nCPU time per compilation, largest / smallest: {rows[-1][5] / first:.2f}× (linear: ≈ 1×).")


if __name__ == "__main__":
    main()
