"""The server-side timeline reduction on a synthetic 1M-kernel frame (no browser)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from app_synthetic import synthetic_kernels, synthetic_steps
from workbench import figures
from workbench import timeline as tl
from workbench.analyses import metrics


@pytest.fixture(scope="module")
def big() -> pl.DataFrame:
    return synthetic_kernels(1_000_000)


def test_full_window_is_merged_and_small(big):
    view = tl.timeline_view(big)
    assert not view.exact
    assert view.visible_kernels == big.height
    lanes = big.select("rank", "stream").unique().height
    assert view.spans.height <= lanes * (tl.DEFAULT_WIDTH_PX + 1)
    # merged spans keep the busy time exactly
    assert view.spans["busy_ns"].sum() == big["dur"].sum()
    fig = figures.timeline_figure(view, origin=int(big["start"].min()), steps=synthetic_steps(big))
    size = len(fig.to_json())
    assert size < 1_500_000, size


def test_zoom_to_few_kernels_is_exact(big):
    lo = int(big["start"].min())
    view = tl.timeline_view(big, start=lo, end=lo + 200_000)
    assert view.exact
    expect = big.filter((pl.col("end") >= lo) & (pl.col("start") <= lo + 200_000)).height
    assert view.visible_kernels == expect
    assert view.spans.height == expect
    assert set(view.spans["name"].unique()) <= set(big["name"].cast(pl.String).unique())


def test_merged_span_takes_the_class_that_takes_its_time():
    """Thousands of tiny memsets next to one long GEMM in the same pixels: the lane is drawn as compute (the
    merged span shows the class that takes most of its busy time), and every kernel is still counted once."""
    from workbench.schema import KERNELS, conform

    lo = 1_000_000_000
    n = 2_480
    memsets = pl.DataFrame({"start": [lo + i * 250_000 for i in range(n)], "dur": [1_000] * n,
                            "kernel_class": ["memset"] * n, "name": ["memset"] * n})
    gemm = pl.DataFrame({"start": [lo + i * 5_000_000 for i in range(120)], "dur": [4_900_000] * 120,
                         "kernel_class": ["compute"] * 120, "name": ["sm90_gemm"] * 120})
    k = pl.concat([memsets, gemm]).with_columns(rank=pl.lit(0), stream=pl.lit(7), end=pl.col("start") + pl.col("dur"))
    k = conform(k, KERNELS)
    spans = tl.reduce_timeline(k, exact_limit=100, width_px=100)
    assert spans["count"].sum() == k.height
    assert spans["busy_ns"].sum() == k["dur"].sum()
    busy = spans.group_by("kernel_class").agg(pl.col("end").sub(pl.col("start")).sum())
    drawn = dict(zip(busy["kernel_class"].to_list(), busy["end"].to_list()))
    assert drawn.get("compute", 0) > 0.9 * sum(drawn.values()), drawn
    # spans of one lane never overlap
    s = spans.sort("start")
    assert (s["start"].shift(-1).drop_nulls() >= s["end"].head(s.height - 1)).all()


def test_dominant_class_and_counts():
    k = synthetic_kernels(20_000, ranks=1, streams=1)
    spans = tl.reduce_timeline(k, exact_limit=10, width_px=50)
    assert spans["count"].sum() == 20_000
    assert set(spans["kernel_class"].unique()) <= {"compute", "communication"}
    assert (spans["end"] >= spans["start"]).all()


def test_figure_meta_and_lanes():
    k = synthetic_kernels(1000, ranks=2, streams=2)
    view = tl.timeline_view(k)
    fig = figures.timeline_figure(view, origin=int(k["start"].min()), uirevision="x")
    meta = json.loads(fig.to_json())["layout"]["meta"]
    assert {k: meta[k] for k in ("exact", "visible_kernels", "spans")} == {"exact": True, "visible_kernels": 1000,
                                                                           "spans": 1000}
    lanes = set(fig.layout.yaxis.ticktext)
    assert lanes == {f"rank {r} · stream {s}" for r in (0, 1) for s in (7, 8)}


def test_run_timeline_for_notebooks():
    from app_synthetic import synthetic_run

    run = synthetic_run(20_000, ranks=2)
    fig = figures.run_timeline(run)
    assert fig.layout.meta["visible_kernels"] == 20_000
    lo = int(run.kernels["start"].min())
    fig = figures.run_timeline(run, start=lo, end=lo + 100_000, ranks=[1])
    assert fig.layout.meta["exact"] is True
    assert all(t.startswith("rank 1") for t in fig.layout.yaxis.ticktext)


def test_lanes_are_stable_and_spans_clipped_to_the_window():
    k = synthetic_kernels(2000, ranks=2, streams=2)
    steps = synthetic_steps(k, steps=10)
    index = tl.TimelineIndex(k)
    lanes = tl.timeline_lanes(index, steps=steps)
    lo, hi = tl.time_bounds(k)
    origin = lo
    # a window holding rank 0's kernels only still shows every lane
    a = lo + (hi - lo) // 2
    view = tl.timeline_view(index, start=a, end=a + 30_000, ranks=[0])
    fig = figures.timeline_figure(view, origin=origin, steps=steps, lanes=lanes)
    assert list(fig.layout.yaxis.ticktext) == lanes
    xs = [x for tr in fig.data if tr.mode == "lines" for x in tr.x if x == x]
    assert min(xs) >= (a - origin) / 1e6 - 1e-9 and max(xs) <= (a + 30_000 - origin) / 1e6 + 1e-9
    numbers = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    assert numbers and all(t.isdigit() for t in numbers)


def test_step_periods_include_the_data_wait():
    from workbench.schema import STEPS, conform

    st = conform(pl.DataFrame({"rank": [0, 0, 0], "step": [0, 1, 2], "source": ["collector"] * 3,
                               "start": [0, 100, 300], "end": [80, 150, 340], "dur": [80, 50, 40],
                               "data_wait_ns": [None, 20, 150]}), STEPS)
    per = metrics.step_periods(st)
    assert per["period_ns"].to_list() == [100, 200]  # the last step has no next start
    assert per["data_wait_ns"].to_list() == [20, 150]


def test_log_ticks_read_as_durations():
    vals, text = figures._nice_log_ticks(4.5, 2600.0)
    assert text[0] == "5 ms" and "1 s" in text and "2 s" in text
    assert all(t.endswith((" ms", " s")) for t in text)
