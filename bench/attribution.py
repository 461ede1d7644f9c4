"""Generated faults, end to end: record each case (real gloo ranks), analyse it, score the roots against the
ranks' own measurements (docs/critical-path.md, "Proof").

    python bench/attribution.py                          # 200 cases from seed 0 (the full distribution)
    python bench/attribution.py --n 20 --fast            # the CI set's distribution (2-4 ranks, 30-300 ms)
    python bench/attribution.py --seed 1000 --n 50 --jobs 3 --json out.json
    python bench/attribution.py --work DIR --reuse       # score the runs already recorded in DIR again

Per case (:mod:`workbench_zoo.generated`): :func:`plan` (seed → world size, culprits, phase, kind, size, steps, or a
clean control), :func:`run_case` (the zoo's forked launcher), ``workbench.open`` + ``analysis_tables`` (what
``workbench analyze`` runs), :func:`score` against the run's noise bar (``late_ranks.noise_bar``: measured by the
engine from the run itself). Printed: culprit right (every detectable culprit named, with its steps: all its *must*
steps — planted steps, not the first, where its truth, its planted size and how long it actually held the others
back (the ranks' own arrival clocks) are all at least twice the bar — and maybe its other planted ones, never an
unplanted one clearly), cost error median and p90 (|cost - truth| / truth per named culprit, truth: the layered
counterfactual of the culprits' own timed work), false medium/high roots on the controls, false culprits (a rank
with nothing planted named), culprits undetectable on this run (no must step: counted apart, not in the
percentage), and the wall time (docs/critical-path.md, "Ground truth, honestly").
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "zoo")]


def one(seed: int, fast: bool, work: Path, reuse: bool) -> dict[str, Any]:
    """Record (unless ``reuse`` finds it), analyse and score case ``seed``; a failure is a row with ``error``."""
    from workbench_zoo.generated import CaseScore, plan, run_case, score, truth_for

    import workbench
    from workbench.analyses.summary import analysis_tables

    case = plan(seed, fast=fast)
    out = work / f"case-{seed}"
    t0 = time.monotonic()
    try:
        if reuse and (out / "ground_truth.json").is_file():
            truth = truth_for(out)
        else:
            truth = run_case(case, out)
        bad = {r: c for r, c in (truth.get("returncodes") or {}).items() if c != 0}
        if bad:
            raise RuntimeError(f"ranks exited {bad}")
        from workbench.analyses.late_ranks import noise_bar

        tables = analysis_tables(workbench.open(out))
        cp = tables.critical_path
        sc = score(case, truth, list(tables.roots), noise_bar(cp) if cp is not None else None)
    except Exception as exc:   # a failed case is a row of the table, not the end of the bench
        sc = CaseScore(seed, case.control, case.world, case.describe(), None, [], [], [],
                       error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    sc.seconds = round(time.monotonic() - t0, 1)
    return sc.to_dict()


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    planted = [r for r in rows if not r["control"] and not r["error"]]
    controls = [r for r in rows if r["control"] and not r["error"]]
    culprits = [c for r in planted for c in r["culprits"]]
    detectable = [c for c in culprits if c["detectable"]]
    errs = [c["cost_error"] for c in detectable if c["cost_error"] is not None and c["found"]]
    judged = [r for r in planted if any(c["detectable"] for c in r["culprits"])]
    return {
        "cases": len(rows), "failed": sum(1 for r in rows if r["error"]), "controls": len(controls),
        "planted": len(planted), "judged": len(judged),
        "case_right_pct": 100.0 * sum(r["right"] for r in judged) / len(judged) if judged else None,
        "culprits": len(culprits), "detectable": len(detectable),
        "culprit_right_pct": 100.0 * sum(c["right"] for c in detectable) / len(detectable) if detectable else None,
        "culprit_found_pct": 100.0 * sum(c["found"] for c in detectable) / len(detectable) if detectable else None,
        "cost_error_median": pct(errs, 0.5), "cost_error_p90": pct(errs, 0.9),
        "false_loud_roots_on_controls": sum(len(r["loud_roots"]) for r in controls),
        "transfer_roots_on_controls": sum(len(r.get("transfer_roots") or []) for r in controls),
        "host_late_named": sum(len(r.get("host_late") or []) for r in rows),
        "false_culprits_loud": sum(1 for r in rows for f in r["false_culprits"] if f["severity"] in ("high", "medium")),
        "false_culprits_low": sum(1 for r in rows for f in r["false_culprits"]
                                  if f["severity"] not in ("high", "medium")),
        "undetectable_culprits": len(culprits) - len(detectable),
        "median_noise_ms": statistics.median([r["noise_ns"] / 1e6 for r in rows if r["noise_ns"]]) if any(
            r["noise_ns"] for r in rows) else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200, help="cases (default 200)")
    p.add_argument("--seed", type=int, default=0, help="first seed (cases use seed, seed+1, ...)")
    p.add_argument("--fast", action="store_true", help="the CI set's distribution: 2-4 ranks, 30-300 ms")
    p.add_argument("--jobs", type=int, default=1, help="cases recorded at once (each has its own ranks)")
    p.add_argument("--work", default=None, help="folder for the runs (default: a temporary folder)")
    p.add_argument("--reuse", action="store_true", help="score the runs already recorded in --work again")
    p.add_argument("--json", default=None, help="write every case's score and the summary here")
    p.add_argument("--quiet", action="store_true", help="no line per case")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="attribution-"))
    work.mkdir(parents=True, exist_ok=True)
    from workbench_zoo._launch import shared_launcher

    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    seeds = list(range(args.seed, args.seed + args.n))
    rows: list[dict[str, Any]] = []
    with shared_launcher():
        if args.jobs <= 1:
            results = (one(s, args.fast, work, args.reuse) for s in seeds)
        else:
            pool = cf.ThreadPoolExecutor(args.jobs)
            results = pool.map(lambda s: one(s, args.fast, work, args.reuse), seeds)
        for row in results:
            rows.append(row)
            if not args.quiet:
                print(_line(row), flush=True)
    summary = summarize(rows)
    summary.update(seconds=round(time.monotonic() - t0, 1), load_before=round(load0, 1),
                   load_after=round(os.getloadavg()[0], 1), seed=args.seed, n=args.n, fast=args.fast,
                   work=str(work))
    print(_summary_text(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "cases": rows}, indent=1, default=str))
    return 0


def _line(r: dict[str, Any]) -> str:
    if r["error"]:
        return f"seed {r['seed']:>5}  ERROR  {r['error'].splitlines()[0]}  [{r['describe']}]"
    parts = []
    for c in r["culprits"]:
        err = f"{100 * c['cost_error']:.0f}%" if c["cost_error"] is not None else "-"
        if not c["detectable"]:
            state = "undetectable" + (" (named anyway)" if c["found"] else "")
        elif c["right"]:
            state = "right"
        elif not c["found"]:
            state = "MISSED"
        else:
            missing = sorted(set(c["must"]) - set(c["found_steps"]))
            extra = sorted(set(c["clear_steps"]) - set(c["must"]) - set(c["may"]))
            state = f"steps WRONG (missing {missing}, unplanted {extra})"
        parts.append(f"r{c['rank']} {state} (found {c['found_steps']} must {c['must']}; cost err {err}; "
                     f"{c['reason'] or ','.join(c['kinds']) or '-'})")
    if r["control"]:
        parts.append("control: " + ("clean" if not r["loud_roots"] else f"LOUD {r['loud_roots']}"))
        if r.get("transfer_roots"):
            parts.append(f"exposed transfer (medium/high): {[(x['ranks'], x['severity']) for x in r['transfer_roots']]}")
    if r["false_culprits"]:
        parts.append(f"other ranks named: {[(f['ranks'], f['severity']) for f in r['false_culprits']]}")
    noise = f"{r['noise_ns'] / 1e6:.1f}" if r["noise_ns"] else "-"
    return f"seed {r['seed']:>5}  {'ok ' if r['right'] or r['control'] and not r['loud_roots'] else 'BAD'}  " \
           f"noise {noise} ms  {r['seconds']:.0f}s  {'; '.join(parts)}  [{r['describe']}]"


def _summary_text(s: dict[str, Any]) -> str:
    def f(x: Any, unit: str = "") -> str:
        return "-" if x is None else (f"{x:.1f}{unit}" if isinstance(x, float) else f"{x}{unit}")

    err_m = None if s["cost_error_median"] is None else 100 * s["cost_error_median"]
    err_p = None if s["cost_error_p90"] is None else 100 * s["cost_error_p90"]
    return (f"\n{s['cases']} cases (seed {s['seed']}..{s['seed'] + s['n'] - 1}{', fast' if s['fast'] else ''}): "
            f"{s['planted']} planted, {s['controls']} controls, {s['failed']} failed\n"
            f"culprit right: {f(s['culprit_right_pct'], ' %')} of {s['detectable']} detectable culprits "
            f"(found {f(s['culprit_found_pct'], ' %')}); cases right {f(s['case_right_pct'], ' %')} of {s['judged']}\n"
            f"cost error: median {f(err_m, ' %')}, p90 {f(err_p, ' %')}\n"
            f"false medium/high roots on controls: {s['false_loud_roots_on_controls']} (exposed communication, the "
            f"workload's transfer time with waits removed, reported apart: {s['transfer_roots_on_controls']} "
            f"medium/high); unplanted ranks named where the ranks' own clocks show them late (apart): "
            f"{s['host_late_named']}; other ranks named: "
            f"{s['false_culprits_loud']} medium/high, {s['false_culprits_low']} low\n"
            f"undetectable culprits (no planted step, after the first, where truth, planted size and actual hold all "
            f"reach 2× the run's noise bar): {s['undetectable_culprits']}; "
            f"median noise {f(s['median_noise_ms'], ' ms')}\n"
            f"{s['seconds']:.0f} s (load {s['load_before']} → {s['load_after']}); runs in {s['work']}")


if __name__ == "__main__":
    raise SystemExit(main())
