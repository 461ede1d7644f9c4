#!/usr/bin/env python
"""Export benchmark: ``workbench export`` of a large built run against ``workbench analyze`` on the same run.

The inputs are BUILT the way ``bench/scale.py`` builds them (that module's ``build``): every rank a copy of one of the
two real H200 NCCL DDP traces of ``sample_traces/h200x2-ddp-nccl`` (~8,000 events, 1.5 MB of JSON each) with its rank
rewritten, a per-rank jitter and one planted straggler. The run is ingested once (the parquet cache), then each
measurement runs in its own subprocess on the warm cache (peak RSS from ``wait4``): ``analyze`` (what
``workbench analyze`` computes), ``export`` to ``.pftrace`` (with the findings, so it includes the same analyses),
``export`` to ``.json.gz``, and ``export --no-findings`` to ``.pftrace`` (writing alone). The measurements of one
repeat are interleaved with the others' so load changes on the shared machine spread over all of them; each row
gives the median and the range over the repeats. Run it niced: ``nice -n 10 .venv/bin/python bench/export.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest import measure  # noqa: E402  (bench/ingest.py: a subprocess with its peak RSS)
from scale import DATA, build  # noqa: E402  (bench/scale.py: ranks copied from the real H200 traces)

MB = 1e6
CONFIGS = {
    "analyze": "workbench analyze (the analyses alone)",
    "export-pftrace": "workbench export -o run.pftrace (analyses + findings drawn)",
    "export-json": "workbench export -o run.json.gz (analyses + findings drawn)",
    "export-pftrace-nofind": "workbench export -o run.pftrace --no-findings (writing alone)",
}


def child(kind: str, folder: str, out: str) -> dict[str, Any]:
    import workbench

    t0, c0 = time.perf_counter(), time.process_time()
    run = workbench.open(folder)
    if kind == "analyze":
        from workbench.analyses.summary import analyze

        summary = analyze(run)
        res = {"findings": len(summary["findings"])}
    else:
        from workbench.export import export_run

        s = export_run(run, out, findings=kind != "export-pftrace-nofind")
        res = {"bytes": s["file_bytes"], "slices": s["slices"], "flows": s["flows"],
               "findings_drawn": s["findings_drawn"]}
        Path(out).unlink()
    return {"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "events_loaded": run.loaded("events") or run.loaded("kernels"), **res}


def _self(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", *args]


def _spread(xs: list[float], scale: float = 1.0, nd: int = 1) -> str:
    xs = [x / scale for x in xs]
    if not xs:
        return "–"
    return f"{statistics.median(xs):,.{nd}f} ({min(xs):,.{nd}f}–{max(xs):,.{nd}f})"


def _n(x: int | None) -> str:
    return "–" if x is None else f"{x:,}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="32,1024", help="run sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--keep", action="store_true", help="keep the built inputs")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print("@@RESULT@@" + json.dumps(child(*a.child)))
        return

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t_start = time.perf_counter()
    tables = []
    for n in [int(x) for x in a.ranks.split(",")]:
        log(f"N = {n}: building ...")
        folder, m = build(n, log)
        out = DATA / f"export-n{n}"
        ing = measure([sys.executable, "-c", f"import workbench; workbench.open({str(folder)!r})"], a.timeout)
        log(f"  ingested (cache filled) in {ing['wall_s']:.0f} s")
        rows: dict[str, list[dict[str, Any]]] = {k: [] for k in CONFIGS}
        for rep in range(a.repeat):
            for kind in CONFIGS:
                suffix = ".json.gz" if kind == "export-json" else ".pftrace"
                r = measure(_self(kind, str(folder), str(out) + suffix), a.timeout)
                if r.get("rc") != 0:
                    raise SystemExit(f"{kind} failed: {r.get('error')}")
                rows[kind].append(r)
                log(f"  [{rep + 1}/{a.repeat}] {kind}: {r['s']:.1f} s, {r['peak_rss'] / MB:.0f} MB, load "
                    f"{r['load']:.1f}")
        tables.append((n, m, rows))
        if not a.keep:
            shutil.rmtree(folder, ignore_errors=True)
            (DATA / f"n{n}.manifest.json").unlink(missing_ok=True)
    print(report(tables, a.repeat, time.perf_counter() - t_start))


def report(tables: list, repeat: int, total_s: float) -> str:
    load = os.getloadavg()
    out = [
        "Input: BUILT by bench/scale.py's builder, not collected — ranks copied from the 2 real H200 NCCL DDP traces "
        "of sample_traces/h200x2-ddp-nccl (~8,000 events, 1.5 MB of JSON per rank), rank ids rewritten, a per-rank "
        "jitter and one planted straggler; ingested once, every measurement on the warm parquet cache.",
        f"Machine: {os.cpu_count()} cores shared with other work; load average at the end {load[0]:.1f} / "
        f"{load[1]:.1f} / {load[2]:.1f}. Each cell: median (min–max) over {repeat} runs, each run its own process. "
        "MB = 10^6 bytes.",
        "",
        "| ranks | what | wall s | CPU s | peak RSS MB | output MB | slices | wait flows | findings drawn "
        "| events read whole | load |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for n, _m, rows in tables:
        for kind, rs in rows.items():
            out.append(
                f"| {n} | {CONFIGS[kind]} | {_spread([r['s'] for r in rs])} | {_spread([r['cpu_s'] for r in rs])} "
                f"| {_spread([r['peak_rss'] for r in rs], MB, 0)} "
                f"| {_spread([r['bytes'] for r in rs if 'bytes' in r], MB, 0) if kind != 'analyze' else '–'} "
                f"| {_n(rs[0].get('slices'))} | {_n(rs[0].get('flows'))} | {_n(rs[0].get('findings_drawn'))} "
                f"| {'yes' if any(r['events_loaded'] for r in rs) else 'no'} "
                f"| {_spread([r['load'] for r in rs])} |")
    out.append("")
    for n, _m, rows in tables:
        ana_t = statistics.median(r["s"] for r in rows["analyze"])
        ana_m = statistics.median(r["peak_rss"] for r in rows["analyze"])
        for kind in list(CONFIGS)[1:]:
            t = statistics.median(r["s"] for r in rows[kind])
            mem = statistics.median(r["peak_rss"] for r in rows[kind])
            out.append(f"- {n} ranks, {kind}: {t / ana_t:.2f}× analyze's wall time, {mem / ana_m:.2f}× its peak RSS")
    if len(tables) > 1:
        (n0, _, r0), (n1, _, r1) = tables[0], tables[-1]
        for kind in CONFIGS:
            a0 = statistics.median(r["peak_rss"] for r in r0[kind])
            a1 = statistics.median(r["peak_rss"] for r in r1[kind])
            out.append(f"- peak RSS {kind} at {n1} ranks / at {n0}: {a1 / a0:.2f}× for {n1 // n0}× the ranks (one "
                       "rank's events at a time; what grows is the small tables held for every rank)")
    out.append(f"\nWhole benchmark: {total_s:.0f} s (command: `nice python bench/export.py`).")
    return "\n".join(out)


if __name__ == "__main__":
    main()
