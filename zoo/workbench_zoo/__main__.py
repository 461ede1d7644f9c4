"""``python -m workbench_zoo list | run NAME --out DIR [--compile-config FILE]``; ``workbench faults ...`` runs the
same (:func:`main` with ``prog="workbench faults"``)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None, prog: str = "python -m workbench_zoo") -> int:
    p = argparse.ArgumentParser(prog=prog, description="The fault zoo: planted-fault runs with their ground truth "
                                                       "(docs/faults.md).")
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list the faults: name, device, ranks, where it is planted, how it is fixed")
    ls.add_argument("--json", action="store_true", help="print the faults as JSON")
    run = sub.add_parser("run", help="record one fault into a run directory; its ground_truth.json goes beside "
                                     "run.json")
    run.add_argument("name", help=f"fault name ({prog} list)")
    run.add_argument("--out", required=True, help="run directory to write (emptied first)")
    run.add_argument("--compile-config", default=None,
                     help="compile config the ranks' collectors apply (a rerun with a fix)")
    run.add_argument("--timeout-s", type=float, default=None, help="kill the ranks after this many seconds")
    args = p.parse_args(argv)
    from workbench_zoo.registry import faults

    if args.cmd == "list":
        zoo = faults()
        if args.json:
            print(json.dumps([f.to_dict() for f in zoo.values()], indent=1))
        else:
            from workbench.analyses.findings import count_text

            rows = [(f.name, f.device.upper(), count_text(f.world_size, "rank"), planted_at(f), f.fix,
                     f.description) for f in zoo.values()]
            head = ("fault", "device", "world", "planted at", "fix", "what")
            widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
            for r in [head, *rows]:
                print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        return 0
    from workbench_zoo.registry import get_fault
    from workbench_zoo.runner import failed_ranks, run_fault, tail_log

    try:
        fault = get_fault(args.name)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    if fault.device == "cuda":
        import torch

        if torch.cuda.device_count() < fault.world_size:
            print(f"error: {args.name} needs {fault.world_size} GPU(s); this machine has "
                  f"{torch.cuda.device_count()} (recorded runs: sample_traces/gpu-*)", file=sys.stderr)
            return 2
    try:
        truth = run_fault(args.name, args.out, compile_config=args.compile_config, timeout_s=args.timeout_s)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    from workbench.format import duration

    bad = failed_ranks(truth)
    cost = truth.get("cost_ns")
    print(f"{args.name}: wrote {args.out} (ground truth: ranks {truth['ranks']}, steps {truth['steps']}, "
          f"cost {'n/a' if cost is None else duration(cost)}, {duration(truth['wall_s'] * 1e9)})")
    for r in bad:
        print(f"rank {r} exited {truth['returncodes'][str(r)]}:\n{tail_log(args.out, r, 1500)}", file=sys.stderr)
    # the ranks of a fault whose finding ends the job (a hang, desync, dead rank) are meant to fail or be killed:
    # only the other faults' failures are errors
    from workbench.analyses.kinds import kinds_where

    return 1 if bad and fault.finding not in kinds_where(ends_job=True) else 0


def _listed(word: str, values: tuple[int, ...]) -> str:
    return f"{word}{'s' if len(values) > 1 else ''} {', '.join(map(str, values))}"


def planted_at(fault) -> str:
    """``rank 1, step 5`` / ``ranks 0, 1, every step``: where the fault is planted."""
    ranks = _listed("rank", fault.ranks) if fault.ranks else "no rank"
    return f"{ranks}, {_listed('step', fault.steps) if fault.steps else 'every step'}"


if __name__ == "__main__":
    sys.exit(main())
