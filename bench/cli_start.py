"""Start-up time of the CLI: ``workbench --help`` (and any other command line given) against ``python -c "import
polars"``, the floor every command pays, each run in a fresh process, interleaved so both see the same load.

    python bench/cli_start.py                         # 21 rounds: --help vs import polars, the ratio, the target
    python bench/cli_start.py --rounds 41 --also "faults list" "recommend sample_traces/cpu-recompile-before -o /tmp/x.toml"
    python bench/cli_start.py --imports               # also the slowest imports of `workbench --help`

Wall time per process (what a user waits) and its CPU time (user + system, from ``wait4``: less sensitive to
other work on a shared machine). Each line gives the median and the spread (p10-p90 of the rounds); the ratio is
of the medians, with a bootstrap 90 % interval over the rounds. Exits 1 when the median wall time of
``workbench --help`` is over ``--target`` seconds (default 0.3, issue 32).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _workbench() -> list[str]:
    """The installed console script beside this Python, else the module."""
    exe = Path(sys.executable).parent / "workbench"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "workbench.cli"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one run of ``argv`` (output discarded)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def ratio_interval(a: list[float], b: list[float], draws: int = 2000) -> tuple[float, float]:
    """Bootstrap 90 % interval of median(a) / median(b) (rounds resampled in pairs: they ran back to back)."""
    rng = random.Random(0)
    n = len(a)
    out = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        out.append(statistics.median(a[i] for i in idx) / statistics.median(b[i] for i in idx))
    return quantile(out, 0.05), quantile(out, 0.95)


def describe(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} s (p10-p90 {quantile(xs, 0.1):.3f}-{quantile(xs, 0.9):.3f})"


def slowest_imports(argv: list[str], top: int) -> list[tuple[float, str]]:
    """The ``top`` imports with the largest cumulative time in one run of ``argv`` (``python -X importtime``)."""
    cmd = [sys.executable, "-X", "importtime", "-c",
           "import sys; from workbench.cli import main; sys.argv = ['workbench'] + sys.argv[1:]; main()", *argv]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    rows = []
    for line in res.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]) / 1e6, parts[2].rstrip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=21, help="fresh processes per command (default 21)")
    p.add_argument("--also", nargs="*", default=[], metavar="ARGS",
                   help="other workbench command lines to time the same way (quoted, e.g. \"faults list\")")
    p.add_argument("--target", type=float, default=0.3, help="seconds `workbench --help` may take (median wall)")
    p.add_argument("--imports", action="store_true", help="also list the slowest imports of `workbench --help`")
    args = p.parse_args(argv)
    if args.rounds < 3:
        p.error("--rounds must be at least 3")

    wb = _workbench()
    cases = {"python -c 'import polars'": [sys.executable, "-c", "import polars"], "workbench --help": [*wb, "--help"]}
    for extra in args.also:
        cases[f"workbench {extra}"] = [*wb, *shlex.split(extra)]
    for argv_ in cases.values():   # one warm-up each: the first run pays the disk cache
        timed(argv_)
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    failed: dict[str, int] = {}
    load0 = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, argv_ in cases.items():
            w, c, rc = timed(argv_)
            wall[name].append(w)
            cpu[name].append(c)
            if rc:
                failed[name] = rc
    load1 = os.getloadavg()[0]

    print(f"CLI start-up, {args.rounds} rounds each, interleaved; {os.cpu_count()} CPUs, load average "
          f"{load0:.1f} at the start and {load1:.1f} at the end; Python {sys.version.split()[0]}")
    width = max(map(len, cases))
    for name in cases:
        note = f"  (exit status {failed[name]})" if name in failed else ""
        print(f"  {name:<{width}}  wall {describe(wall[name])}  CPU {describe(cpu[name])}{note}")
    base = "python -c 'import polars'"
    for name in cases:
        if name == base:
            continue
        r = statistics.median(wall[name]) / statistics.median(wall[base])
        lo, hi = ratio_interval(wall[name], wall[base])
        rc = statistics.median(cpu[name]) / statistics.median(cpu[base])
        print(f"start-up ratio {name} / import polars: {r:.2f}x wall (90 % interval {lo:.2f}-{hi:.2f}), "
              f"{rc:.2f}x CPU")
    help_wall = statistics.median(wall["workbench --help"])
    ok = help_wall <= args.target
    print(f"workbench --help: {help_wall:.3f} s median wall, target {args.target:.2f} s: {'met' if ok else 'NOT met'}")
    if args.imports:
        print("slowest imports of `workbench --help` (cumulative, one run):")
        for secs, mod in slowest_imports(["--help"], 15):
            print(f"  {secs * 1000:7.1f} ms  {mod.strip()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
