"""Diff of two runs: did the change work?

Compares two :func:`workbench.analyses.summary.analyze` summaries metric by metric, per rank and for the job
(the mean over ranks; step times, collective wait and recompiles take the worst rank, which sets the pace).
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: metric → True when lower is better.
METRICS: dict[str, bool] = {
    "step_time_ns": True,
    "max_step_time_ns": True,
    "recompiles": True,
    "compile_time_ns": True,
    "compute_pct": False,
    "idle_pct": True,
    "comm_compute_overlap_pct": False,
    "exposed_comm_pct": True,
    "exposed_memory_pct": True,
    "collective_wait_ns": True,
    "window_ns": True,
    "compute_ns": True,
    "comm_ns": True,
    "comm_exposed_ns": True,
    "idle_ns": True,
}

_WORST_RANK = {"step_time_ns", "max_step_time_ns", "collective_wait_ns", "window_ns", "recompiles", "compile_time_ns"}


def _rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for rank, entry in summary.get("ranks", {}).items():
        for metric in METRICS:
            rows.append({"scope": f"rank {rank}", "metric": metric, "value": entry.get(metric)})
        for cls, ns in (entry.get("kernel_time_ns") or {}).items():
            rows.append({"scope": f"rank {rank}", "metric": f"kernel_time_ns.{cls}", "value": ns})
    frame = pl.DataFrame(rows, schema={"scope": pl.String, "metric": pl.String, "value": pl.Float64})
    if frame.is_empty():
        return rows
    job = frame.group_by("metric").agg(
        value=pl.when(pl.col("metric").first().is_in(list(_WORST_RANK))).then(pl.col("value").max())
        .otherwise(pl.col("value").mean())
    ).with_columns(scope=pl.lit("job"))
    return job.select("scope", "metric", "value").to_dicts() + rows


def diff_summaries(before: dict[str, Any], after: dict[str, Any], same_pct: float = 1.0) -> pl.DataFrame:
    """Metric by metric comparison of two summaries.

    Columns: ``scope`` (``"job"`` or ``"rank <r>"``), ``metric``, ``before``, ``after``, ``delta`` (after - before),
    ``delta_pct`` (relative to before; for ``*_pct`` metrics the change in percentage points), ``direction``
    (``"better"``, ``"worse"``, ``"same"`` when the change is below ``same_pct`` % (points), ``"n/a"`` when a side
    is missing). Rows with a change come first, the biggest relative change first.
    """
    schema = {"scope": pl.String, "metric": pl.String, "value": pl.Float64}
    b = pl.DataFrame(_rows(before), schema=schema).rename({"value": "before"})
    a = pl.DataFrame(_rows(after), schema=schema).rename({"value": "after"})
    d = b.join(a, on=["scope", "metric"], how="full", coalesce=True)
    lower = pl.col("metric").str.split(".").list.first().replace_strict(
        {k: v for k, v in METRICS.items()} | {"kernel_time_ns": True}, default=True, return_dtype=pl.Boolean)
    is_pct = pl.col("metric").str.ends_with("_pct")
    change = pl.when(is_pct).then(pl.col("delta")).otherwise(
        pl.when(pl.col("before").abs() > 0).then(100.0 * pl.col("delta") / pl.col("before").abs()))
    out = d.with_columns(delta=pl.col("after") - pl.col("before")).with_columns(delta_pct=change).with_columns(
        direction=pl.when(pl.col("before").is_null() | pl.col("after").is_null()).then(pl.lit("n/a"))
        .when(pl.col("delta_pct").fill_null(0).abs() < same_pct).then(pl.lit("same"))
        .when((pl.col("delta") < 0) == lower).then(pl.lit("better"))
        .otherwise(pl.lit("worse"))
    )
    return out.with_columns(_o=pl.col("direction").is_in(["better", "worse"]).not_(),
                            _m=pl.col("delta_pct").abs().fill_null(0)).sort(
        ["_o", "scope", "_m"], descending=[False, False, True]).drop("_o", "_m").select(
        "scope", "metric", "before", "after", "delta", "delta_pct", "direction")


def diff_findings(before: dict[str, Any], after: dict[str, Any]) -> pl.DataFrame:
    """Findings by kind in both runs. Columns: ``kind``, ``before_cost_ns``, ``after_cost_ns``, ``status``
    (``"fixed"``, ``"new"``, ``"better"``, ``"worse"``, ``"same"``)."""
    def costs(s: dict[str, Any]) -> pl.DataFrame:
        rows = [{"kind": f["kind"], "cost": f.get("cost_ns") or 0} for f in s.get("findings", [])]
        f = pl.DataFrame(rows, schema={"kind": pl.String, "cost": pl.Int64})
        return f.group_by("kind").agg(pl.col("cost").sum())
    d = costs(before).rename({"cost": "before_cost_ns"}).join(
        costs(after).rename({"cost": "after_cost_ns"}), on="kind", how="full", coalesce=True)
    b, a = pl.col("before_cost_ns"), pl.col("after_cost_ns")
    return d.with_columns(
        status=pl.when(a.is_null()).then(pl.lit("fixed")).when(b.is_null()).then(pl.lit("new"))
        .when(a < 0.95 * b).then(pl.lit("better")).when(a > 1.05 * b).then(pl.lit("worse")).otherwise(pl.lit("same"))
    ).sort("kind")
