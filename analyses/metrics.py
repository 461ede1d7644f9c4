"""One definition per metric: step time, data wait, recompile count, analysed wall time, severity order.

The CLI, the app, the report and every analysis take these numbers from here.

* **Step time** of a rank's step: its duration plus the wait for its batch (``data_wait_ns``, collector steps),
  i.e. the time from asking for the batch to the end of the step. Per rank, from one source: the collector's
  steps when the rank has any (every step), else the profiler's.
* **Typical step time**: the median step time of the rank.
* **Data wait**: the median ``data_wait_ns`` per step of the rank (a median, so one stall does not move it).
* **Recompile count**: per rank, compiles of a frame beyond its first (rows of a frame minus one, summed).
* **Analysed wall time** of a rank: from its first step's batch request to its last step's end.
* **Severity order**: :data:`workbench.analyses.findings.SEVERITIES`.
* **Noise**: a value stands out of a run's own noise when it is above ``median + NOISE_Z × 1.4826 × MAD`` of the
  same measure elsewhere in the run (:func:`robust_upper`); a series in step order stands out of its own noise
  when its median is at least ``NOISE_Z`` times its step-to-step noise (:func:`consistency_z`).

Example:
    >>> import polars as pl
    >>> s = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3], "source": ["collector"] * 3,
    ...                   "start": [0, 10, 20], "end": [8, 18, 60], "dur": [8, 8, 40],
    ...                   "data_wait_ns": [2, 2, 2]})
    >>> step_table(s)["step_ns"].to_list()
    [10, 10, 42]
"""

from __future__ import annotations

import polars as pl

from workbench.analyses.findings import SEVERITIES

__all__ = ["SEVERITIES", "step_table", "typical_step_ns", "data_wait_median_ns", "recompile_counts", "wall_ns",
           "step_delta_ns", "step_excess_ns", "NOISE_Z", "robust_upper", "consistency_z"]

#: How many robust standard deviations (1.4826 × MAD) a value must stand out of its run's own noise.
NOISE_Z = 3.0

STEP_TABLE: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "source": pl.String,
    "start": pl.Int64,       # the step's start (after its data wait)
    "end": pl.Int64,
    "dur": pl.Int64,
    "data_wait_ns": pl.Int64,
    "step_ns": pl.Int64,     # dur + data wait: the step time
    "profiled": pl.Boolean,
}


def step_table(steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per rank and step: ``step_ns`` (the step time), from the collector's steps where the rank has any, else the
    profiler's. Columns: :data:`STEP_TABLE`."""
    if steps is None or steps.is_empty():
        return pl.DataFrame(schema=STEP_TABLE)
    s = steps.with_columns(pl.col("source").cast(pl.String)).filter(pl.col("dur").is_not_null())
    has_collector = (pl.col("source") == "collector").any().over("rank")
    s = s.filter(pl.when(has_collector).then(pl.col("source") == "collector").otherwise(True))
    s = s.unique(["rank", "step"], keep="first", maintain_order=True)
    wait = pl.col("data_wait_ns").fill_null(0) if "data_wait_ns" in s.columns else pl.lit(0)
    s = s.with_columns(data_wait_ns=(pl.col("data_wait_ns") if "data_wait_ns" in s.columns else pl.lit(None))
                       .cast(pl.Int64),
                       step_ns=(pl.col("dur") + wait).cast(pl.Int64),
                       profiled=(pl.col("profiled") if "profiled" in s.columns else pl.lit(None)).cast(pl.Boolean))
    return s.select([pl.col(c).cast(t) for c, t in STEP_TABLE.items()]).sort("rank", "step")


def typical_step_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the median step time (ns)."""
    t = step_table(steps)
    return {r: int(v) for r, v in t.group_by("rank").agg(pl.col("step_ns").median()).iter_rows() if v is not None}


def data_wait_median_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the median data wait per step (ns); ranks without any data wait recorded are left out."""
    t = step_table(steps).drop_nulls("data_wait_ns")
    return {r: int(v) for r, v in t.group_by("rank").agg(pl.col("data_wait_ns").median()).iter_rows()
            if v is not None}


def recompile_counts(compiles: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: compiles of a frame beyond its first (a repeated compile id counts as another compile)."""
    if compiles is None or compiles.is_empty():
        return {}
    per_frame = compiles.group_by("rank", "frame_id").agg(n=pl.len())
    out = per_frame.group_by("rank").agg((pl.col("n") - 1).sum().alias("re"))
    return {int(r): int(n) for r, n in out.iter_rows()}


def wall_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the analysed wall time, from the first step's batch request to the last step's end (ns)."""
    t = step_table(steps)
    if t.is_empty():
        return {}
    g = t.group_by("rank").agg(first=(pl.col("start") - pl.col("data_wait_ns").fill_null(0)).min(),
                               last=pl.col("end").max())
    return {int(r): int(b - a) for r, a, b in g.iter_rows() if a is not None and b is not None}


def step_delta_ns(steps: pl.DataFrame | None, step: int, ranks: list[int] | tuple[int, ...] | None = None
                  ) -> dict[int, float]:
    """Per rank (of ``ranks``, default all): step ``step``'s step time minus the rank's median over its other
    steps (ns, signed, not rounded); ranks without that step, or with no other step, are left out."""
    t = step_table(steps)
    out: dict[int, float] = {}
    for rank in sorted(set(t["rank"].to_list())):
        if ranks is not None and rank not in ranks:
            continue
        mine = t.filter(pl.col("rank") == rank)
        this = mine.filter(pl.col("step") == step)
        rest = mine.filter(pl.col("step") != step)
        if this.height and rest.height:
            out[rank] = this["step_ns"][0] - (rest["step_ns"].median() or 0)
    return out


def step_excess_ns(steps: pl.DataFrame | None, step: int, ranks: list[int] | tuple[int, ...] | None = None
                   ) -> dict[int, int]:
    """:func:`step_delta_ns` in whole ns, at least 0: how much longer step ``step`` took than the rank's median."""
    return {rank: max(0, int(d)) for rank, d in step_delta_ns(steps, step, ranks).items()}


def _median(v: list[float]) -> float:
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def robust_upper(values: list[int] | list[float]) -> float:
    """The top of ``values``' noise: ``median + NOISE_Z × 1.4826 × MAD``; 0 with fewer than 3 values."""
    v = sorted(float(x) for x in values if x is not None)
    if len(v) < 3:
        return 0.0
    med = _median(v)
    return med + NOISE_Z * 1.4826 * _median(sorted(abs(x - med) for x in v))


def consistency_z(values: list[int] | list[float]) -> float:
    """``median / noise`` of a series in step order, the noise from successive differences
    (``1.4826 × median |Δ| / √2``, so a steady trend is not noise): large when the values stay well above zero
    step after step, small when they jump between zero and something (inf: every step the same positive value;
    0: a median that is not positive)."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return 0.0
    med = _median(sorted(v))
    if med <= 0:
        return 0.0
    if len(v) < 2:
        return float("inf")
    noise = 1.4826 * _median(sorted(abs(b - a) for a, b in zip(v, v[1:]))) / 2 ** 0.5
    return float("inf") if noise == 0 else med / noise
