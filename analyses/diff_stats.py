"""The statistics of the diff: how a per-step quantity changed between two runs, with its uncertainty.

:func:`compare` judges the values of each side: ``better`` / ``worse`` only when the Mann–Whitney rank-sum
test finds a shift (:func:`rank_sum_p`, p < 0.05) that the medians (≥ 2 %), the test's effect size
(:func:`prob_lower`) and the 95 % bootstrap CI of the median change (:func:`median_change_ci`) agree on;
``unchanged`` when that CI lies within ±5 %; else ``cannot tell`` — and always ``cannot tell`` with fewer than
:data:`MIN_STEPS` a side. The step times compared are :func:`workbench.analyses.metrics.job_step_times` (the
slowest rank's per step). Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from workbench.analyses.metrics import job_step_times  # noqa: F401  (the diff's step times: one definition)
from workbench.format import duration

#: ``info``: shown, not judged (a single statistic without an uncertainty of its own).
Direction = Literal["better", "worse", "unchanged", "cannot tell", "not comparable", "n/a", "info"]

#: Fewer steps than this on either side: the verdict is "cannot tell".
MIN_STEPS = 8
#: A change whose 95 % CI lies within ±EQUIVALENT_PCT is "unchanged"; a significant change below SAME_PCT too.
EQUIVALENT_PCT = 5.0
SAME_PCT = 2.0
#: Significance level of the rank-sum test; bootstrap resamples (fixed seed: the same input gives the same CI).
ALPHA = 0.05
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Change:
    """A per-step quantity on both sides and what can be said about its change.

    ``verdict`` is ``better`` / ``worse`` only when the rank-sum test finds a shift (p < 0.05) and the median change
    (≥ 2 %), the effect size and the bootstrap CI point the same way; ``unchanged`` when the 95 % CI of the median
    change lies within ±5 % (or a significant change is below 2 %); else ``cannot tell``. ``reason`` says which,
    with the numbers.
    """

    n_before: int
    n_after: int
    median_before: float | None
    median_after: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    verdict: Direction
    reason: str


@dataclass(frozen=True)
class StepStats:
    """One side's step times (ns): where they came from, how many, median, p90, spread (p75 − p25), mean, max."""

    source: str | None
    n: int
    median_ns: float | None
    p90_ns: float | None
    spread_ns: float | None
    mean_ns: float | None
    max_ns: float | None


def rank_sum_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann–Whitney U (Wilcoxon rank-sum) test, normal approximation with tie and
    continuity correction. 1.0 when either side is empty or every value is equal."""
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return 1.0
    both = pl.Series(list(a) + list(b), dtype=pl.Float64)
    ranks = both.rank("average").to_numpy()
    u1 = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    n = n1 + n2
    ties = both.value_counts()["count"].to_numpy().astype(float)
    var = n1 * n2 / 12.0 * ((n + 1) - float(((ties ** 3) - ties).sum()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0))))


def median_change_ci(a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP,
                     seed: int = 0) -> tuple[float, float]:
    """95 % bootstrap CI (percent) of ``median(b) / median(a) − 1``, each side resampled on its own."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a, float), np.asarray(b, float)
    mx = np.median(rng.choice(x, (resamples, x.size)), axis=1)
    my = np.median(rng.choice(y, (resamples, y.size)), axis=1)
    ratio = 100.0 * (my / np.where(mx == 0, np.nan, mx) - 1.0)
    lo, hi = np.nanpercentile(ratio, [2.5, 97.5])
    return float(lo), float(hi)


def compare(before: Sequence[float], after: Sequence[float], *, lower_is_better: bool = True,
            min_n: int = MIN_STEPS, what: str = "steps", floor: float = 0.0) -> Change:
    """Judge the change of a per-step quantity from its values on each side (see :class:`Change`); a change of
    the median below ``floor`` (e.g. 1 % of the step time, for a part of it) is ``unchanged`` whatever the test."""
    a = [float(v) for v in before if v is not None]
    b = [float(v) for v in after if v is not None]
    med_a = float(np.median(a)) if a else None
    med_b = float(np.median(b)) if b else None
    pct = 100.0 * (med_b / med_a - 1.0) if med_a and med_b is not None else None
    if len(a) < min_n or len(b) < min_n:
        return Change(len(a), len(b), med_a, med_b, pct, None, None, None, "cannot tell",
                      f"only {len(a)} and {len(b)} {what}; need at least {min_n} a side")
    if not med_a:
        return Change(len(a), len(b), med_a, med_b, pct, None, None, None, "cannot tell",
                      f"the median before is 0 ({len(a)} vs {len(b)} {what})")
    if med_b is not None and abs(med_b - med_a) < floor:
        return Change(len(a), len(b), med_a, med_b, pct, None, None, None, "unchanged",
                      f"unchanged: the median moved {duration(abs(med_b - med_a))}, below the "
                      f"{duration(floor)} that matters (1 % of the step time)")
    lo, hi = median_change_ci(a, b)
    p = rank_sum_p(a, b)
    lower = prob_lower(a, b)
    nums = (f"{pct:+.1f} % [95 % CI {lo:+.1f} %, {hi:+.1f} %], rank-sum p={p:.3g}, P(after < before)={lower:.2f}, "
            f"{len(a)} vs {len(b)} {what}")
    up = pct > 0
    agrees = (lower < 0.5) == up and (hi > 0 if up else lo < 0)  # the test, the medians and the CI point one way
    if p < ALPHA and agrees and abs(pct) >= SAME_PCT:
        verdict: Direction = "worse" if up == lower_is_better else "better"
        return Change(len(a), len(b), med_a, med_b, pct, lo, hi, p, verdict, f"{'up' if up else 'down'} {nums}")
    if max(abs(lo), abs(hi)) <= EQUIVALENT_PCT or (p < ALPHA and abs(pct) < SAME_PCT):
        return Change(len(a), len(b), med_a, med_b, pct, lo, hi, p, "unchanged", f"unchanged: {nums}")
    return Change(len(a), len(b), med_a, med_b, pct, lo, hi, p, "cannot tell", f"spreads overlap: {nums}")


def prob_lower(a: Sequence[float], b: Sequence[float]) -> float:
    """P(a value of ``b`` < a value of ``a``), ties counted half: the rank-sum test's effect size (0.5: none)."""
    x, y = np.asarray(a, float)[:, None], np.asarray(b, float)[None, :]
    return float(((y < x).sum() + 0.5 * (y == x).sum()) / (x.size * y.size)) if x.size and y.size else 0.5


def step_stats(source: str | None, values: Sequence[float]) -> StepStats:
    if not values:
        return StepStats(source, 0, None, None, None, None, None)
    v = np.asarray(values, float)
    q25, q50, q75, q90 = np.percentile(v, [25, 50, 75, 90])
    return StepStats(source, int(v.size), float(q50), float(q90), float(q75 - q25), float(v.mean()), float(v.max()))
