"""Clock alignment: when ranks span hosts the offsets the analyses estimate are applied, said in the metadata, and
the raw times stay recoverable (exported + offset = raw, exactly). The input is a real 2-GPU run whose rank 1 is
moved to another host with a clock 5 ms ahead: every time of rank 1 shifted in its tables."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.collectives import clock_offsets
from workbench.export import export_run
from workbench.export.readback import check, read

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"

SHIFT = 5_000_000


def _shifted() -> workbench.Run:
    run = workbench.open(SAMPLES / "h200x2-planted")
    one = pl.col("rank") == 1

    def move(frame: pl.DataFrame, *cols: str) -> pl.DataFrame:
        return frame.with_columns([pl.when(one).then(pl.col(c) + SHIFT).otherwise(pl.col(c)).alias(c) for c in cols])

    run.events = move(run.events, "start", "end")
    run.kernels = move(run.kernels, "start", "end", "launch_start", "launch_end")
    run.collectives = move(run.collectives, "start", "end", "kernel_start", "kernel_end")
    run.steps = move(run.steps, "start", "end")
    run.compiles = move(run.compiles, "start", "end")
    run.ranks = run.ranks.with_columns(host=pl.when(one).then(pl.lit("host-b")).otherwise(pl.lit("host-a")))
    return run


@pytest.fixture(scope="module")
def shifted():
    return _shifted()


@pytest.mark.parametrize("out", ["a.pftrace", "a.json"])
def test_offsets_applied_and_raw_times_recoverable(tmp_path, shifted, out):
    before = clock_offsets(workbench.open(SAMPLES / "h200x2-planted").collectives)
    true_off = dict(before.select("rank", "offset_ns").iter_rows())
    summary = export_run(shifted, tmp_path / out)
    rb = read(tmp_path / out)
    problems, counts = check(shifted, rb)
    assert problems == [], "\n".join(problems)
    clock = rb.metadata["clock"]
    assert clock["aligned"] is True and "span hosts" in clock["reason"]
    applied = {int(k): v["applied_ns"] for k, v in clock["offsets"].items()}
    assert applied == {0: 0, 1: true_off[1] + SHIFT}
    assert any(f"clock offset {applied[1]} ns" in lab for lab in rb.processes[2]["labels"])
    # raw = exported + offset, for every Kineto event of rank 1
    raw = sorted(shifted.events.filter(pl.col("rank") == 1)["start"].to_list())
    got = rb.slices.filter((pl.col("pid") == 2) & ~pl.col("cat").str.starts_with("workbench."))
    assert sorted(x + applied[1] for x in got["start"].to_list()) == raw
    # on the exported clock both ranks finish each collective together again (5 ms apart as recorded)
    colls = rb.slices.filter(pl.col("cat") == "workbench.collective").sort("start")
    ends = {p: colls.filter(pl.col("pid") == p)["end"].to_list() for p in (1, 2)}
    gaps = sorted(abs(a - b) for a, b in zip(ends[1], ends[2]))
    assert gaps[len(gaps) // 2] < 100_000 < SHIFT
    assert summary["flows"] == counts["flows"] > 0


def test_one_host_is_not_moved(tmp_path):
    run = workbench.open(SAMPLES / "h200x2-planted")
    export_run(run, tmp_path / "b.pftrace")
    rb = read(tmp_path / "b.pftrace")
    assert rb.metadata["clock"]["aligned"] is False
    assert all(v["applied_ns"] == 0 for v in rb.metadata["clock"]["offsets"].values())
    assert check(run, rb)[0] == []
