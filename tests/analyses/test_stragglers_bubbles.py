import polars as pl
import pytest
from conftest import collectives_frame, events_frame, steps_frame

from workbench.analyses.bubbles import bubble_findings, pipeline_bubbles
from workbench.analyses.collectives import match_collectives
from workbench.analyses.stragglers import step_times, straggler_findings, straggler_ranks

MS = 1_000_000


def _collector_steps(slow_rank=2, n_steps=20, extra=lambda s: 30 * MS, ranks=4):
    """Synchronous steps: every rank ends a step together; ``slow_rank`` loads data slowly, so it starts late."""
    rows, t = [], 0
    for s in range(n_steps):
        end = t + 100 * MS + extra(s)
        for r in range(ranks):
            late = extra(s) if r == slow_rank else r * MS // 10
            rows.append({"rank": r, "step": s, "source": "collector", "start": t + late, "end": end,
                         "data_wait_ns": late + 5 * MS})
        t = end
    return steps_frame(rows)


def test_step_times_lateness_and_held_back():
    st = step_times(_collector_steps())
    row = st.filter((pl.col("rank") == 2) & (pl.col("step") == 0)).row(0, named=True)
    assert row["is_latest"] and row["held_back_ns"] == 30 * MS - 3 * MS // 10
    assert st.filter(pl.col("rank") != 2)["held_back_ns"].sum() == 0


def test_the_slow_data_loader_is_named_with_its_cost():
    ranks = straggler_ranks(_collector_steps())
    f = straggler_findings(ranks)
    assert [x.kind for x in f] == ["straggler"]
    assert f[0].ranks == (2,)
    # the first (warm-up: first compiles) of the 20 steps is left out
    assert f[0].cost.ns == 19 * (30 * MS - 3 * MS // 10) and f[0].cost.basis == "measured"
    assert "data loading" in f[0].message and "steady" in f[0].message
    assert f[0].evidence.first_step == 1 and f[0].evidence.signals[0]["held_pct"] == 100.0
    ev = f[0].evidence
    assert ev.data_wait_median_ns > 2 * ev.others_data_wait_median_ns  # medians, so one stall cannot move them


def test_growing_straggler_since_a_step():
    steps = _collector_steps(extra=lambda s: 0 if s < 10 else (s - 9) * 2 * MS)
    f = straggler_findings(straggler_ranks(steps))
    assert f[0].ranks == (2,)
    assert "since step 10" in f[0].message and "growing" in f[0].message


def test_no_straggler_when_ranks_are_even():
    steps = _collector_steps(slow_rank=None, extra=lambda s: 0)
    assert straggler_findings(straggler_ranks(steps)) == []


def test_collective_signal_names_the_last_arriving_rank():
    rows = []
    for i in range(6):
        for r in range(3):
            arrive = 10 * MS * i + (2 * MS if r == 1 else 0)
            rows.append({"rank": r, "seq": i, "step": i // 2, "group_size": 3, "start": arrive, "end": arrive,
                         "kernel_start": arrive, "kernel_end": 10 * MS * i + 3 * MS})
    m = match_collectives(collectives_frame(rows))
    ranks = straggler_ranks(pl.DataFrame(), m)
    f = straggler_findings(ranks)
    assert f[0].ranks == (1,) and f[0].cost.ns == 6 * 2 * MS


def _pipeline_events():
    """Two stages, 4 micro-batches; stage 1 starts one forward later and idles while stage 0 runs ahead."""
    rows, steps = [], []
    for step in (1, 2, 3):
        t0 = step * 100 * MS
        steps += [{"rank": r, "step": step, "start": t0, "end": t0 + 100 * MS} for r in (0, 1)]
        for mb in range(4):
            for r in (0, 1):
                f0 = t0 + (mb + r) * 5 * MS
                rows.append({"rank": r, "name": f"forward_mb{mb}", "start": f0, "end": f0 + 5 * MS, "step": step})
                b0 = t0 + 50 * MS + (mb + (1 - r)) * 10 * MS
                rows.append({"rank": r, "name": f"backward_mb{mb}", "start": b0, "end": b0 + 10 * MS, "step": step})
    return events_frame(rows), steps_frame(steps)


def test_pipeline_bubble_per_stage_and_first_forward_delay():
    ev, st = _pipeline_events()
    b = pipeline_bubbles(ev, st)
    assert b["step"].unique().sort().to_list() == [1, 2]  # steady: the last step is left out
    s0 = b.filter((pl.col("rank") == 0) & (pl.col("step") == 1)).row(0, named=True)
    assert s0["forwards"] == 1 and s0["backwards"] == 1  # back-to-back ranges merge into one span
    assert s0["forward_ns"] == 20 * MS and s0["backward_ns"] == 40 * MS
    assert s0["bubble_ns"] == 100 * MS - 60 * MS and s0["first_forward_delay_ns"] == 0
    s1 = b.filter((pl.col("rank") == 1) & (pl.col("step") == 1)).row(0, named=True)
    assert s1["first_forward_delay_ns"] == 5 * MS


def test_pipeline_bubble_finding_needs_micro_batches():
    ev, st = _pipeline_events()
    # separate the micro-batches so each forward is its own range
    ev = ev.with_columns(end=pl.col("end") - MS, dur=pl.col("dur") - MS)
    b = pipeline_bubbles(ev, st)
    assert (b["forwards"] == 4).all()
    f = bubble_findings(b)
    assert [x.kind for x in f] == ["pipeline_bubble"] and f[0].ranks == (0, 1)
    assert f[0].cost.ns == pytest.approx(b.filter(pl.col("rank") == 1)["bubble_ns"].sum())
