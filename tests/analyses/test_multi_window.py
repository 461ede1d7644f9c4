"""Several profiler windows in one run: each window's cut-short last step is left out, and no step spans the gap."""

from __future__ import annotations

import polars as pl

from conftest import kernels_frame, steps_frame
from workbench.analyses.breakdown import breakdown_by_rank, time_breakdown
from workbench.analyses.window import window_kernels, window_steps

MS = 1_000_000
GAP = 10_000 * MS  # 10 s between the two windows (steps 8..104 unprofiled)


def _two_windows() -> tuple[pl.DataFrame, pl.DataFrame]:
    steps, kernels = [], []
    for base, first in ((0, 5), (GAP, 105)):
        for i in range(3):
            t = base + i * 10 * MS
            steps.append({"step": first + i, "start": t, "end": t + 10 * MS})
            # 6 ms of compute per step, launched in the step
            kernels.append({"step": first + i, "start": t + 1 * MS, "end": t + 7 * MS, "launch_start": t})
    return kernels_frame(kernels), steps_frame(steps)


def test_each_windows_last_step_is_left_out() -> None:
    kernels, steps = _two_windows()
    ws = window_steps(steps)
    assert ws.filter(~pl.col("in_window"))["step"].to_list() == [7, 107]
    assert sorted(window_kernels(kernels, steps)["step"].to_list()) == [5, 6, 105, 106]


def test_breakdown_does_not_span_the_gap_between_windows() -> None:
    kernels, steps = _two_windows()
    by_rank = breakdown_by_rank(time_breakdown(kernels, steps)).row(0, named=True)
    # 4 steady steps; the gap between windows (10 s) is not idle time of the run
    assert by_rank["window_ns"] < 50 * MS, by_rank["window_ns"]
    assert by_rank["compute_ns"] == 4 * 6 * MS
