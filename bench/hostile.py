"""Run the hostile-input corpus (tests/hostile/) and print its table: per class and in total, how many cases were
handled / crash / hang / internal error / wrong / silent / executed, then every case not handled with its reason.

    python bench/hostile.py                       # all cases, seed 0, two processes
    python bench/hostile.py --only fr --seed 3    # one class, another seed
    python bench/hostile.py --json out.json       # also write every result as JSON
    python bench/hostile.py --case kineto-fifo-0 --keep   # one case, its folder kept to look at

Each case runs in a subprocess with a wall-clock timeout and a 3 GiB address-space limit (tests/hostile/harness.py
says how a case lands in a column). The code under test is the workbench this interpreter has installed, so
``/path/to/other/checkout/.venv/bin/python bench/hostile.py`` tests that checkout. Exit status 0 when every case
is handled, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

HOSTILE = Path(__file__).resolve().parents[1] / "tests" / "hostile"
sys.path.insert(0, str(HOSTILE))

from corpus import CLASSES, build_corpus, fast_subset  # noqa: E402
from harness import COLUMNS, Result, run_cases  # noqa: E402


def table(results: list[Result]) -> str:
    """The markdown table: one row per class, then the total."""
    head = "| class | cases | " + " | ".join(COLUMNS) + " |"
    rows = [head, "|" + " --- |" * (len(COLUMNS) + 2)]
    for cls in [*CLASSES, "total"]:
        mine = [r for r in results if cls in ("total", r.cls)]
        if not mine:
            continue
        n = Counter(r.column for r in mine)
        name = f"**{cls}**" if cls == "total" else cls
        rows.append(f"| {name} | {len(mine)} | " + " | ".join(str(n.get(c, 0)) for c in COLUMNS) + " |")
    return "\n".join(rows)


def failures(results: list[Result]) -> str:
    """Every case not handled, grouped by column, one line each."""
    out = []
    for col in COLUMNS[:-1]:
        bad = [r for r in results if r.column == col]
        if bad:
            out.append(f"\n{col} ({len(bad)}):")
            out.extend(f"  {r.id}: {r.reason}" for r in sorted(bad, key=lambda r: r.id))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=CLASSES, help="run one class")
    ap.add_argument("--case", action="append", help="run this case id (repeatable)")
    ap.add_argument("--fast", action="store_true", help="only the CI subset")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--json", type=Path, help="write every result here")
    ap.add_argument("--keep", action="store_true", help="keep each case's folder (printed)")
    ap.add_argument("--workdir", type=Path, help="where the case folders go (default: a temp folder)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no line per case while running")
    args = ap.parse_args(argv)

    cases = build_corpus(args.seed, args.only)
    if args.fast:
        cases = fast_subset(cases)
    if args.case:
        cases = [c for c in cases if c.id in set(args.case)]
    t0 = time.monotonic()
    done = [0]

    def progress(r: Result) -> None:
        done[0] += 1
        if not args.quiet:
            print(f"[{done[0]:>3}/{len(cases)}] {r.column:<14} {r.id} ({r.seconds:.1f} s)"
                  + (f": {r.reason}" if r.reason else "") + (f"\n      kept: {r.folder}" if r.folder else ""),
                  file=sys.stderr, flush=True)

    results = run_cases(args.seed, [c.id for c in cases], jobs=args.jobs, workdir=args.workdir, keep=args.keep,
                        on_result=progress)
    took = time.monotonic() - t0
    print(f"hostile corpus, seed {args.seed}: {len(results)} cases in {took:.0f} s ({args.jobs} processes)\n")
    print(table(results))
    print(failures(results))
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "seconds": round(took), "table": table(results),
                                         "results": [asdict(r) for r in results]}, indent=1))
    return 0 if all(r.column == "handled" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
