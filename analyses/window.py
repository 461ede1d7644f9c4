"""The analysed window: which steps and which device activity an analysis looks at.

``"steady"`` (the default) keeps the complete ``ProfilerStep`` iterations, as HTA does: every profiler step of a
rank except the last one of each profiler window (a step whose successor is not step + 1), whose device work the
profiler stops recording part-way (HTA drops it too, via
``include_last_profiler_step=False``). Device activity belongs to the step of the launch that queued it (the
``step`` column of KERNELS), so a kernel that runs after its step's CPU range still counts for that step.
``"all"`` keeps everything. A rank with fewer than two profiler steps falls back to ``"all"`` (HTA does the same).
"""

from __future__ import annotations

from typing import Literal

import polars as pl

Window = Literal["steady", "all"]
WINDOWS: tuple[str, ...] = ("steady", "all")


def _check(window: str) -> None:
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {WINDOWS}, not {window!r}")


def profiler_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """The ``ProfilerStep#N`` rows of STEPS (``source == "profiler"``), sorted by rank and start."""
    if steps.is_empty():
        return steps
    return steps.filter(pl.col("source").cast(pl.String) == "profiler").sort(["rank", "start"])


def window_steps(steps: pl.DataFrame, window: Window = "steady") -> pl.DataFrame:
    """The profiler steps in the window, one row per rank and step.

    Columns: ``rank``, ``step``, ``start``, ``end`` (the step's CPU range, ns), ``last`` (True for the rank's last
    profiler step of a window, which ``"steady"`` leaves out), ``in_window`` (kept by this window).
    """
    _check(window)
    prof = profiler_steps(steps)
    if prof.is_empty():
        return pl.DataFrame(
            schema={"rank": pl.Int32, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64,
                    "last": pl.Boolean, "in_window": pl.Boolean}
        )
    # a profiler window ends where the next step on the rank is not step + 1 (or there is none): with
    # several windows each one's last step is cut short by the profiler, not only the rank's very last
    nxt = pl.col("step").shift(-1).over("rank")
    prof = prof.select("rank", "step", "start", "end").with_columns(
        last=nxt.is_null() | (nxt != pl.col("step") + 1),
        _n=pl.len().over("rank"),
    )
    keep = pl.lit(True) if window == "all" else (~pl.col("last") | (pl.col("_n") < 2))
    return prof.with_columns(in_window=keep).drop("_n")


def window_kernels(kernels: pl.DataFrame, steps: pl.DataFrame, window: Window = "steady") -> pl.DataFrame:
    """KERNELS rows in the window.

    ``"steady"``: device activity whose launch belongs to a complete profiler step of its rank (so activity
    without a recorded launch, or launched outside every ``ProfilerStep``, is left out). Ranks with fewer than two
    profiler steps keep all their rows. ``"all"``: every row.
    """
    _check(window)
    if window == "all" or kernels.is_empty():
        return kernels
    ws = window_steps(steps, window)
    stepped = ws.group_by("rank").agg(n=pl.len()).filter(pl.col("n") >= 2).get_column("rank")
    if stepped.is_empty():
        return kernels
    # ranks with >= 2 profiler steps keep rows launched in one of their steps that is not a window's last
    kept = ws.filter(pl.col("in_window") & pl.col("rank").is_in(stepped.implode())).select(
        "rank", "step", _keep=pl.lit(True))
    flagged = kernels.join(kept, on=["rank", "step"], how="left", maintain_order="left")
    keep = pl.col("_keep").fill_null(False) | ~pl.col("rank").is_in(stepped.implode())
    return flagged.filter(keep).drop("_keep")

