"""Communication–computation overlap per rank and per step.

Two measures, both from the unions of communication and of compute time on a rank's device timeline:

* ``overlap_pct`` (HTA's ``get_comm_comp_overlap``): overlapped communication / communication time, where
  overlapped communication is the time some communication and some compute run at once (T_comm ∩ T_comp).
* ``overlap_of_max_pct``: (T_comm ∩ T_comp) / max(T_comm, T_comp) — 100 % only when the shorter of the two is
  entirely hidden under the longer and they are equally long; it penalises compute that never hides anything.

``exposed_ns`` is communication time with no compute under it: time the step waits on the network.
"""

from __future__ import annotations

import polars as pl


def comm_compute_overlap(breakdown: pl.DataFrame) -> pl.DataFrame:
    """Overlap measures from :func:`workbench.analyses.breakdown.time_breakdown` rows (per step) or
    :func:`~workbench.analyses.breakdown.breakdown_by_rank` rows (per rank).

    Columns: ``rank``, ``step`` (when the input has it), ``comm_ns``, ``compute_ns``, ``overlapped_ns``
    (comm ∩ compute), ``exposed_ns`` (comm without compute), ``window_ns``, ``overlap_pct`` (overlapped / comm,
    HTA), ``overlap_of_max_pct`` (overlapped / max(comm, compute)), ``exposed_pct`` (exposed / window).
    """
    keys = [c for c in ("rank", "step") if c in breakdown.columns]
    return breakdown.select(
        *keys,
        "comm_ns",
        "compute_ns",
        pl.col("comm_overlapped_ns").alias("overlapped_ns"),
        pl.col("comm_exposed_ns").alias("exposed_ns"),
        "window_ns",
        pl.col("comm_overlap_pct").alias("overlap_pct"),
        pl.col("comm_overlap_of_max_pct").alias("overlap_of_max_pct"),
        pl.col("comm_exposed_pct").alias("exposed_pct"),
    )
