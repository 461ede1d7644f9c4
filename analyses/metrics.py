"""One definition per metric. The CLI, the app, the report, the diff and every analysis take these numbers from here.

Steps (STEPS rows; per rank one source: the collector's steps when the rank has any — every step — else the
profiler's):

* **Step time** of a rank's step: its duration plus the wait for its batch (``data_wait_ns``, collector steps):
  the time from asking for the batch to the end of the step (:func:`step_table`).
* **Typical step time** of a rank: the median of its step times over every step (:func:`typical_step_ns`); the
  **longest step**: its largest step time after its first step (which holds the first compile).
  :func:`step_summary` gives both, with the steps seen and the median data wait: what ``workbench analyze``, the
  Overview and the Pipeline page show.
* **The job's step time** of a step: the slowest rank's step time (it sets the pace; :func:`job_steps`); the diff
  compares these, its first step left out (:func:`job_step_times`).
* **Step period**: from a step's start to the rank's next step start, the data wait before that next step
  included (:func:`step_periods`; a rank's last step has none).
* **Data wait**: the median ``data_wait_ns`` per step of the rank (a median, so one stall does not move it).
* **Analysed wall time** of a rank: from its first step's batch request to its last step's end (:func:`wall_ns`).

Compiles (COMPILES rows):

* **Recompile**: a compile dynamo numbers beyond a frame's first (``frame_compile_id > 0``), counted once
  whatever its restarts (``attempt``). After ``torch._dynamo.reset()`` the numbering starts again at 0: the first
  compile after a reset is not a recompile (tlparse counts the same way). Rows without a ``frame_compile_id``
  count as the compiles of their frame beyond its first (:func:`recompile_counts`).
* **Compile time** of a rank: the summed known duration of its compiles (:func:`compile_time_ns`).

Device time (one rank's analysed window; ``kernel_class`` from ingest, :mod:`workbench.communication`):

* **Busy**: covered by some kernel, memcpy or memset; **idle** = window − busy (:func:`idle`);
* **Exposed communication**: communication with no compute under it (:func:`exposed_comm`); **exposed memory**:
  copies/sets with neither compute nor communication (:func:`exposed_memory`). The breakdown's per-step columns
  (:data:`IDLE_NS`, :data:`COMM_EXPOSED_NS`, :data:`MEMORY_EXPOSED_NS`) and the root-cause intervals
  (``rootcause.device_time``) are these.

Pipelines: a run **is a pipeline** when some stage runs at least 2 forward micro-batches per step (median over its
steps; :func:`is_pipeline`).

Thresholds a finding must pass (percent of the window or the step) are declared with their kinds in
:mod:`workbench.analyses.kinds` and re-exported here: :data:`EXPOSED_COMM_PCT`, :data:`EXPOSED_MEMCPY_PCT`,
:data:`IDLE_HOST_PCT`, :data:`IDLE_PCT`, :data:`BUBBLE_PCT`, :data:`TIMEOUT_RISK_PCT`. Severity:
:data:`workbench.analyses.findings.SEVERITIES`.

**Noise**: a value stands out of a run's own noise when it is above ``median + NOISE_Z × 1.4826 × MAD`` of the
same measure elsewhere in the run (:func:`robust_upper`); a series in step order stands out of its own noise when
its median is at least ``NOISE_Z`` times its step-to-step noise (:func:`consistency_z`).

Example:
    >>> import polars as pl
    >>> s = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3], "source": ["collector"] * 3,
    ...                   "start": [0, 10, 20], "end": [8, 18, 60], "dur": [8, 8, 40],
    ...                   "data_wait_ns": [2, 2, 2]})
    >>> step_table(s)["step_ns"].to_list()
    [10, 10, 42]
    >>> step_summary(s).select("median_ns", "max_ns").row(0)
    (10, 42)
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from workbench.analyses.findings import SEVERITIES
from workbench.analyses.intervals import Spans, subtract
from workbench.analyses.kinds import (  # noqa: F401  (re-exported: the thresholds, declared with their kinds)
    BUBBLE_PCT, EXPOSED_COMM_PCT, EXPOSED_MEMCPY_PCT, IDLE_HOST_PCT, IDLE_PCT, TIMEOUT_RISK_PCT,
)

__all__ = ["BUBBLE_PCT", "COMM_EXPOSED_NS", "EXPOSED_COMM_PCT", "EXPOSED_MEMCPY_PCT", "IDLE_HOST_PCT", "IDLE_NS",
           "IDLE_PCT", "MEMORY_EXPOSED_NS", "NOISE_Z", "SEVERITIES", "STEP_NS", "STEP_SUMMARY", "STEP_TABLE", "TIMEOUT_RISK_PCT",
           "compile_time_ns", "consistency_z", "data_wait_median_ns", "exposed_comm", "exposed_memory", "idle",
           "is_pipeline", "job_step_times", "job_steps", "microbatches_per_step", "recompile_counts",
           "robust_upper", "step_delta_ns", "step_excess_ns", "step_periods", "step_summary", "step_table", "summarize_step_table",
           "typical_step_ns", "wall_ns"]

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


# ---------------------------------------------------------------------------------------------- steps
#: The step time of a STEPS row: its duration plus its data wait (0 where none was recorded).
STEP_NS = (pl.col("dur") + pl.col("data_wait_ns").fill_null(0)).cast(pl.Int64)


def step_table(steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per rank and step: ``step_ns`` (the step time), from the collector's steps where the rank has any, else the
    profiler's. Columns: :data:`STEP_TABLE`."""
    if steps is None or steps.is_empty():
        return pl.DataFrame(schema=STEP_TABLE)
    s = steps.with_columns(pl.col("source").cast(pl.String)).filter(pl.col("dur").is_not_null())
    has_collector = (pl.col("source") == "collector").any().over("rank")
    s = s.filter(pl.when(has_collector).then(pl.col("source") == "collector").otherwise(True))
    s = s.unique(["rank", "step"], keep="first", maintain_order=True)
    s = s.with_columns(data_wait_ns=(pl.col("data_wait_ns") if "data_wait_ns" in s.columns else pl.lit(None))
                       .cast(pl.Int64),
                       profiled=(pl.col("profiled") if "profiled" in s.columns else pl.lit(None)).cast(pl.Boolean))
    s = s.with_columns(step_ns=STEP_NS)
    return s.select([pl.col(c).cast(t) for c, t in STEP_TABLE.items()]).sort("rank", "step")


STEP_SUMMARY: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "source": pl.String,                 # collector / profiler: where the rank's steps come from
    "steps": pl.UInt32,
    "first_step": pl.Int32,
    "last_step": pl.Int32,
    "median_ns": pl.Int64,               # the typical step time
    "max_ns": pl.Int64,                  # the longest step after the first
    "data_wait_median_ns": pl.Int64,     # null: no data wait recorded
}


def step_summary(steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per rank: where its steps come from, how many, the first and last step, the typical step time
    (``median_ns``), the longest step after the first (``max_ns``; the first holds the first compile) and the
    median data wait. Columns: :data:`STEP_SUMMARY`."""
    return summarize_step_table(step_table(steps))


def summarize_step_table(t: pl.DataFrame) -> pl.DataFrame:
    """:func:`step_summary` of a :func:`step_table` already built."""
    if t.is_empty():
        return pl.DataFrame(schema=STEP_SUMMARY)
    later = pl.col("step") > pl.col("step").min()
    out = t.group_by("rank").agg(
        source=pl.col("source").first(), steps=pl.len(), first_step=pl.col("step").min(),
        last_step=pl.col("step").max(), median_ns=pl.col("step_ns").median(),
        max_ns=pl.when(pl.len() > 1).then(pl.col("step_ns").filter(later).max()).otherwise(pl.col("step_ns").max()),
        data_wait_median_ns=pl.col("data_wait_ns").drop_nulls().median(),
    )
    return out.select([pl.col(c).cast(t) for c, t in STEP_SUMMARY.items()]).sort("rank")


def typical_step_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the median step time (ns)."""
    return {int(r): int(v) for r, v in step_summary(steps).select("rank", "median_ns").iter_rows() if v is not None}


def data_wait_median_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the median data wait per step (ns); ranks without any data wait recorded are left out."""
    return {int(r): int(v) for r, v in step_summary(steps).select("rank", "data_wait_median_ns").iter_rows()
            if v is not None}


def job_steps(steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per step: the job's step time, the slowest rank's (``step_ns``), and that ``rank``. Collector steps when any
    rank has them, else profiler steps. Columns: ``step``, ``step_ns``, ``rank``, ``source``."""
    t = step_table(steps)
    schema = {"step": pl.Int32, "step_ns": pl.Int64, "rank": pl.Int32, "source": pl.String}
    if t.is_empty():
        return pl.DataFrame(schema=schema)
    source = "collector" if (t["source"] == "collector").any() else "profiler"
    t = t.filter(pl.col("source") == source)
    out = t.sort("step_ns", "rank", descending=[True, False]).group_by("step", maintain_order=True).first()
    return out.select(pl.col("step").cast(pl.Int32), "step_ns", pl.col("rank").cast(pl.Int32),
                      pl.col("source")).sort("step")


def job_step_times(steps: pl.DataFrame | None) -> tuple[str | None, list[float]]:
    """The job's step times (ns) the diff compares, in step order: :func:`job_steps`, from collector steps without
    the first (it holds the first compile) when there are more; and their source."""
    js = job_steps(steps)
    if js.is_empty():
        return None, []
    if js["source"][0] == "collector" and js.height > 1:
        js = js.filter(pl.col("step") > js["step"].min())
    return js["source"][0], [float(v) for v in js["step_ns"].to_list()]


def step_periods(steps: pl.DataFrame | None) -> pl.DataFrame:
    """Per rank and step, the step *period*: from this step's start to the rank's next one (what a step really
    takes, the data wait before the next step included); the rank's steps as :func:`step_table` picks them.

    Columns ``rank``, ``step``, ``period_ns``, ``dur_ns`` (the step body alone), ``data_wait_ns`` (the wait before
    the next step, where the collector measured it). A rank's last step has no next start, so no period.
    """
    t = step_table(steps)
    schema = {"rank": pl.Int32, "step": pl.Int32, "period_ns": pl.Int64, "dur_ns": pl.Int64, "data_wait_ns": pl.Int64}
    if t.is_empty():
        return pl.DataFrame(schema=schema)
    return (
        t.sort("rank", "start")
        .with_columns(period_ns=pl.col("start").shift(-1).over("rank") - pl.col("start"),
                      next_wait=pl.col("data_wait_ns").shift(-1).over("rank"))
        .filter(pl.col("period_ns").is_not_null())
        .select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32), pl.col("period_ns").cast(pl.Int64),
                pl.col("dur").cast(pl.Int64).alias("dur_ns"), pl.col("next_wait").cast(pl.Int64).alias("data_wait_ns"))
    )


def wall_ns(steps: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: the analysed wall time, from the first step's batch request to the last step's end (ns)."""
    t = step_table(steps)
    if t.is_empty():
        return {}
    g = t.group_by("rank").agg(first=(pl.col("start") - pl.col("data_wait_ns").fill_null(0)).min(),
                               last=pl.col("end").max())
    return {int(r): int(b - a) for r, a, b in g.iter_rows() if a is not None and b is not None}


def step_delta_ns(steps: pl.DataFrame | None, step: int, ranks: Sequence[int] | None = None) -> dict[int, float]:
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


def step_excess_ns(steps: pl.DataFrame | None, step: int, ranks: Sequence[int] | None = None) -> dict[int, int]:
    """:func:`step_delta_ns` in whole ns, at least 0: how much longer step ``step`` took than the rank's median."""
    return {rank: max(0, int(d)) for rank, d in step_delta_ns(steps, step, ranks).items()}


# ---------------------------------------------------------------------------------------------- compiles
def recompile_counts(compiles: pl.DataFrame | None) -> dict[int, int]:
    """Per rank: its recompiles — compiles with ``frame_compile_id > 0``, each counted once whatever its restarts;
    a compile after ``torch._dynamo.reset()`` numbered 0 again is not one. Rows without a ``frame_compile_id``:
    the compiles of their frame beyond its first. Every rank with compiles is a key."""
    if compiles is None or compiles.is_empty():
        return {}
    out = {int(r): 0 for r in compiles["rank"].unique().drop_nulls().to_list()}
    seq = pl.col("sequence") if "sequence" in compiles.columns else pl.lit(0)
    numbered = compiles.filter(pl.col("frame_compile_id").is_not_null())
    re = (numbered.filter(pl.col("frame_compile_id") > 0).select("rank", "frame_id", "frame_compile_id", seq.alias("_seq"))
          .unique().group_by("rank").len())
    for r, n in re.iter_rows():
        out[int(r)] += int(n)
    bare = compiles.filter(pl.col("frame_compile_id").is_null())
    if bare.height:
        for r, n in bare.group_by("rank", "frame_id").agg(n=pl.len()).group_by("rank").agg(
                (pl.col("n") - 1).sum()).iter_rows():
            out[int(r)] += int(n)
    return out


def compile_time_ns(compiles: pl.DataFrame | None) -> dict[int, int | None]:
    """Per rank: the summed known duration of its compiles (ns; None when no duration is known)."""
    if compiles is None or compiles.is_empty():
        return {}
    g = compiles.group_by("rank").agg(
        ns=pl.when(pl.col("duration_ns").is_not_null().any()).then(pl.col("duration_ns").sum()))
    return {int(r): (None if v is None else int(v)) for r, v in g.iter_rows()}


# ---------------------------------------------------------------------------------------------- device time
def idle(window: Spans, busy: Spans) -> Spans:
    """Idle: the window's time with no kernel, memcpy or memset running (both merged)."""
    return subtract(window, busy)


def exposed_comm(comm: Spans, compute: Spans) -> Spans:
    """Exposed communication: communication time with no compute under it."""
    return subtract(comm, compute)


def exposed_memory(memory: Spans, compute: Spans, comm: Spans) -> Spans:
    """Exposed memory traffic: copy/set time with neither compute nor communication under it."""
    return subtract(subtract(memory, compute), comm)


#: The same three as columns of a breakdown row (``window_ns``, ``busy_ns``, ``comm_ns``, ``comm_overlapped_ns``
#: and ``busy_ns`` less the time of compute or communication, ``_cc_ns``).
IDLE_NS = (pl.col("window_ns") - pl.col("busy_ns")).alias("idle_ns")
COMM_EXPOSED_NS = (pl.col("comm_ns") - pl.col("comm_overlapped_ns")).alias("comm_exposed_ns")
MEMORY_EXPOSED_NS = (pl.col("busy_ns") - pl.col("_cc_ns")).alias("memory_exposed_ns")


# ---------------------------------------------------------------------------------------------- pipelines
def microbatches_per_step(bubbles: pl.DataFrame | None) -> dict[int, float]:
    """Per stage (rank) of ``bubbles`` (``bubbles.pipeline_bubbles`` rows): its median forward micro-batches per
    step."""
    if bubbles is None or bubbles.is_empty() or "forwards" not in bubbles.columns:
        return {}
    g = bubbles.group_by("rank").agg(pl.col("forwards").median())
    return {int(r): float(v) for r, v in g.iter_rows() if v is not None}


def is_pipeline(bubbles: pl.DataFrame | None) -> bool:
    """Whether the run is a pipeline: some stage runs at least 2 forward micro-batches per step."""
    return any(m >= 2 for m in microbatches_per_step(bubbles).values())


# ---------------------------------------------------------------------------------------------- noise
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
