"""What keeps analyze and the report bounded on thousands of ranks (issue 15): the idle gaps cut to each rank's
longest once a run has many, the per-cause totals still counting every gap, the root-cause intervals packed, and
the report / drill-down reading only the ranks they show."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import workbench
from workbench.analyses import per_rank
from workbench.analyses.breakdown import KERNEL_WAIT_NS, idle_causes, idle_gaps
from workbench.analyses.per_rank import SpanStore, event_tables

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "h200x2-ddp-nccl"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent")
    dst = tmp_path_factory.mktemp("bounded") / SAMPLE.name
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns(".workbench"))
    workbench.open(dst)  # builds the cache
    return dst


def test_cut_idle_gaps_keep_each_ranks_longest_and_totals_stay_whole(run_dir: Path, monkeypatch) -> None:
    run = workbench.open(run_dir)
    every = pl.concat([idle_gaps(t["kernels"], run.steps) for _, t in run.per_rank("kernels")])
    assert every.height > 200
    monkeypatch.setattr(per_rank, "IDLE_GAPS_KEPT", 100)     # as if this were a run of thousands of ranks
    monkeypatch.setattr(per_rank, "IDLE_GAPS_MIN_PER_RANK", 10)
    one_by_one = event_tables(run, run.steps, "steady", KERNEL_WAIT_NS, max_events=1)
    gaps = one_by_one["idle_gaps"]
    per = gaps.group_by("rank").len()
    assert per["len"].to_list() == [50, 50]                  # 100 // 2 ranks each
    for rank, mine in gaps.group_by("rank"):                 # ... and they are that rank's longest
        theirs = every.filter(pl.col("rank") == rank[0])["gap_ns"].sort(descending=True).head(50)
        assert mine["gap_ns"].sort(descending=True).to_list() == theirs.to_list()
    assert gaps["end"].is_sorted()
    # the per-cause totals count every gap, not only the kept ones
    assert_frame_equal(one_by_one["idle_by_stream"], idle_causes(every, ("rank", "stream")))
    assert one_by_one["idle_by_stream"]["gaps"].sum() == every.height
    assert not run.loaded("events") and not run.loaded("kernels")
    # the same cut whether the run is read in batches or whole
    whole = event_tables(types.SimpleNamespace(kernels=run.kernels, events=run.events, ranks=run.ranks), run.steps,
                         "steady", KERNEL_WAIT_NS)
    assert_frame_equal(whole["idle_gaps"], gaps)


def test_device_intervals_are_packed_and_read_back_as_lists(run_dir: Path) -> None:
    run = workbench.open(run_dir)
    device = event_tables(run, run.steps, "steady", KERNEL_WAIT_NS)["device_time"]
    assert isinstance(device.idle, SpanStore) and sorted(device.idle) == [0, 1]
    spans = device.idle[0]
    assert spans and all(isinstance(s, tuple) and s[0] < s[1] for s in spans)
    assert device.idle.nbytes() == 16 * sum(len(device.idle[r]) for r in device.idle)
    assert SpanStore({3: [(1, 2), (5, 9)]}) == {3: [(1, 2), (5, 9)]}


def test_report_and_drill_down_read_only_what_they_show(run_dir: Path) -> None:
    from workbench.report import build_report

    run = workbench.open(run_dir)
    rep = build_report(run)
    assert not rep.problems, rep.problems
    assert any(title.startswith("Timeline") for title, _ in rep.sections)
    assert not run.loaded("events") and not run.loaded("kernels")   # the timeline read rank 0 and 1's files only
    one = run.subset([1])
    assert one.ranks["rank"].to_list() == [1] and set(one.steps["rank"].to_list()) == {1}
    eager = workbench.open(run_dir, cache=False)
    assert_frame_equal(one.kernels, eager.kernels.filter(pl.col("rank") == 1))
    assert_frame_equal(run.scan("events", ranks=[0]).collect(), eager.events.filter(pl.col("rank") == 0))
    assert run.ranks_with("kernels") == [0, 1] and not run.loaded("kernels")
