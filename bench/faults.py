"""The fault zoo end to end: for every CPU fault, record → analyze → recommend → rerun with the written config →
diff, and one table: fault · found (rank/step right) · cost error vs ground truth · fix written · fix applied ·
fault gone on rerun · diff verdict.

    python bench/faults.py                      # every CPU fault (several minutes on 2 cores)
    python bench/faults.py --only recompile_limit divergent_recompile_batch
    python bench/faults.py --write-docs         # also replace the table in docs/faults.md and README.md

Each fault runs in ``--work`` (default: a temporary folder) as ``<name>/before``, ``<name>/fixes.toml`` and
``<name>/after``; the runs keep their ``ground_truth.json`` for inspection. Hang faults (``hang_*``) are listed
by their own bench (``bench/hangs.py`` where present) and skipped here unless named with ``--only``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "zoo")]       # this checkout's workbench and its zoo

DOCS = ROOT / "docs" / "faults.md"
README = ROOT / "README.md"
BEGIN, END = "<!-- fault-table:begin -->", "<!-- fault-table:end -->"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="*", default=None, help="fault names (default: every CPU fault but hang_*)")
    p.add_argument("--work", default=None, help="folder for the runs (default: a temporary folder)")
    p.add_argument("--no-rerun", action="store_true", help="record and analyse only")
    p.add_argument("--reuse", action="store_true", help="analyse the runs already in --work again (no recording)")
    p.add_argument("--write-docs", action="store_true",
                   help=f"replace the table in {DOCS.relative_to(ROOT)} and {README.relative_to(ROOT)}")
    p.add_argument("--gpu-config", default=None, metavar="PATH",
                   help="only write the config the recommender writes for a launch_bound finding (the rerun "
                        "config bench/faults_gpu.sh takes: the device machine has no polars to run it there)")
    args = p.parse_args(argv)
    if args.gpu_config:
        return write_gpu_config(Path(args.gpu_config))

    from workbench_zoo._launch import shared_launcher
    from workbench_zoo.registry import faults
    from workbench_zoo.verify import loop, markdown_table

    zoo = faults()
    names = args.only or [n for n, f in zoo.items() if f.device == "cpu" and not n.startswith("hang_")]
    work = Path(args.work or tempfile.mkdtemp(prefix="faults-"))
    results = []
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    with shared_launcher():               # every run's ranks fork from one process that imported torch once
        for name in names:
            print(f"… {name}", file=sys.stderr, flush=True)
            try:
                res = loop(name, work, rerun=not args.no_rerun, reuse=args.reuse)
            except Exception as exc:  # noqa: BLE001 - one broken fault must not hide the others' rows
                print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            results.append(res)
            print(f"  {res.seconds:.0f} s: {res.row()}", file=sys.stderr, flush=True)
    if not args.only:
        results += recorded_gpu_rows()
    table = markdown_table(results)
    print(table)
    seconds = time.monotonic() - t0
    print(f"\n{len(results)} faults in {seconds:.0f} s; runs in {work}")
    if args.write_docs:
        import torch

        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        where = (f"torch {torch.__version__} on CPU, gloo; {os.cpu_count()} cores, load average "
                 f"{load0:.1f} at the start and {os.getloadavg()[0]:.1f} at the end; {seconds / 60:.0f} min")
        block = f"{BEGIN}\n_Measured {stamp} by `python bench/faults.py` ({where})._\n\n{table}\n{END}"
        for doc in (DOCS, README):
            text = doc.read_text()
            if BEGIN in text:
                doc.write_text(re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: block, text, flags=re.S))
                print(f"wrote the table into {doc}")
    return 0


#: The GPU faults' recorded runs (bench/faults_gpu.sh on the H200): fault → (before, after rerun or None).
GPU_SAMPLES = {"launch_bound": ("gpu-launch-bound-before", "gpu-launch-bound-after"),
               "pageable_h2d": ("gpu-pageable-h2d", None)}


def recorded_gpu_rows() -> list:
    """Rows for the GPU faults from their recordings in sample_traces/ (analysed here; marked "(GPU, recorded)")."""
    from workbench_zoo.verify import recorded_loop

    rows = []
    for name, (before, after) in GPU_SAMPLES.items():
        b = ROOT / "sample_traces" / before
        if not (b / "run.json").is_file():
            continue
        try:
            res = recorded_loop(name, b, ROOT / "sample_traces" / after if after else None)
        except Exception as exc:  # noqa: BLE001 - a broken recording must not hide the CPU rows
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        res.fault = f"{name} (GPU, recorded)"
        rows.append(res)
    return rows


def write_gpu_config(path: Path) -> int:
    """The recommender's config for a launch-bound finding (its fixer does not depend on the evidence's numbers;
    tests/faults/test_gpu_samples.py checks that the recorded before-run gets exactly this config)."""
    from workbench.analyses.findings import Cost, make_finding
    from workbench.analyses.kinds import IdleEvidence
    from workbench.analyses.recommendations import ranked_fixes, to_compile_config

    f = make_finding("launch_bound", "launch-bound small kernels", IdleEvidence(per_rank=()),
                     Cost.measured(1, "placeholder"), ranks=[0], wall_ns=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_compile_config(ranked_fixes([f]), header="the fix workbench recommend writes for launch_bound"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
