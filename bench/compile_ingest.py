#!/usr/bin/env python
"""Compile-log ingest speed: ``read_compile_logs`` against tlparse 0.4.3 (Rust) on the same TORCH_TRACE logs.

The input is BUILT, not collected: the real rank-1 log of ``tests/data/compile_logs/torch2.13-cpu/
2rank-gloo-divergent-shape`` (torch 2.13, DDP + torch.compile, a recompile) is repeated until each rank's file
reaches the target size, with frame ids shifted per copy (``"frame_id": N`` and ``compile_id "N/M"``) so every
copy is a new set of compiles. Files: ``bench/_data/compile-<ranks>x<MB>MB/dedicated_log_torch_trace_rank_<r>_b.log``
(git-ignored, reused).

Each rank file is read by ``read_compile_logs([file])`` (best of 3, in-process, after one warm-up) and by
``tlparse FILE -o OUT --overwrite --no-browser`` (one subprocess per file, best of 3). tlparse also renders its HTML
report, so the ratio compares "read the log into a table" with "read the log into a report": the honest comparison
for a user who wants to know what recompiled. Run:

    . .venv/bin/activate
    python bench/compile_ingest.py                 # 8 ranks x 5 MB
    python bench/compile_ingest.py --readme        # ... and rewrite the "Compile-log ingest" section of bench/README.md
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests/data/compile_logs/torch2.13-cpu/2rank-gloo-divergent-shape"
DATA = ROOT / "bench" / "_data"
SECTION = "## Compile-log ingest"


def build(ranks: int, mb: float) -> Path:
    out = DATA / f"compile-{ranks}x{mb:g}MB"
    target = int(mb * 1024 * 1024)
    done = out / ".done"
    if done.exists():
        return out
    seed = sorted(SEED.glob("*rank_1_*.log.gz"))
    if not seed:
        sys.exit(f"seed log missing: {SEED} (tests/data/compile_logs is part of the repository)")
    text = gzip.decompress(seed[0].read_bytes()).decode()
    frame_rx = re.compile(r'"frame_id": (\d+)')
    cid_rx = re.compile(r'"compile_id": "(\d+)/')
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        parts, size, k = [], 0, 0
        while size < target:
            off = k * 10
            chunk = frame_rx.sub(lambda m: f'"frame_id": {int(m.group(1)) + off}', text)
            chunk = cid_rx.sub(lambda m: f'"compile_id": "{int(m.group(1)) + off}/', chunk)
            chunk = chunk.replace('"rank": 1', f'"rank": {r}')
            parts.append(chunk)
            size += len(chunk)
            k += 1
        (out / f"dedicated_log_torch_trace_rank_{r}_b.log").write_text("".join(parts))
    done.write_text("ok")
    return out


def best(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb", type=float, default=5.0)
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from workbench.compile_log import read_compile_logs

    folder = build(args.ranks, args.mb)
    files = sorted(folder.glob("*.log"))
    read_compile_logs([files[0]])  # warm-up (imports, polars)
    ours = [best(lambda f=f: read_compile_logs([f])) for f in files]
    t_all = best(lambda: read_compile_logs(files), 1)
    compiles, skipped = read_compile_logs(files)
    tl = shutil.which("tlparse")
    theirs: list[float] = []
    if tl:
        with tempfile.TemporaryDirectory() as tmp:
            for f in files:
                theirs.append(best(lambda f=f: subprocess.run(
                    [tl, str(f), "-o", os.path.join(tmp, "o"), "--overwrite", "--no-browser"],
                    capture_output=True, check=False)))
    size_mb = sum(f.stat().st_size for f in files) / len(files) / 2**20
    ours_mean = sum(ours) / len(ours)
    lines = [
        SECTION,
        "",
        f"`python bench/compile_ingest.py` — {len(files)} ranks × {size_mb:.1f} MB TORCH_TRACE logs built from the real "
        f"torch 2.13 log of `2rank-gloo-divergent-shape` (frame ids shifted per copy); "
        f"{compiles.height:,} compile rows, {skipped['count'].sum() if skipped.height else 0} skipped lines. "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| reader | per rank (mean) | per rank (worst) | all ranks |",
        "| --- | --- | --- | --- |",
        f"| `read_compile_logs` (one call per file, best of 3) | {ours_mean * 1000:.0f} ms | {max(ours) * 1000:.0f} ms "
        f"| {t_all * 1000:.0f} ms (one call, sequential) |",
    ]
    if theirs:
        tl_mean = sum(theirs) / len(theirs)
        lines.append(f"| tlparse 0.4.3 (`tlparse FILE --no-browser`, best of 3) | {tl_mean * 1000:.0f} ms | "
                     f"{max(theirs) * 1000:.0f} ms | {sum(theirs) * 1000:.0f} ms (sum) |")
        lines += ["", f"Ratio tlparse / workbench per rank: **{tl_mean / ours_mean:.1f}×** (tlparse also writes its HTML "
                      f"report; the workbench decodes only the events the compiles table needs and counts the rest)."]
    else:
        lines += ["", "tlparse not installed (`pip install tlparse`): no comparison."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.readme:
        readme = ROOT / "bench" / "README.md"
        old = readme.read_text() if readme.exists() else "# Benchmarks\n"
        if SECTION in old:
            start = old.index(SECTION)
            nxt = old.find("\n## ", start + len(SECTION))
            new = old[:start] + text + (old[nxt + 1:] if nxt >= 0 else "")
        else:
            new = old.rstrip("\n") + "\n\n" + text
        readme.write_text(new)


if __name__ == "__main__":
    main()
