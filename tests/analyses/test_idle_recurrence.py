"""An idle cause is a finding where it recurs, not where a busy host descheduled a thread once: a planted cause
comes back every step; one step's 25 ms in the gap between two steps (a CPU rank preempted at load 12, seen as
``data_loading`` on the CI's optimizer run) is no pattern to fix."""

from __future__ import annotations

import polars as pl

from workbench.analyses.idle_causes import HOST_STREAM, IDLE_ATTRIBUTION
from workbench.analyses.idle_findings import RECUR_STEPS, idle_cause_findings
from workbench.analyses.kinds import Kind

MS = 1_000_000


def attribution(data_ms_by_step: dict[int, float], steps: range = range(3, 7)) -> pl.DataFrame:
    """One CPU rank's attribution: 60 ms of compute-adjacent untraced time a step, plus ``data`` where given."""
    rows = [{"rank": 0, "stream": HOST_STREAM, "step": s, "cause": "untraced", "label": None, "site": None, "ns": 60 * MS,
             "gaps": 3} for s in steps]
    rows += [{"rank": 0, "stream": HOST_STREAM, "step": s, "cause": "data", "label": "batch wait before the step (steps.jsonl)",
              "site": None, "ns": int(v * MS), "gaps": 1} for s, v in data_ms_by_step.items()]
    return pl.DataFrame(rows, schema=IDLE_ATTRIBUTION)


WINDOW = {0: 400 * MS}   # four 100 ms steps: 2 % of the window is 8 ms, 2 ms of an average step


def kinds(data: dict[int, float]) -> list[Kind]:
    return [f.kind for f in idle_cause_findings(attribution(data), WINDOW)]


def test_a_cause_in_every_step_is_named():
    assert kinds({3: 5, 4: 5, 5: 5, 6: 5}) == [Kind.DATA_LOADING]


def test_one_descheduled_step_is_not_a_finding():
    assert RECUR_STEPS == 2
    assert kinds({3: 0.03, 4: 25, 5: 0.03, 6: 0.04}) == []        # 25 ms once: over 2 % of the window in total


def test_a_cause_that_starts_mid_run_is_named_once_it_recurs():
    assert kinds({5: 44, 6: 44}) == [Kind.DATA_LOADING]
