"""The server-side timeline reduction on a synthetic 1M-kernel frame (no browser)."""

from __future__ import annotations

import json
import time

import polars as pl
import pytest

from app_synthetic import synthetic_kernels, synthetic_steps
from workbench import figures


@pytest.fixture(scope="module")
def big() -> pl.DataFrame:
    return synthetic_kernels(1_000_000)


def test_full_window_is_merged_and_small(big):
    view = figures.timeline_view(big)
    assert not view.exact
    assert view.visible_kernels == big.height
    lanes = big.select("rank", "stream").unique().height
    assert view.spans.height <= lanes * (figures.DEFAULT_WIDTH_PX + 1)
    # merged spans keep the busy time exactly
    assert view.spans["busy_ns"].sum() == big["dur"].sum()
    fig = figures.timeline_figure(view, origin=int(big["start"].min()), steps=synthetic_steps(big))
    size = len(fig.to_json())
    assert size < 1_500_000, size


def test_zoom_to_few_kernels_is_exact(big):
    lo = int(big["start"].min())
    view = figures.timeline_view(big, start=lo, end=lo + 200_000)
    assert view.exact
    expect = big.filter((pl.col("end") >= lo) & (pl.col("start") <= lo + 200_000)).height
    assert view.visible_kernels == expect
    assert view.spans.height == expect
    assert set(view.spans["name"].unique()) <= set(big["name"].cast(pl.String).unique())


def test_reduction_is_fast(big):
    lo, hi = figures.time_bounds(big)
    figures.timeline_view(big)  # warm
    t = time.perf_counter()
    for k in range(5):
        a = lo + (hi - lo) * k // 10
        view = figures.timeline_view(big, start=a, end=a + (hi - lo) // 3)
        figures.timeline_figure(view, origin=lo).to_json()
    per = (time.perf_counter() - t) / 5
    assert per < 0.8, f"{per:.3f}s per zoom"


def test_dominant_class_and_counts():
    k = synthetic_kernels(20_000, ranks=1, streams=1)
    spans = figures.reduce_timeline(k, exact_limit=10, width_px=50)
    assert spans["count"].sum() == 20_000
    assert set(spans["kernel_class"].unique()) <= {"compute", "communication"}
    assert (spans["end"] >= spans["start"]).all()


def test_figure_meta_and_lanes():
    k = synthetic_kernels(1000, ranks=2, streams=2)
    view = figures.timeline_view(k)
    fig = figures.timeline_figure(view, origin=int(k["start"].min()), uirevision="x")
    meta = json.loads(fig.to_json())["layout"]["meta"]
    assert meta == {"exact": True, "visible_kernels": 1000, "spans": 1000}
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
