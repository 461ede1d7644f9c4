"""Known answers on synthetic KERNELS tables."""

import polars as pl
import pytest
from conftest import kernels_frame, steps_frame

from workbench.analyses.breakdown import (
    breakdown_by_rank, idle_breakdown_long, idle_causes, idle_gaps, time_breakdown,
)
from workbench.analyses.overlap import comm_compute_overlap
from workbench.analyses.window import window_kernels, window_steps


def _row(frame, **keys):
    f = frame
    for k, v in keys.items():
        f = f.filter(pl.col(k) == v)
    assert f.height == 1, f
    return f.row(0, named=True)


@pytest.fixture
def mixed():
    return kernels_frame([
        {"start": 0, "end": 100}, {"start": 50, "end": 80},               # nested compute
        {"start": 150, "end": 250, "kernel_class": "communication", "stream": 20},
        {"start": 200, "end": 300},                                          # overlaps the comm kernel by 50
        {"start": 400, "end": 400},                                          # zero-length
        {"start": 500, "end": 600, "kernel_class": "memcpy", "step": 2, "launch_start": 450},
        {"start": 700, "end": 800, "step": 2, "launch_start": 650},
        {"start": 900, "end": 950, "step": 3},                               # last profiler step: left out
    ])


def test_per_step_and_per_rank_breakdown(mixed, two_steps):
    bd = time_breakdown(mixed, two_steps)
    s1 = _row(bd, step=1)
    # step 1's segment runs from its first kernel to step 2's first kernel
    assert (s1["start"], s1["end"], s1["window_ns"]) == (0, 500, 500)
    assert s1["busy_ns"] == 250 and s1["compute_ns"] == 200 and s1["comm_ns"] == 100
    assert s1["comm_overlapped_ns"] == 50 and s1["comm_exposed_ns"] == 50 and s1["idle_ns"] == 250
    assert s1["comm_overlap_pct"] == pytest.approx(50.0)
    assert s1["comm_overlap_of_max_pct"] == pytest.approx(25.0)
    s2 = _row(bd, step=2)
    assert (s2["window_ns"], s2["memcpy_ns"], s2["memory_exposed_ns"], s2["idle_ns"]) == (300, 100, 100, 100)
    assert s2["comm_overlap_pct"] is None  # no communication in the step
    r = _row(breakdown_by_rank(bd), rank=0)
    assert r["window_ns"] == 800 and r["idle_ns"] == 350
    assert r["compute_ns"] + r["comm_exposed_ns"] + r["memory_exposed_ns"] + r["idle_ns"] == r["window_ns"]
    assert r["non_compute_ns"] == r["busy_ns"] - r["compute_ns"] == 150
    assert r["compute_pct"] == pytest.approx(37.5) and r["idle_pct"] == pytest.approx(43.75)


def test_window_all_keeps_the_last_step(mixed, two_steps):
    assert window_kernels(mixed, two_steps, "all").height == mixed.height
    assert window_kernels(mixed, two_steps, "steady").height == mixed.height - 1
    r = _row(breakdown_by_rank(time_breakdown(mixed, two_steps, "all")), rank=0)
    assert r["window_ns"] == 950 and r["steps"] == 3
    ws = window_steps(two_steps)
    assert ws.filter("in_window")["step"].to_list() == [1, 2]


def test_one_step_falls_back_to_everything(mixed):
    one = steps_frame([{"step": 1, "start": 0, "end": 1000}])
    assert window_kernels(mixed, one).height == mixed.height


def test_communication_on_the_compute_stream_is_communication(two_steps):
    # a blocking all_reduce on stream 7: classified by kernel_class, never by stream
    k = kernels_frame([
        {"start": 0, "end": 100},
        {"start": 100, "end": 300, "kernel_class": "communication"},
        {"start": 300, "end": 400},
        {"start": 1000, "end": 1001, "step": 2},
    ])
    s1 = _row(time_breakdown(k, two_steps), step=1)
    assert s1["comm_ns"] == 200 and s1["comm_exposed_ns"] == 200 and s1["compute_ns"] == 200


def test_overlapping_communication_kernels_count_once(two_steps):
    k = kernels_frame([
        {"start": 0, "end": 200, "kernel_class": "communication", "stream": 20},
        {"start": 100, "end": 300, "kernel_class": "communication", "stream": 21},
        {"start": 250, "end": 400},
        {"start": 1000, "end": 1001, "step": 2},
    ])
    s1 = _row(time_breakdown(k, two_steps), step=1)
    assert s1["comm_ns"] == 300 and s1["comm_overlapped_ns"] == 50
    ov = _row(comm_compute_overlap(time_breakdown(k, two_steps)), step=1)
    assert ov["overlap_pct"] == pytest.approx(100 * 50 / 300)
    assert ov["overlap_of_max_pct"] == pytest.approx(100 * 50 / 300)


def test_gaps_at_window_edges_are_not_idle():
    # kernels of steps 1 and 2 only; step 0 and 3 exist as CPU ranges: the window starts at the first kernel
    steps = steps_frame([{"step": s, "start": 1000 * s, "end": 1000 * s + 1000} for s in range(4)])
    k = kernels_frame([
        {"start": 1500, "end": 1600, "step": 1},
        {"start": 2500, "end": 2600, "step": 2},
        {"start": 3100, "end": 3200, "step": 3},
    ])
    bd = time_breakdown(k, steps)
    assert bd["step"].to_list() == [1, 2]
    r = _row(breakdown_by_rank(bd), rank=0)
    assert (r["start"], r["end"], r["window_ns"], r["idle_ns"]) == (1500, 2600, 1100, 900)


def test_idle_causes_follow_hta(two_steps):
    k = kernels_frame([
        {"start": 0, "end": 100, "launch_start": 0},
        {"start": 110, "end": 200, "launch_start": 50},         # gap 10 < threshold, launched early: kernel wait
        {"start": 100_000, "end": 100_100, "launch_start": 60},   # long gap, launched early: other
        {"start": 200_000, "end": 200_100, "launch_start": 150_000},  # launched after the previous end: host wait
        {"start": 200_100, "end": 200_200, "launch_start": 150_001},  # back to back: no gap
        {"start": 999_999, "end": 1_000_000, "step": 2, "launch_start": 0, "stream": 99},
    ])
    g = idle_gaps(k, two_steps)
    assert g.filter(pl.col("stream") == 7)["category"].to_list() == ["kernel_wait", "other", "host_wait"]
    c = _row(idle_causes(g), stream=7)
    assert (c["kernel_wait_ns"], c["other_ns"], c["host_wait_ns"]) == (10, 100_000 - 200, 200_000 - 100_100)
    assert _row(g, category="host_wait")["launch_late_ns"] == 150_000 - 100_100
    long = idle_breakdown_long(g)
    assert long.filter(pl.col("stream") == 7)["idle_category"].to_list() == ["host_wait", "kernel_wait", "other"]
    assert long.filter(pl.col("stream") == 7)["idle_ratio"].sum() == pytest.approx(1.0)


def test_host_part_of_a_late_launch_that_then_waits_on_another_stream(two_steps):
    """A kernel launched after the stream went idle but started long after its launch (it waited for a collective
    on another stream) is host wait by HTA's rule; only the launch delay and the usual latency are the host's."""
    k = kernels_frame([
        {"start": 0, "end": 100, "launch_start": 0, "launch_end": 5},
        {"start": 1_120, "end": 1_200, "launch_start": 1_000, "launch_end": 1_105},   # late launch, 15 ns latency
        {"start": 2_320, "end": 2_400, "launch_start": 2_200, "launch_end": 2_305},   # the same
        # launched 300 ns after the stream went idle, then waited 1 ms on another stream's all-reduce
        {"start": 1_002_400, "end": 1_002_500, "launch_start": 2_700, "launch_end": 2_705},
    ])
    g = idle_gaps(k, two_steps).filter(pl.col("stream") == 7).sort("start")
    assert g["category"].to_list() == ["host_wait"] * 3
    assert g["host_ns"].to_list() == [1_105 - 100 + 15, 2_305 - 1_200 + 15, 2_705 - 2_400 + 15]
    assert g["gap_ns"][-1] == 1_000_000                       # HTA's whole gap stays in gap_ns and host_wait_ns
    c = _row(idle_causes(g), stream=7)
    assert c["host_wait_ns"] == sum(g["gap_ns"]) and c["host_ns"] == sum(g["host_ns"])
    assert c["host_pct"] == pytest.approx(100.0 * c["host_ns"] / c["idle_ns"])


def test_empty_kernels(two_steps):
    k = kernels_frame([{"start": 0, "end": 1}]).clear()
    assert time_breakdown(k, two_steps).is_empty()
    assert breakdown_by_rank(time_breakdown(k, two_steps)).is_empty()
    assert idle_gaps(k, two_steps).is_empty()
