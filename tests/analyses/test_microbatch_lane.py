"""Where the Timeline's micro-batch lane and the pipeline schedule draw a micro-batch: where its work ran. On a
GPU a host range (``forward_mb3``) ends long before its kernels do (the host runs ahead), so a lane of host
ranges would paint the next micro-batch's box over this one's kernels."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.bubbles import microbatches_on_device
from workbench.timeline import run_microbatches

TRACES = Path(__file__).resolve().parents[2] / "sample_traces"


def phase_at(ranges: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Each kernel with the (phase, mb) of the drawn range its midpoint lies in (null: in none)."""
    mid = kernels.with_columns(t=(pl.col("start") + pl.col("end")) // 2).sort("t")
    r = ranges.sort("start").select("rank", pl.col("start").alias("t"), pl.col("end").alias("r_end"),
                                    pl.col("phase").alias("drawn_phase"), pl.col("mb").alias("drawn_mb"))
    return mid.join_asof(r, on="t", by="rank", strategy="backward", check_sortedness=False).with_columns(
        drawn_phase=pl.when(pl.col("t") <= pl.col("r_end")).then("drawn_phase"),
        drawn_mb=pl.when(pl.col("t") <= pl.col("r_end")).then("drawn_mb"))


def launched_by(ranges: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """Each kernel with the (phase, mb) of the host range its launch lies in."""
    k = kernels.sort("launch_start")
    r = ranges.sort("host_start").select("rank", pl.col("host_start").alias("launch_start"), "host_end", "phase", "mb")
    return k.join_asof(r, on="launch_start", by="rank", strategy="backward", check_sortedness=False).filter(
        pl.col("launch_start") <= pl.col("host_end"))


def test_a_gpu_micro_batch_is_drawn_over_the_kernels_it_launched():
    run = workbench.open(TRACES / "h200x2-pipeline")
    mb = run_microbatches(run)
    assert mb.height and set(mb["timeline"]) == {"gpu"}
    compute = run.kernels.filter(pl.col("kernel_class").cast(pl.String) == "compute").select(
        "rank", "start", "end", "launch_start")
    owned = launched_by(mb, compute)
    assert owned.height > 100
    at = phase_at(mb, owned.drop("phase", "mb").with_columns(own_phase=owned["phase"], own_mb=owned["mb"]))
    # every kernel a micro-batch launched is drawn inside that micro-batch's box
    wrong = at.filter((pl.col("drawn_phase") != pl.col("own_phase")) | (pl.col("drawn_mb") != pl.col("own_mb"))
                      | pl.col("drawn_mb").is_null())
    assert wrong.is_empty(), wrong.head()
    # the host ranges, drawn as they were, put many of them under another micro-batch's box (why this matters)
    host = mb.with_columns(start=pl.col("host_start"), end=pl.col("host_end"))
    at_host = phase_at(host, owned.drop("phase", "mb").with_columns(own_phase=owned["phase"], own_mb=owned["mb"]))
    misdrawn = at_host.filter((pl.col("drawn_phase") != pl.col("own_phase")) | (pl.col("drawn_mb") != pl.col("own_mb"))
                              | pl.col("drawn_mb").is_null())
    assert misdrawn.height > owned.height // 4


def test_a_cpu_micro_batch_keeps_its_host_range():
    run = workbench.open(TRACES / "cpu-gloo-pipeline")
    mb = run_microbatches(run)
    assert mb.height and set(mb["timeline"]) == {"cpu"}
    assert mb["start"].to_list() == mb["host_start"].to_list() and mb["end"].to_list() == mb["host_end"].to_list()


def test_a_range_that_launched_no_compute_spans_its_other_device_work():
    mb = pl.DataFrame({"rank": [0, 0, 0], "start": [0, 100, 200], "end": [90, 190, 290], "phase": ["forward"] * 3,
                       "mb": [0, 1, 2], "step": [1] * 3, "name": ["forward_mb0", "forward_mb1", "forward_mb2"]},
                      schema_overrides={"rank": pl.Int32, "mb": pl.Int32, "step": pl.Int32})
    kernels = pl.DataFrame({
        "rank": [0, 0, 0, 0], "launch_start": [10, 20, 120, 300],
        "start": [50, 300, 400, 500], "end": [60, 350, 410, 510],
        "kernel_class": ["memcpy", "compute", "memcpy", "compute"]}, schema_overrides={"rank": pl.Int32})
    out = microbatches_on_device(mb, kernels).sort("mb")
    assert out.select("start", "end", "timeline").rows() == [(300, 350, "gpu"), (400, 410, "gpu"), (200, 290, "cpu")]


@pytest.mark.parametrize("kernels", [None, pl.DataFrame(schema={"rank": pl.Int32, "launch_start": pl.Int64,
                                                                 "start": pl.Int64, "end": pl.Int64,
                                                                 "kernel_class": pl.String})])
def test_no_device_activity_keeps_host_ranges(kernels):
    mb = pl.DataFrame({"rank": [1], "start": [5], "end": [9], "phase": ["backward"], "mb": [0], "step": [0],
                       "name": ["backward_mb0"]}, schema_overrides={"rank": pl.Int32, "mb": pl.Int32, "step": pl.Int32})
    assert microbatches_on_device(mb, kernels).select("start", "end", "timeline").rows() == [(5, 9, "cpu")]
