"""The critical-path engine on hand-made sync points: effective arrivals, the layered blame, the noise rule, the
attribution to activities, clock alignment across hosts (deterministic: no processes, seeded jitter)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from workbench.analyses import activities as act
from workbench.analyses.clock import align, host_offsets
from workbench.analyses.critical_path import (
    MIN_NOISE_NS, SYNC_POINTS, blame, critical_path, instance_table, noise_table, shorth_sigma, sync_points,
)
from workbench.analyses.late_ranks import late_rank_findings

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def sync(rows: list[tuple[int, int, int, float, float | None]]) -> pl.DataFrame:
    """(rank, seq, step, arrival ms, complete ms or None) → SYNC_POINTS rows of process group "0"."""
    return pl.DataFrame([{
        "rank": r, "pg_name": "0", "key_step": -1, "seq": q, "op": "all_reduce", "step": s,
        "arrival": T0 + int(a * MS), "start": None, "complete": None if c is None else T0 + int(c * MS),
        "source": "fr", "call_site": "train.py:18 in main"} for r, q, s, a, c in rows], schema=SYNC_POINTS)


def steps_frame(ranks: range, n: int, step_ms: float, data_wait: dict[tuple[int, int], float] | None = None
                ) -> pl.DataFrame:
    """Collector steps: step k of every rank from k*step_ms to (k+1)*step_ms (``data_wait`` (rank, step) → ms)."""
    rows = []
    for r in ranks:
        for k in range(n):
            dw = (data_wait or {}).get((r, k), 0.0)
            rows.append({"rank": r, "step": k, "source": "collector", "start": T0 + int((k * step_ms + dw) * MS),
                         "end": T0 + int((k + 1) * step_ms * MS), "dur": int((step_ms - dw) * MS),
                         "device_ns": None, "data_wait_ns": int(dw * MS), "profiled": False})
    return pl.DataFrame(rows).with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32),
                                           pl.col("source").cast(pl.Categorical))


def test_layered_blame_charges_each_late_rank_its_own_layer():
    # one instance: ranks 0 and 1 on time, rank 2 50 ms late, rank 3 120 ms late (previous instance at 0 for all)
    s = sync([(r, 1, 1, 0.0, 0.0) for r in range(4)] +
             [(0, 2, 1, 10.0, None), (1, 2, 1, 10.1, None), (2, 2, 1, 60.0, None), (3, 2, 1, 130.0, None)])
    inst = instance_table(s)
    layers, waits = blame(inst, pl.DataFrame())
    got = {r["culprit"]: r["layer_ns"] for r in layers.iter_rows(named=True)}
    assert got == {3: 70 * MS, 2: pytest.approx(49.9 * MS, abs=2)}
    w = waits.filter(pl.col("seq") == 2).group_by("victim", "culprit").agg(pl.col("ns").sum())
    by = {(v, c): n for v, c, n in w.iter_rows()}
    assert by[(0, 3)] == by[(1, 3)] == by[(2, 3)] == 70 * MS          # everyone before rank 3 waited for it
    assert by[(0, 2)] == by[(1, 2)] == pytest.approx(49.9 * MS, abs=2) and (3, 2) not in by   # rank 3 never
    assert by[(0, None)] == pytest.approx(0.1 * MS, abs=2)            # the on-time ranks' spread: nobody's


def test_two_late_of_three_are_both_charged():
    """Two of three ranks late: the third is the on-time one (not the lower median, itself late)."""
    s = sync([(r, 1, 1, 0.0, 0.0) for r in range(3)] +
             [(0, 2, 1, 10.0, None), (1, 2, 1, 130.0, None), (2, 2, 1, 60.0, None)])
    layers, _ = blame(instance_table(s), pl.DataFrame())
    assert {r["culprit"]: r["layer_ns"] for r in layers.iter_rows(named=True)} == {1: 70 * MS, 2: 50 * MS}


def test_a_burst_of_calls_is_one_wait_not_three():
    """A victim that issues three collectives back to back (DDP buckets) waits once for a late peer: each call's
    effective arrival is the exit of the one before."""
    rows = [(r, 1, 1, 0.0, None) for r in range(2)]
    for q, dt in ((2, 0.0), (3, 1.0), (4, 2.0)):
        rows += [(0, q, 1, 10.0 + dt, None), (1, q, 1, 50.0 + dt, None)]
    inst = instance_table(sync(rows))
    waits = inst.filter(pl.col("rank") == 0)["wait_ns"].sum()
    assert waits == pytest.approx(42 * MS, abs=MS)


def test_noise_rule_blames_the_late_steps_only():
    rnd = random.Random(7)
    rows = []
    late = {3: 30.0, 6: 45.0}
    for step in range(10):
        for r in range(3):
            jitter = rnd.gauss(0, 0.5)
            rows.append((r, step, step, step * 100 + 20 + jitter + (late.get(step, 0.0) if r == 1 else 0.0), None))
    s = sync(rows)
    inst = instance_table(s)
    noise = noise_table(inst, {0})
    bar = noise["noise_ns"][0]
    assert MIN_NOISE_NS <= bar < 5 * MS
    layers, waits = blame(inst, noise)
    # the late steps are charged; a layer elsewhere (three spreads of a 0.5 ms jitter are exceeded now and then
    # over 27 arrivals) is never a clear one, and the only finding is rank 1 in its late steps
    got = {(c, st): ns for c, st, ns in zip(layers["culprit"], layers["step"], layers["layer_ns"])}
    assert {(1, 3), (1, 6)} <= set(got)
    assert all(ns < 2 * bar for k, ns in got.items() if k not in {(1, 3), (1, 6)}), got
    from workbench.analyses.critical_path import CriticalPath, attribute, rank_activity

    a = attribute(layers, inst, rank_activity(range(3), steps_frame(range(3), 10, 100.0), None, None))
    found = late_rank_findings(CriticalPath(s, inst, noise, layers, waits, a, pl.DataFrame()))
    assert [(f.evidence.rank, set(f.steps)) for f in found] == [(1, {3, 6})]


def test_a_rank_late_every_step_is_not_noise():
    rnd = random.Random(3)
    rows = [(r, step, step, step * 100 + 20 + rnd.gauss(0, 0.5) + (25.0 if r == 0 else 0.0), None)
            for step in range(8) for r in range(2)]
    inst = instance_table(sync(rows))
    layers, _ = blame(inst, noise_table(inst, {0}))
    assert set(layers["culprit"]) == {0} and set(layers["step"]) == set(range(8))


def test_shorth_ignores_a_cluster_of_late_values():
    values = [0.0, 0.3, -0.2, 0.1, 40.0, 41.0, 39.5]     # three late of seven
    assert shorth_sigma(values) < 0.5
    assert shorth_sigma([1.0, 2.0]) == 0.0


def test_activities_resolve_by_specificity():
    """A user range explains the ops inside it (the design's order); ops nest (the innermost names the time);
    a compile outranks everything; what nothing covers is untraced."""
    spans = [act.Span(0, 100, "python", "train_step", "train.py:10"), act.Span(5, 25, "range", "checkpoint"),
             act.Span(30, 60, "cpu_op", "aten::mm"), act.Span(35, 38, "cpu_op", "aten::addmm"),
             act.Span(50, 70, "compile", "compile 0/1 of f")]
    got = [(p.start, p.end, p.category, p.label) for p in act.resolve(spans, 0, 120)]
    assert got == [(0, 5, "python", "train_step"), (5, 25, "range", "checkpoint"), (25, 30, "python", "train_step"),
                   (30, 35, "cpu_op", "aten::mm"), (35, 38, "cpu_op", "aten::addmm"), (38, 50, "cpu_op", "aten::mm"),
                   (50, 70, "compile", "compile 0/1 of f"), (70, 100, "python", "train_step"),
                   (100, 120, "untraced", None)]


def test_late_rank_named_with_data_loading_from_the_step_records():
    """Rank 2 waits 60 ms for its batch before every step (steps.jsonl): it is late at every step's collective,
    and the reason is data loading."""
    n, step_ms = 8, 200.0
    dw = {(2, k): 60.0 for k in range(1, n)}
    steps = steps_frame(range(3), n, step_ms, dw)
    rows = []
    for k in range(n):
        for r in range(3):
            late = 60.0 if r == 2 and k >= 1 else 0.0
            rows.append((r, k, k, k * step_ms + 100 + late + 0.1 * r, k * step_ms + 101 + (60.0 if k >= 1 else 0)))
    cp = critical_path(None, None, steps)
    assert cp.empty
    s = sync(rows)
    inst = instance_table(s)
    layers, waits = blame(inst, noise_table(inst, {0}))
    from workbench.analyses.critical_path import CriticalPath, attribute, rank_activity

    attribution = attribute(layers, inst, rank_activity(range(3), steps, None, None))
    cp = CriticalPath(s, inst, noise_table(inst, {0}), layers, waits, attribution, pl.DataFrame())
    (f,) = late_rank_findings(cp)
    assert f.evidence.rank == 2 and f.evidence.reason == "data"
    assert set(f.steps) == set(range(1, n))
    assert f.cost.ns == pytest.approx((n - 1) * 60 * MS, rel=0.02)
    assert "data loading" in f.message


def test_clock_offset_of_a_shifted_host_is_recovered():
    rnd = random.Random(11)
    delta = 5 * 1_000_000_000 + 123 * MS          # host b's clock runs 5.123 s ahead
    rows = []
    for q in range(20):
        done = q * 50.0 + 30
        for r in range(4):
            shift = delta / MS if r >= 2 else 0.0
            rows.append((r, q, q, q * 50.0 + 5 + rnd.random() + shift, done + rnd.gauss(0, 0.05) + shift))
    s = sync(rows)
    ranks = pl.DataFrame({"rank": [0, 1, 2, 3], "host": ["a", "a", "b", "b"]}).with_columns(
        pl.col("rank").cast(pl.Int32))
    clock = host_offsets(s, ranks)
    b = clock.filter(pl.col("host") == "b").row(0, named=True)
    assert b["offset_ns"] == pytest.approx(delta, abs=0.2 * MS)
    assert b["residual_ns"] < 0.2 * MS and b["method"] == "collective completions"
    aligned, _, notes = align(s, ranks)
    assert not notes
    inst = instance_table(aligned)
    assert inst["wait_ns"].max() < 2 * MS                           # nobody waits 5 s once aligned


def test_sync_points_from_a_profiler_window_alone():
    """Kineto's collectives alone (a user's traces, no Flight Recorder): matched by group, step and order."""
    rows = []
    for r in range(2):
        for k in range(3):
            start = T0 + (k * 100 + (30 if r == 1 else 0)) * MS
            rows.append({"rank": r, "backend": "gloo", "pg_name": "0", "pg_desc": "default_pg", "pg_ranks": "[0, 1]",
                         "group_size": 2, "seq": k, "collective": "allreduce", "dtype": "Float", "in_elems": 4,
                         "out_elems": 4, "bytes": 16, "start": start, "end": T0 + (k * 100 + 31) * MS,
                         "kernel_name": None, "kernel_start": start, "kernel_end": T0 + (k * 100 + 31) * MS,
                         "external_id": None, "step": k})
    colls = pl.DataFrame(rows).with_columns(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int32))
    s = sync_points(None, colls, None)
    assert s.height == 6 and set(s["source"]) == {"kineto"}
    inst = instance_table(s)
    assert inst.filter(pl.col("rank") == 0)["wait_ns"].to_list() == [30 * MS] * 3


def test_export_cost_is_its_whole_cpu_time_on_a_crowded_host():
    from workbench.analyses.critical_path import crowded_ranks, export_costs

    fp = pl.DataFrame({"rank": [0, 1, 2], "host": ["a", "a", "b"],
                       "raw": ['{"cpu_count": 2}', '{"cpu_count": 2}', '{"cpu_count": 16}']})
    crowded = crowded_ranks(fp)
    assert crowded == {0, 1}
    exports = {0: [(0, 100, 10, 60)], 2: [(0, 100, 10, 60)], 1: [(0, 100, None, 40), (5, 9)]}
    costs = export_costs(exports, crowded)
    assert costs[0] == [(0, 100, 60)]          # crowded: the whole CPU time
    assert costs[2] == [(0, 100, 10)]          # spare cores: the GIL time only
    assert costs[1] == [(0, 100, 40), (5, 9, None)]   # one missing: the other; none: its length later
    assert crowded_ranks(None) == set()


def test_a_gloo_rank_queued_inside_its_own_call_is_not_late():
    """Rank 2 calls every step's all-reduce on time, but its gloo thread starts the collective 40 ms later (a busy
    host): the others wait for it, and that time is its collective's own (queued after the call), never a
    straggler's reason. The same times with rank 2 reaching the call 40 ms late name it."""
    from workbench.analyses.critical_path import QUEUED_LABEL, CriticalPath, attribute, rank_activity

    n, step_ms = 8, 200.0
    steps = steps_frame(range(3), n, step_ms)

    def run(queued_call: bool):
        rows = []
        for k in range(n):
            for r in range(3):
                late = 40.0 if r == 2 and k >= 1 else 0.0
                start = k * step_ms + 100 + late + 0.1 * r
                call = start - late if queued_call else start
                rows.append({"rank": r, "pg_name": "0", "key_step": -1, "seq": k, "op": "all_reduce", "step": k,
                             "arrival": T0 + int(call * MS), "start": T0 + int(start * MS),
                             "complete": T0 + int((k * step_ms + 141) * MS), "source": "fr+kineto",
                             "call_site": "train.py:18 in main"})
        s = pl.DataFrame(rows, schema=SYNC_POINTS)
        inst = instance_table(s)
        noise = noise_table(inst, {0})
        layers, waits = blame(inst, noise)
        a = attribute(layers, inst, rank_activity(range(3), steps, None, None), queued_ranks={0, 1, 2})
        return a, late_rank_findings(CriticalPath(s, inst, noise, layers, waits, a, pl.DataFrame()))

    queued, found = run(queued_call=True)
    mine = queued.filter(pl.col("culprit") == 2)
    assert set(mine["label"].to_list()) == {QUEUED_LABEL} and set(mine["category"].to_list()) == {"collective"}
    assert mine["ns"].sum() == pytest.approx((n - 1) * 40 * MS, rel=0.01)
    assert not found
    _, found = run(queued_call=False)
    assert [f.evidence.rank for f in found] == [2] and found[0].evidence.reason == "untraced"


def test_work_after_a_collective_completed_is_the_rank_s_own_though_its_exit_was_recorded_later():
    """Rank 2 waits 60 ms for its batch before every step; its completion of each all-reduce is recorded only when
    that wait is over (its completion callback waited for the interpreter lock its main thread held, as a DDP hook's
    does while the main thread runs a long garbage collection). The collective's data was there when the other
    ranks completed it: the time after is rank 2's own, and the reason it was late is its data loading."""
    from workbench.analyses.critical_path import CriticalPath, attribute, rank_activity

    n, step_ms = 8, 200.0
    steps = steps_frame(range(3), n, step_ms, {(2, k): 60.0 for k in range(1, n)})
    rows = []
    for k in range(n):
        for r in range(3):
            late = 60.0 if r == 2 and k >= 1 else 0.0
            done = k * step_ms + 101 + (60.0 if k >= 1 else 0.0)
            if r == 2 and k + 1 < n:
                done = (k + 1) * step_ms + 65          # recorded after its next batch wait
            rows.append((r, k, k, k * step_ms + 100 + late + 0.1 * r, done))
    s = sync(rows)
    inst = instance_table(s)
    noise = noise_table(inst, {0})
    layers, waits = blame(inst, noise)
    a = attribute(layers, inst, rank_activity(range(3), steps, None, None))
    (f,) = late_rank_findings(CriticalPath(s, inst, noise, layers, waits, a, pl.DataFrame()))
    assert f.evidence.rank == 2 and f.evidence.reason == "data"
    assert set(f.steps) == set(range(1, n))
    assert f.cost.ns == pytest.approx((n - 1) * 60 * MS, rel=0.02)


def test_a_rank_late_for_its_garbage_collections_is_named_with_them():
    """Rank 1 of three runs a 70 ms full garbage collection (the collector's ``gc.jsonl``) before its all-reduce in
    steps 2, 4 and 6; every rank has 2 ms young collections now and then. It is named late in those steps, the reason
    a garbage collection, its cost the others' wait."""
    from workbench.analyses.critical_path import CriticalPath, attribute, rank_activity

    n, step_ms, late = 8, 200.0, {2, 4, 6}
    steps = steps_frame(range(3), n, step_ms)
    rows, gc = [], {r: [] for r in range(3)}
    for k in range(n):
        for r in range(3):
            slow = 70.0 if r == 1 and k in late else 0.0
            rows.append((r, k, k, k * step_ms + 100 + slow + 0.1 * r, k * step_ms + 101 + (70.0 if k in late else 0)))
            if slow:
                gc[r].append((T0 + int((k * step_ms + 20) * MS), T0 + int((k * step_ms + 90) * MS), 2))
            gc[r].append((T0 + int((k * step_ms + 5 + r) * MS), T0 + int((k * step_ms + 7 + r) * MS), 0))
    s = sync(rows)
    inst = instance_table(s)
    noise = noise_table(inst, {0})
    layers, waits = blame(inst, noise)
    a = attribute(layers, inst, rank_activity(range(3), steps, None, None, gc=gc))
    (f,) = late_rank_findings(CriticalPath(s, inst, noise, layers, waits, a, pl.DataFrame()))
    assert f.evidence.rank == 1 and f.evidence.reason == "gc" and set(f.steps) == late
    assert f.evidence.what == "full collection (generation 2)"
    assert f.cost.ns == pytest.approx(3 * 70 * MS, rel=0.02)
    assert "a Python garbage collection" in f.message


def test_the_timeline_view_leaves_the_warm_up_step_out():
    """Rank 1 is 2 s late in step 0 (its first compile) and 80 ms late in step 3: the critical-path timeline's
    default steps are around step 3, not the warm-up whose compile would stretch the axis over everything else."""
    from workbench.analyses.critical_path import CriticalPath
    from workbench.critical_path_view import _busiest_steps

    late = {0: 2000.0, 3: 80.0}
    rows = [(r, k, k, k * 3000 + 100 + (late.get(k, 0.0) if r == 1 else 0.0) + 0.1 * r, None)
            for k in range(12) for r in range(3)]
    s = sync(rows)
    inst = instance_table(s)
    noise = noise_table(inst, {0})
    layers, waits = blame(inst, noise)
    lo, hi = _busiest_steps(CriticalPath(s, inst, noise, layers, waits, pl.DataFrame(), pl.DataFrame()))
    assert 0 < lo <= 3 <= hi


def test_a_layer_above_another_late_rank_is_what_its_rank_did_beyond_that_one():
    """Ranks 2 and 3 of four both wait 40 ms for their batch in steps 2-5 (a shared stall); rank 3 then runs a 15 ms
    garbage collection too. Rank 2's layer (40 ms over the on-time ranks) is its data loading; rank 3's layer
    above it (15 ms) is the collection, not the data wait both had."""
    from workbench.analyses.critical_path import attribute, rank_activity

    n, step_ms, late = 8, 200.0, range(2, 6)
    steps = steps_frame(range(4), n, step_ms, {(r, k): 40.0 for r in (2, 3) for k in late})
    rows, gc = [], {3: []}
    for k in range(n):
        for r in range(4):
            extra = (40.0 if r in (2, 3) and k in late else 0.0) + (15.0 if r == 3 and k in late else 0.0)
            rows.append((r, k, k, k * step_ms + 100 + extra + 0.1 * r, k * step_ms + 101 + (55.0 if k in late else 0)))
            if r == 3 and k in late:
                gc[3].append((T0 + int((k * step_ms + 50) * MS), T0 + int((k * step_ms + 65) * MS), 2))
    inst = instance_table(sync(rows))
    layers, _ = blame(inst, noise_table(inst, {0}))
    a = attribute(layers, inst, rank_activity(range(4), steps, None, None, gc=gc)).filter(pl.col("step") > 0)
    by = a.group_by("culprit", "category").agg(pl.col("ns").sum())
    got = {(c, cat): ns for c, cat, ns in by.iter_rows()}
    assert set(got) == {(2, "data"), (3, "gc")}, got
    assert got[(3, "gc")] == pytest.approx(len(late) * 15 * MS, rel=0.02)
    assert got[(2, "data")] == pytest.approx(len(late) * 40 * MS, rel=0.02)


def test_ranks_arriving_within_the_noise_of_each_other_share_their_layer():
    """Ranks 3, 5 and 6 of seven reach step 4's all-reduce 58 ms after the others, within 1.7 ms of each other;
    none of them alone held the others back (had any one been on time, the others would still have waited): the
    58 ms layer is shared in three, never charged whole to the first of them."""
    rnd = random.Random(5)
    late = {3: 58.0, 5: 59.3, 6: 59.7}      # the run's own jitter (3 ms) puts its noise bar well above 1.7 ms
    rows = [(r, k, k, k * 200 + 100 + (late.get(r, 0.0) + 0.01 * r if k == 4 else rnd.gauss(0, 3.0)), None)
            for k in range(10) for r in range(7)]
    inst = instance_table(sync(rows))
    layers, waits = blame(inst, noise_table(inst, {0}))
    mine = layers.filter(pl.col("step") == 4).group_by("culprit").agg(pl.col("layer_ns").sum())
    got = dict(mine.iter_rows())
    assert set(got) == {3, 5, 6}
    assert max(got.values()) < 0.5 * 58 * MS and sum(got.values()) == pytest.approx(59.76 * MS, abs=0.1 * MS)
    w = waits.filter((pl.col("step") == 4) & (pl.col("victim") == 0)).group_by("culprit").agg(pl.col("ns").sum())
    assert sum(n for c, n in w.iter_rows() if c is not None) == pytest.approx(59.76 * MS, abs=0.1 * MS)
