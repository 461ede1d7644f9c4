#!/usr/bin/env python
"""Analyses speed benchmark: every workbench analysis against HTA's equivalents, on the same input, in one run.

The input is BUILT, not collected: the steps of a real two-rank H200 NCCL trace
(``tests/data/traces/h200-probe/nccl2c_r{0,1}.json``) are repeated with times shifted by whole steps and ids offset
(the generator of ``bench/ingest.py``) until every rank holds ``--events`` events (default 1M); 8 ranks by
default. Files go to ``bench/_data/`` (git-ignored) and are reused.

Timed (wall clock, after the traces are loaded; loading is reported apart):

| workbench (``workbench.analyses``)                          | HTA 0.5 (``TraceAnalysis``)                   |
| ----------------------------------------------------------- | --------------------------------------------- |
| ``time_breakdown`` + ``breakdown_by_rank``                  | ``get_temporal_breakdown``                    |
| ``comm_compute_overlap(time_breakdown(...))``               | ``get_comm_comp_overlap``                     |
| ``idle_gaps`` + ``idle_causes`` (every rank and stream)     | ``get_idle_time_breakdown`` (every rank)      |
| ``top_kernels``                                             | ``get_gpu_kernel_breakdown``                  |
| ``launch_stats``                                            | ``get_cuda_kernel_launch_stats`` (every rank) |
| ``analysis_tables`` (all analyses + findings, incl. the     | sum of the five above                         |
| collectives, stragglers, bubbles HTA has no match for)     |                                               |

HTA runs in its own venv (``--hta-python``, default ``/tmp/hta-venv/bin/python``; created with
``pip install holistictraceanalysis`` when missing). Run:

    . .venv/bin/activate
    python bench/analyses.py              # build (once) + measure + print the table
    python bench/analyses.py --readme     # ... and rewrite the "Analyses" section of bench/README.md
    python bench/analyses.py --reuse-hta  # HTA's times from the last run on the same input (saved as hta.json)
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "_data"
SEEDS = [ROOT / "tests/data/traces/h200-probe/nccl2c_r0.json.gz",
         ROOT / "tests/data/traces/h200-probe/nccl2c_r1.json.gz"]
BUILD_VERSION = 1
TARGET = 0.1  # workbench time / HTA time <=


def _ingest_module():
    spec = importlib.util.spec_from_file_location("_bench_ingest", HERE / "ingest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _write_rank(path: Path, seed: Path, rank: int, world: int, events_target: int) -> dict[str, Any]:
    import orjson

    ing = _ingest_module()
    doc = orjson.loads(gzip.decompress(seed.read_bytes()))
    events = doc.pop("traceEvents")
    info = ing._seed_info(events)
    di = dict(doc.get("distributedInfo") or {})
    di.update(rank=rank, world_size=world)
    di["pg_config"] = [dict(pg, pg_size=world, ranks=list(range(world))) for pg in di.get("pg_config") or []]
    header = {"distributedInfo": di, **{k: v for k, v in doc.items() if k != "distributedInfo"}}
    head = json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n'
    fixed = [e for e in events if e.get("ph") == "M"]
    per_copy = len([e for e in events if e.get("ph") != "M" and e.get("cat") != "Trace"])
    copies = max(1, -(-(events_target - len(fixed)) // per_copy))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(head.encode())
        f.write(b",\n".join(orjson.dumps(e) for e in fixed))
        for k in range(copies):
            f.write(b",\n" + b",\n".join(orjson.dumps(e) for e in ing._copy_events(events, k, info)))
        f.write(b"\n]}\n")
    os.replace(tmp, path)
    return {"file": path.name, "bytes": path.stat().st_size, "events": len(fixed) + copies * per_copy,
            "copies": copies, "steps": copies * len(info["steps"])}


def build(ranks: int, events: int, log) -> tuple[Path, dict[str, Any]]:
    folder = DATA / f"analyses-{ranks}x{events}" / "json"
    manifest_path = folder.parent / "manifest.json"
    want = {"version": BUILD_VERSION, "ranks": ranks, "events": events}
    if manifest_path.is_file():
        m = json.loads(manifest_path.read_text())
        if all(m.get(k) == v for k, v in want.items()) and all(
                (folder / f["file"]).is_file() and (folder / f["file"]).stat().st_size == f["bytes"] for f in m["files"]):
            log(f"reusing built input {folder}")
            return folder, m
    missing = [s for s in SEEDS if not s.is_file()]
    if missing:
        raise SystemExit(f"seed trace not found: {missing[0]} (tests/data/traces is part of the repository)")
    log(f"building input: {ranks} ranks x {events:,} events from {SEEDS[0].name}, {SEEDS[1].name} ...")
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*"):
        if old.is_file():
            old.unlink()
    t0 = time.perf_counter()
    files = [_write_rank(folder / f"rank-{r}.json", SEEDS[r % 2], r, ranks, events) for r in range(ranks)]
    m = {**want, "files": files, "built_s": round(time.perf_counter() - t0, 1)}
    manifest_path.write_text(json.dumps(m, indent=2))
    return folder, m


# --- workbench ----------------------------------------------------------------------------------------------


def run_workbench(folder: Path, repeat: int) -> dict[str, Any]:
    import polars as pl

    import workbench
    from workbench.analyses.breakdown import breakdown_by_rank, idle_causes, idle_gaps, time_breakdown
    from workbench.analyses.kernels import launch_stats, top_kernels
    from workbench.analyses.overlap import comm_compute_overlap
    from workbench.analyses.summary import analysis_tables
    from workbench.analyses.window import window_kernels

    t0 = time.perf_counter()
    run = workbench.open(folder)
    k, s = run.kernels, run.steps
    _ = (run.events, run.collectives)
    load = time.perf_counter() - t0

    def kw():
        return window_kernels(k, s)

    cases = {
        "temporal breakdown": lambda: breakdown_by_rank(time_breakdown(k, s)),
        "comm/compute overlap": lambda: comm_compute_overlap(breakdown_by_rank(time_breakdown(k, s))),
        "idle time breakdown": lambda: idle_causes(idle_gaps(k, s)),
        "kernel breakdown": lambda: top_kernels(kw()),
        "kernel launch stats": lambda: launch_stats(kw()),
        "all analyses": lambda: analysis_tables(run),
    }
    out: dict[str, Any] = {"load_s": load, "events": run.events.height, "kernels": k.height,
                           "threads": pl.thread_pool_size()}
    for name, fn in cases.items():
        best = min(_timed(fn) for _ in range(repeat))
        out[name] = best
    out["findings"] = analysis_tables(run).findings.select("kind", "cost_ns").to_dicts()
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- HTA (in its own venv) ----------------------------------------------------------------------------------

HTA_CHILD = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
folder = sys.argv[1]
t0 = time.perf_counter(); ta = TraceAnalysis(trace_dir=folder); load = time.perf_counter() - t0
ranks = ta.t.get_ranks()
out = {"load_s": load}
def timed(name, fn):
    t0 = time.perf_counter(); fn(); out[name] = time.perf_counter() - t0
timed("temporal breakdown", lambda: ta.get_temporal_breakdown(visualize=False))
timed("comm/compute overlap", lambda: ta.get_comm_comp_overlap(visualize=False))
timed("idle time breakdown", lambda: ta.get_idle_time_breakdown(ranks=ranks, visualize=False))
timed("kernel breakdown", lambda: ta.get_gpu_kernel_breakdown(visualize=False))
timed("kernel launch stats", lambda: ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False))
out["all analyses"] = sum(out[k] for k in ("temporal breakdown", "comm/compute overlap", "idle time breakdown",
                                            "kernel breakdown", "kernel launch stats"))
import hta
out["version"] = getattr(hta, "__version__", None)
print("HTA-RESULT " + json.dumps(out))
"""


def ensure_hta(python: Path, log) -> Path:
    if python.is_file():
        return python
    venv = python.parent.parent
    log(f"creating {venv} with holistictraceanalysis ...")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "holistictraceanalysis"], check=True)
    return python


def run_hta(python: Path, folder: Path, timeout: float) -> dict[str, Any]:
    proc = subprocess.run([str(python), "-c", HTA_CHILD, str(folder)], capture_output=True, text=True,
                          timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("HTA-RESULT "):
            out = json.loads(line[len("HTA-RESULT "):])
            if out.get("version") is None:
                ver = subprocess.run([str(python), "-m", "pip", "show", "holistictraceanalysis"],
                                     capture_output=True, text=True).stdout
                m = re.search(r"^Version: (.+)$", ver, re.M)
                out["version"] = m.group(1) if m else "?"
            return out
    raise SystemExit(f"HTA failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


# --- report -------------------------------------------------------------------------------------------------

ROWS = ["temporal breakdown", "comm/compute overlap", "idle time breakdown", "kernel breakdown",
        "kernel launch stats", "all analyses"]


def report(wb: dict[str, Any], hta: dict[str, Any] | None, manifest: dict[str, Any]) -> str:
    ev = sum(f["events"] for f in manifest["files"])
    lines = [
        f"Input: {manifest['ranks']} ranks × {manifest['files'][0]['events']:,} events ({ev:,} in all, "
        f"{sum(f['bytes'] for f in manifest['files']) / 1e9:.2f} GB of JSON; {wb['kernels']:,} device rows), "
        "BUILT by repeating the steps of the two-rank H200 NCCL trace `h200-probe/nccl2c_r{0,1}` with shifted "
        "times (see `bench/analyses.py`).",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, polars threads "
        f"{wb['threads']}" + (f"; HTA {hta.get('version')}" if hta else "") + ".",
        "Times in seconds, best of the repeats for workbench, one run for HTA; loading the traces is not part of "
        "the analysis times.",
        "",
        "| analysis | workbench (s) | HTA (s) | workbench / HTA | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name in ROWS:
        h = hta.get(name) if hta else None
        ratio = f"{wb[name] / h:.3f}" if h else "–"
        met = ("≤ 0.1 ✓" if h and wb[name] / h <= TARGET else "≤ 0.1 ✗") if h else ""
        label = name + (" (ours: every analysis + findings)" if name == "all analyses" else "")
        lines.append(f"| {label} | {wb[name]:.3f} | {'–' if h is None else f'{h:.2f}'} | {ratio} | {met} |")
    hload = "–" if not hta else f"{hta['load_s']:.2f}"
    lines.append(f"| (load traces) | {wb['load_s']:.2f} | {hload} | | |")
    return "\n".join(lines)


def update_readme(text: str) -> None:
    """Replace (or add) the ``## Analyses`` section of bench/README.md, leaving the other sections alone."""
    readme = HERE / "README.md"
    old = readme.read_text() if readme.is_file() else "# Benchmarks\n"
    section = "## Analyses\n\n`python bench/analyses.py --readme`\n\n" + text.rstrip() + "\n"
    pat = re.compile(r"^## Analyses\n.*?(?=^## |\Z)", re.S | re.M)
    new = pat.sub(lambda _: section + "\n", old, count=1) if pat.search(old) else old.rstrip() + "\n\n" + section
    readme.write_text(new.rstrip() + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per rank")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--hta-python", type=Path, default=Path("/tmp/hta-venv/bin/python"))
    ap.add_argument("--hta-timeout", type=float, default=3600)
    ap.add_argument("--reuse-hta", action="store_true",
                    help="take HTA's times from the last run on this input (HTA takes many minutes; its time does "
                         "not depend on this project's code)")
    ap.add_argument("--readme", action="store_true", help="rewrite the Analyses section of bench/README.md")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    folder, manifest = build(args.ranks, args.events, log)
    log("workbench ...")
    wb = run_workbench(folder, args.repeat)
    hta = None
    saved = folder.parent / "hta.json"
    if args.reuse_hta and saved.is_file():
        log(f"reusing HTA's times from {saved}")
        hta = json.loads(saved.read_text())
    elif not args.no_hta:
        log("HTA ... (minutes)")
        hta = run_hta(ensure_hta(args.hta_python, log), folder, args.hta_timeout)
        saved.write_text(json.dumps(hta, indent=2))
    text = report(wb, hta, manifest)
    print(text)
    if args.readme:
        update_readme(text)


if __name__ == "__main__":
    main()
