#!/usr/bin/env python
"""Scale benchmark: ``workbench.open`` (ingest) and ``analyze`` on runs of 8 … 1024 ranks, against HTA.

The inputs are BUILT, not collected: every rank is a copy of one of the two real H200 NCCL DDP traces of
``sample_traces/h200x2-ddp-nccl`` (torch 2.x Kineto, NCCL 2.28, 3 profiler steps; 1.5 MB of compact JSON per rank) with
``distributedInfo`` rewritten to rank r of N (rank r takes seed r % 2), every timestamp shifted by a per-rank
jitter (uniform in 0–3 % of a step) and ONE planted straggler whose whole timeline starts 30 % of a step
late. The files (``rank-R.json``, Kineto-like layout) go to ``bench/_data/scale/`` (git-ignored) and are
removed at the end unless ``--keep``.

For the memory target a second input repeats the steps of the real 2-rank H200 probe trace
(``tests/data/traces/h200-probe/nccl2c_r{0,1}``) to 40 MB per rank for 32 ranks (bench/ingest.py's builder):
the 32 ranks × 54 MB case of issue 15 at a size this disk and time budget allow.

Every measurement runs in its own subprocess (peak RSS from ``wait4``; HTA's process pool: the sampled sum
over its process tree). Run it once, late, niced: ``nice -n 10 .venv/bin/python bench/scale.py``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from ingest import build as build_repeated  # noqa: E402  (bench/ingest.py: steps repeated to a size)
from ingest import measure  # noqa: E402

DATA = HERE / "_data" / "scale"
SEED_DIR = ROOT / "sample_traces" / "h200x2-ddp-nccl"
MB = 1e6
TARGETS = {"rss_vs_json_32": 0.6, "rss_flat": 1.5}


# --- building ---------------------------------------------------------------------------------------


def _seeds() -> list[Path]:
    seeds = sorted(SEED_DIR.glob("rank*/trace/*.json.gz"))
    if len(seeds) != 2:
        raise SystemExit(f"seed traces not found under {SEED_DIR}")
    return seeds


def _step_us(events: list[dict[str, Any]]) -> float:
    durs = [e["dur"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return sum(durs) / len(durs)


def straggler_of(n: int) -> int:
    """The planted straggler of an n-rank run."""
    return (5 * n) // 8 + 1 if n > 2 else n - 1


def build(n: int, log) -> tuple[Path, dict[str, Any]]:
    """An n-rank folder built from the seeds; reused while its manifest matches."""
    out = DATA / f"n{n}"
    manifest_path = DATA / f"n{n}.manifest.json"  # beside the folder: the folder holds only traces
    if manifest_path.is_file():
        m = json.loads(manifest_path.read_text())
        if m.get("ranks") == n and len(list(out.glob("rank-*.json"))) == n:
            return out, m
    shutil.rmtree(out, ignore_errors=True)
    manifest_path.unlink(missing_ok=True)
    out.mkdir(parents=True)
    docs = [orjson.loads(gzip.decompress(s.read_bytes())) for s in _seeds()]
    step = [_step_us(d["traceEvents"]) for d in docs]
    rng = random.Random(n)
    planted = straggler_of(n)
    total = 0
    t0 = time.perf_counter()
    for r in range(n):
        doc = docs[r % 2]
        shift = round(rng.uniform(0, 0.03) * step[r % 2] + (0.3 * step[r % 2] if r == planted else 0.0), 3)
        di = dict(doc.get("distributedInfo") or {}, rank=r, world_size=n)
        di["pg_config"] = [dict(pg, pg_size=n, ranks=list(range(n))) for pg in di.get("pg_config") or []]
        header = {"distributedInfo": di, **{k: v for k, v in doc.items() if k not in ("distributedInfo", "traceEvents")}}
        path = out / f"rank-{r}.json"
        with path.open("wb") as f:  # a pretty header (HTA finds the rank line by line), then one event per line
            f.write((json.dumps(header, indent=2)[:-2] + ',\n  "traceEvents": [\n').encode())
            lines = []
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                    e = dict(e, ts=round(e["ts"] + shift, 3))
                lines.append(orjson.dumps(e))
            f.write(b",\n".join(lines) + b"\n]}\n")
        total += path.stat().st_size
    m = {"ranks": n, "bytes": total, "straggler": planted, "seeds": [str(s.relative_to(ROOT)) for s in _seeds()],
         "built_s": round(time.perf_counter() - t0, 1)}
    manifest_path.write_text(json.dumps(m, indent=2))
    log(f"  built {n} ranks ({total / MB:,.0f} MB) in {m['built_s']} s")
    return out, m


# --- the children (each measurement in its own process) -----------------------------------------------


def child_ingest(folder: str) -> dict[str, Any]:
    import workbench

    shutil.rmtree(Path(folder) / ".workbench", ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    run = workbench.open(folder)
    t1, c1 = time.perf_counter(), time.process_time()
    return {"s": t1 - t0, "cpu_s": c1 - c0, "ranks": run.ranks.height, "events": run.count("events"),
            "events_loaded": run.loaded("events") or run.loaded("kernels"), "problems": run.problems[:3]}


def child_analyze(folder: str, planted: int) -> dict[str, Any]:
    import workbench
    from workbench.analyses.summary import analyze

    t0, c0 = time.perf_counter(), time.process_time()
    run = workbench.open(folder)
    t1 = time.perf_counter()
    summary = analyze(run)
    t2, c2 = time.perf_counter(), time.process_time()
    stragglers = sorted({int(r) for f in summary["findings"] if "straggler" in str(f.get("kind", ""))
                         for r in (f.get("ranks") or [])})
    return {"s": t2 - t0, "open_s": t1 - t0, "analyze_s": t2 - t1, "cpu_s": c2 - c0, "stragglers": stragglers,
            "found": stragglers == [planted], "events_loaded": run.loaded("events") or run.loaded("kernels")}


HTA_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
try:
    found = [int(r) for r in ta.get_potential_stragglers(num_candidates=1)]
except Exception as exc:  # noqa: BLE001
    found = ["error: " + type(exc).__name__]
t3 = time.perf_counter()
print("@@RESULT@@" + json.dumps({"s": t3 - t1, "load_s": t2 - t1, "straggler_s": t3 - t2, "stragglers": found,
                                 "ranks": len(ta.t.traces)}))
"""


def _self(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", *args]


# --- the run -------------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,32,128,512,1024")
    ap.add_argument("--hta-max", type=int, default=128, help="run HTA up to this many ranks")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--hta-timeout", type=float, default=400)
    ap.add_argument("--big-mb", type=int, default=40, help="MB per rank of the 32-rank memory case (0: skip)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--keep", action="store_true", help="keep the built inputs")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        kind, *rest = a.child
        out = child_ingest(rest[0]) if kind == "ingest" else child_analyze(rest[0], int(rest[1]))
        print("@@RESULT@@" + json.dumps(out))
        return

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    ns = [int(x) for x in a.ranks.split(",")]
    seed_bytes = sum(len(gzip.decompress(s.read_bytes())) for s in _seeds()) / 2
    need = seed_bytes * sum(ns) * 1.1 + (a.big_mb * MB * 32 if a.big_mb else 0)
    free = shutil.disk_usage(HERE).free
    log(f"disk: {free / 1e9:.0f} GB free, inputs need {need / 1e9:.1f} GB")
    if free < 2 * need:
        raise SystemExit("not enough free disk for the inputs (need twice their size free)")
    hta_ok = Path(a.hta_python).exists()
    t_start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for n in ns:
        log(f"N = {n}: building ...")
        folder, m = build(n, log)
        log("  workbench ingest (cold cache) ...")
        ing = measure(_self("ingest", str(folder)), a.timeout)
        log(f"    {ing.get('s', 0):.1f} s, {ing['peak_rss'] / MB:.0f} MB; analyze ...")
        ana = measure(_self("analyze", str(folder), str(m["straggler"])), a.timeout)
        log(f"    {ana.get('s', 0):.1f} s, {ana['peak_rss'] / MB:.0f} MB, stragglers {ana.get('stragglers')}")
        hta = None
        if hta_ok and n <= a.hta_max:
            log("  HTA TraceAnalysis + get_potential_stragglers ...")
            hta = measure([a.hta_python, "-c", HTA_CHILD, str(folder)], a.hta_timeout, sample_tree=True)
            log(f"    {hta['wall_s']:.1f} s, {hta['peak_rss'] / MB:.0f} MB, {hta.get('stragglers')}")
        rows.append({"n": n, "m": m, "ing": ing, "ana": ana, "hta": hta})
        if not a.keep:
            shutil.rmtree(folder, ignore_errors=True)
            (DATA / f"n{n}.manifest.json").unlink(missing_ok=True)
    big = None
    if a.big_mb:
        log(f"32 ranks x {a.big_mb} MB (bench/ingest.py builder) ...")
        jdir, _, manifest = build_repeated(32, a.big_mb, False, log)
        bytes_ = sum(f["bytes"] for f in manifest["files"])
        ing = measure(_self("ingest", str(jdir)), a.timeout)
        ana = measure(_self("analyze", str(jdir), "-1"), a.timeout)
        big = {"bytes": bytes_, "ing": ing, "ana": ana}
        if not a.keep:
            shutil.rmtree(jdir.parent, ignore_errors=True)
    print(report(rows, big, time.perf_counter() - t_start, hta_ok))


def report(rows: list[dict[str, Any]], big: dict[str, Any] | None, total_s: float, hta_ok: bool) -> str:
    load = os.getloadavg()
    out = [
        "Input: BUILT by bench/scale.py, not collected — ranks copied from the 2 real H200 NCCL DDP traces of "
        "sample_traces/h200x2-ddp-nccl (1.5 MB of compact JSON per rank) with rank ids rewritten, a per-rank jitter of 0–3 % of "
        "a step and one planted straggler (whole timeline 30 % of a step late).",
        f"Machine: {os.cpu_count()} cores shared with other work; load average now {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1/5/15 min); the load at each measurement is in the table. MB = 10^6 bytes.",
        "",
        "| ranks | JSON MB | ingest s (CPU s) | s/rank | MB/s | ingest peak RSS MB | RSS/JSON | analyze s (CPU s) "
        "| analyze peak RSS MB | straggler (planted) | events loaded whole | HTA s | HTA peak RSS MB | HTA straggler "
        "| load |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        n, m, ing, ana, hta = r["n"], r["m"], r["ing"], r["ana"], r["hta"]
        s = ing.get("s")
        peak = max(ing["peak_rss"], ana["peak_rss"])
        if hta is None:
            h = ("not run (not installed)" if not hta_ok else "not run (N > --hta-max)", "–", "–")
        elif hta.get("rc") != 0 or "s" not in hta:
            h = ("timed out" if hta["timed_out"] else f"failed ({hta.get('error', '?')[:60]})",
                 f"{hta['peak_rss'] / MB:,.0f}", "–")
        else:
            h = (f"{hta['s']:.1f}", f"{hta['peak_rss'] / MB:,.0f}",
                 f"{hta.get('stragglers')} {'yes' if hta.get('stragglers') == [m['straggler']] else 'no'}")
        out.append(
            f"| {n} | {m['bytes'] / MB:,.0f} | {_fmt(s, '.1f')} ({_fmt(ing.get('cpu_s'), '.1f')}) "
            f"| {_fmt(s / n if s else None, '.3f')} "
            f"| {_fmt(m['bytes'] / MB / s if s else None, '.0f')} | {ing['peak_rss'] / MB:,.0f} "
            f"| {ing['peak_rss'] / m['bytes']:.2f} | {_fmt(ana.get('s'), '.1f')} ({_fmt(ana.get('cpu_s'), '.1f')}) "
            f"| {ana['peak_rss'] / MB:,.0f} "
            f"| {ana.get('stragglers')} ({m['straggler']}) {'yes' if ana.get('found') else '**no**'} "
            f"| {'yes' if ing.get('events_loaded') or ana.get('events_loaded') else 'no'} "
            f"| {h[0]} | {h[1]} | {h[2]} | {ing['load']:.1f} |")
        r["peak"] = peak
    if big:
        ing, ana = big["ing"], big["ana"]
        peak = max(ing["peak_rss"], ana["peak_rss"])
        out.append(
            f"| 32 × {big['bytes'] / 32 / MB:.0f} MB (steps repeated) | {big['bytes'] / MB:,.0f} | "
            f"{_fmt(ing.get('s'), '.1f')} ({_fmt(ing.get('cpu_s'), '.1f')}) | {_fmt(ing.get('s', 0) / 32, '.3f')} | "
            f"{_fmt(big['bytes'] / MB / ing['s'] if ing.get('s') else None, '.0f')} | {ing['peak_rss'] / MB:,.0f} | "
            f"{ing['peak_rss'] / big['bytes']:.2f} | {_fmt(ana.get('s'), '.1f')} ({_fmt(ana.get('cpu_s'), '.1f')}) | "
            f"{ana['peak_rss'] / MB:,.0f} | "
            f"– (none planted) | {'yes' if ana.get('events_loaded') else 'no'} | – | – | – | {ing['load']:.1f} |")
    out.append("")
    out.append("HTA: `TraceAnalysis(trace_dir=...)` then `get_potential_stragglers(num_candidates=1)`; its detector "
               "looks for kernels named `ncclKernel*`, and NCCL 2.28 (these traces) names them `ncclDevKernel_*`, so it "
               "finds no communication kernel to rank on (ValueError).")
    out.append("")
    by_n = {r["n"]: r for r in rows}
    verdicts = []
    if big:
        ratio = max(big["ing"]["peak_rss"], big["ana"]["peak_rss"]) / big["bytes"]
        verdicts.append(f"peak RSS / JSON at 32 ranks × {big['bytes'] / 32 / MB:.0f} MB: {ratio:.2f} "
                        f"(target ≤ {TARGETS['rss_vs_json_32']}: {'met' if ratio <= TARGETS['rss_vs_json_32'] else 'NOT met'})")
    if 32 in by_n and max(by_n) > 32:
        top = max(by_n)
        flat = by_n[top]["peak"] / by_n[32]["peak"]
        verdicts.append(f"peak RSS {top} ranks / 32 ranks: {flat:.2f}× (target ≤ {TARGETS['rss_flat']}×: "
                        f"{'met' if flat <= TARGETS['rss_flat'] else 'NOT met'})")
        for what, key in (("ingest", "ing"), ("analyze", "ana")):
            for unit in ("s", "cpu_s"):
                per = {n: r[key][unit] / n for n, r in by_n.items() if r[key].get(unit)}
                if 32 in per and top in per:
                    verdicts.append(f"{what} {'wall' if unit == 's' else 'CPU'} time per rank at {top} ranks / at 32: "
                                    f"{per[top] / per[32]:.2f}× (1.0 = linear)")
    verdicts.append("straggler named at every N: " + ("yes" if all(r["ana"].get("found") for r in rows) else "NO"))
    out += [f"- {v}" for v in verdicts]
    out.append(f"\nWhole benchmark: {total_s:.0f} s (command: `nice python bench/scale.py`).")
    return "\n".join(out)


if __name__ == "__main__":
    main()
