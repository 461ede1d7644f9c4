#!/usr/bin/env python
"""Compile-log parsing is linear in the log's size: ``read_compile_logs`` on generated logs of 10k, 100k and 300k
compile records, time per record against a bare pass over the same bytes.

The input is GENERATED, not collected: each record is one compilation of a new frame as torch 2.13 logs it — a
``dynamo_start`` line with a two-frame stack, a ``recompile_reasons`` artifact with its payload line, and a
``compilation_metrics`` line with the fields the workbench reads (times, code name, cache counters, a short config).
The field set follows the real log ``tests/data/compile_logs/torch2.13-cpu/2rank-gloo-divergent-shape`` (whose
metrics lines carry ~38 KB of config text each; here the config is a few words, so the records are small and the
parse cost per record is the workbench's own, not orjson's on config text). Files are written to
``bench/_data/compile-records-<N>.log`` (git-ignored) and reused.

Baseline: a bare pass over the same bytes — split into lines, skip payload lines, ``orjson.loads`` every event line.
Each size runs ``--repeat`` times (after one warm-up); the table gives the median wall time per record, its spread
(min–max over the repeats, as ± half of it in % of the median), the median CPU time per record (the process's, which
other load on a shared machine disturbs less) and the ratios workbench / bare pass. Linear parsing shows as a flat
time per record from 10k to 300k records. Run:

    . .venv/bin/activate
    python bench/compile_scale.py                  # 10k, 100k, 300k records, 3 repeats
    python bench/compile_scale.py --sizes 10000 40000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "_data"
GEN_VERSION = 1

_HEAD = "V1129 11:{m:02d}:{s:02d}.{us:06d} 13406 torch/_dynamo/{src}] "


def _record(i: int) -> str:
    """One compilation record (three log lines and a payload line) for frame ``i``."""
    t = 1795950006.25 + i * 0.01
    m, s, us = (i // 6000) % 60, (i // 100) % 60, (i * 10_000) % 1_000_000
    ctx = {"rank": 0, "frame_id": i, "frame_compile_id": 0, "attempt": 0}
    start = {"dynamo_start": {"stack": [
        {"line": 35, "name": "<module>", "filename": 1, "loc": "loss = cmodel(x).sum()"},
        {"line": 67, "name": f"inner_{i}", "filename": 2}]}, **ctx}
    reasons = {"artifact": {"name": "recompile_reasons", "encoding": "json"}, **ctx,
               "has_payload": f"{i:032x}"}
    metrics = {"compilation_metrics": {
        "compile_id": f"{i}/0", "frame_key": str(i + 1), "co_name": f"inner_{i}",
        "co_filename": "/tmp/train/model.py", "co_firstlineno": 67, "cache_size": 0, "accumulated_cache_size": 0,
        "guard_count": 70, "shape_env_guard_count": 0, "graph_op_count": 3, "graph_node_count": 9,
        "graph_input_count": 5, "start_time": t, "entire_frame_compile_time_s": 0.25,
        "backend_compile_time_s": 0.2, "inductor_compile_time_s": 0.15, "code_gen_time_s": None, "fail_type": None,
        "fail_reason": None, "fail_user_frame_filename": None, "fail_user_frame_lineno": None,
        "restart_reasons": [], "dynamo_time_before_restart_s": 0.0, "has_guarded_code": True,
        "inductor_fx_local_cache_hit_count": 0, "inductor_fx_local_cache_miss_count": 1,
        "recompile_user_contexts": [f"step={i // 10}"],
        "dynamo_config": '{"recompile_limit": 8}', "inductor_config": '{"max_autotune": false}',
        "pytorch_version": "2.13.0+cpu"}, **ctx}
    head = _HEAD.format(m=m, s=s, us=us, src="convert_frame.py:303")
    return "".join((
        head, orjson.dumps(start).decode(), "\n",
        _HEAD.format(m=m, s=s, us=us, src="guards.py:5400"), orjson.dumps(reasons).decode(), "\n",
        f"\t0/0: tensor 'args[0]' size mismatch at index 0. expected 4, actual {6 + i % 7}\n",
        _HEAD.format(m=m, s=s, us=us, src="utils.py:2009"), orjson.dumps(metrics).decode(), "\n",
    ))


def build(n: int) -> Path:
    """The generated log of ``n`` records (written once, then reused)."""
    path = DATA / f"compile-records-{n}-v{GEN_VERSION}.log"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        f.write('V1129 11:00:06.245000 13406 torch/_logging/_internal.py:1328] {"artifact": {"name": '
                '"torch_version", "encoding": "json"}, "has_payload": "0"}\n\t{"pytorch_version": "2.13.0+cpu"}\n')
        f.write('V1129 11:00:06.273000 13406 torch/_logging/structured.py:28] {"str": ["/tmp/train/train.py", 1]}\n')
        f.write('V1129 11:00:06.273000 13406 torch/_logging/structured.py:28] {"str": ["/tmp/train/model.py", 2]}\n')
        for i in range(n):
            f.write(_record(i))
    os.replace(tmp, path)
    return path


def bare_pass(path: Path) -> int:
    """The baseline: read the file, split lines, skip payload lines, ``orjson.loads`` every event line."""
    n = 0
    for line in path.read_bytes().split(b"\n"):
        if not line or line[:1] == b"\t":
            continue
        orjson.loads(line[line.find(b"] {") + 2:])
        n += 1
    return n


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``repeat`` calls of ``fn`` after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from workbench.compile_log import read_compile_logs

    rows = []
    for n in args.sizes:
        path = build(n)
        mb = path.stat().st_size / 1e6
        compiles, skipped = read_compile_logs([path])
        assert compiles.height == n, (compiles.height, n)
        ours, ours_cpu = timed(lambda: read_compile_logs([path]), args.repeat)
        base, base_cpu = timed(lambda: bare_pass(path), args.repeat)
        med, bmed = statistics.median(ours), statistics.median(base)
        cmed, bcmed = statistics.median(ours_cpu), statistics.median(base_cpu)
        rows.append((n, mb, med / n * 1e6, (max(ours) - min(ours)) / med * 100, bmed / n * 1e6,
                     (max(base) - min(base)) / bmed * 100, med / bmed, cmed / n * 1e6, bcmed / n * 1e6,
                     int(skipped["count"].sum() or 0)))
    first, first_cpu = rows[0][2], rows[0][7]
    lines = [
        f"`python bench/compile_scale.py` — generated TORCH_TRACE logs, one record = one compilation "
        f"(dynamo_start, recompile_reasons + payload, compilation_metrics); median of {args.repeat} after a warm-up. "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| records | MB | read_compile_logs µs/record, wall (spread) | bare split + orjson µs/record, wall (spread) "
        "| ratio, wall | µs/record, CPU: workbench / bare (ratio) | workbench µs/record vs the smallest size, wall / "
        "CPU | skipped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, mb, us, sp, bus, bsp, ratio, cus, bcus, sk in rows:
        lines.append(f"| {n:,} | {mb:.0f} | {us:.1f} (±{sp / 2:.0f} %) | {bus:.1f} (±{bsp / 2:.0f} %) | "
                     f"{ratio:.2f}× | {cus:.1f} / {bcus:.1f} ({cus / bcus:.2f}×) | {us / first:.2f}× / "
                     f"{cus / first_cpu:.2f}× | {sk} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
