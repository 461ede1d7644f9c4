"""Ground truth from the ranks' own measurements: what a planted fault cost, measured by the fault script itself.

The cost of a fault is the time the *healthy* ranks lost to it: their step time (or a named section such as the
gradient all-reduce) in the planted steps in excess of their own typical (median) step. It is the mean over the
healthy ranks, summed over the planted steps, so it compares to a finding's per-rank cost.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from workbench_zoo.registry import Fault, RankRecord

#: Steps never used as the typical step (the first compile happens in step 0).
WARMUP_STEPS = 1


def typical(values: dict[int, int], exclude: set[int]) -> float | None:
    """Median of ``values`` over the steps not in ``exclude`` and past the warm-up."""
    xs = [v for s, v in values.items() if s >= WARMUP_STEPS and s not in exclude]
    return float(median(xs)) if xs else None


def excess(records: dict[int, RankRecord], ranks: list[int], steps: list[int], section: str | None = None,
           exclude: set[int] | None = None) -> dict[int, int]:
    """Per rank of ``ranks``: the summed excess of ``section`` (None: the whole step) over its median in
    ``steps``."""
    out: dict[int, int] = {}
    exclude = set(steps) | (exclude or set())
    for r in ranks:
        rec = records.get(r)
        if rec is None:
            continue
        values = rec.step_ns if section is None else rec.timed.get(section, {})
        base = typical(values, exclude)
        if base is None:
            continue
        out[r] = int(sum(max(0.0, values[s] - base) for s in steps if s in values))
    return out


#: The comment a fault script puts on the line its code fix is about (its ground-truth ``line``).
FIX_MARK = "# fix here"


def fix_line(path: str) -> str:
    """``path:N`` of the line of ``path`` marked with :data:`FIX_MARK` (a fault script's fix line)."""
    with open(path) as fh:
        n = next(i for i, line in enumerate(fh, 1) if FIX_MARK in line and not line.lstrip().startswith(("#", '"')))
    return f"{path}:{n}"


def truth(fault: Fault, per_rank: dict[int, int], method: str, *, agg: str = "mean",
          by_step: dict[int, dict[int, int]] | None = None, **extra: Any) -> dict[str, Any]:
    """The ground-truth dict: the fault's ranks and steps, ``cost_ns`` = the mean (or ``agg="max"``: the
    longest) of ``per_rank``; ``by_step`` (rank → step → ns) lets a finding over a profiler window be checked
    against the same steps."""
    vals = list(per_rank.values())
    cost = (max(vals) if agg == "max" else int(sum(vals) / len(vals))) if vals else None
    out = {"fault": fault.name, "finding": fault.finding, "ranks": list(fault.ranks), "steps": list(fault.steps),
           "cost_ns": cost, "cost_agg": agg, "cost_per_rank_ns": {str(k): v for k, v in per_rank.items()},
           "cost_method": method, **extra}
    if by_step is not None:
        out["cost_by_rank_step_ns"] = {str(r): {str(s): int(v) for s, v in d.items()} for r, d in by_step.items()}
    return out


def default_ground_truth(records: dict[int, RankRecord], fault: Fault) -> dict[str, Any]:
    """The healthy ranks' step-time excess in the planted steps (the time they waited for the faulty rank)."""
    healthy = [r for r in records if r not in fault.ranks]
    per = excess(records, healthy, list(fault.steps))
    return truth(fault, per, "the longest healthy-rank step-time excess over its median step, in the planted steps",
                 agg="max")
