"""The profiler/Flight Recorder match aligned over the window, the noise of a rank late in most steps, and the
generated bench's honest ground truth (deterministic: hand-made tables)."""

from __future__ import annotations

import polars as pl

from workbench.analyses.critical_path import SYNC_POINTS, instance_table, noise_table
from workbench.analyses.sync_points import align_calls

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _points(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{"rank": 0, "pg_name": "0", "key_step": -1, "start": None, "complete": None,
                          "source": "fr", "call_site": None, **r} for r in rows], schema=SYNC_POINTS)


def test_profiler_collectives_find_their_entries_across_a_step_boundary():
    # two all-reduces a step, 10 steps; the profiler saw steps 3-5, its spans a little after the calls (up to 9 ms,
    # a gloo thread on a busy host), one of them stepped into the next step and named "allreduce"
    fr = _points([{"seq": q, "op": "all_reduce", "step": 1 + (q - 1) // 2, "arrival": T0 + (q * 20 + q % 2 * 3) * MS}
                  for q in range(1, 21)])
    kt = []
    for q in range(5, 11):
        a = T0 + (q * 20 + q % 2 * 3) * MS + (9 * MS if q == 8 else 150_000)
        kt.append({"seq": 0, "op": "allreduce", "step": 1 + (q - 1) // 2 + (1 if q == 8 else 0), "arrival": a,
                   "start": a, "complete": a + 2 * MS, "source": "kineto", "key_step": 0})
    kt.append({"seq": 0, "op": "broadcast", "step": 5, "arrival": T0 + 201 * MS, "start": T0 + 201 * MS,
               "complete": T0 + 202 * MS, "source": "kineto", "key_step": 0})      # no entry: left unmatched
    got = align_calls(fr, _points(kt)).sort("seq")
    assert got["seq"].to_list() == list(range(5, 11))
    assert got["_kstart"].to_list() == [r["start"] for r in kt[:6]]


def test_a_rank_late_in_most_steps_does_not_make_its_own_noise():
    # two ranks (a recorded run on a busy host): rank 1 late ~60 ms at the first all-reduce of steps 1-4, less in
    # step 5 (the others slow too), not in step 6; one 33 ms blip of rank 0 at the second: the noise is the ranks'
    # own step-to-step spread, well below the lateness (a pooled shortest half of all residuals read 62 ms here)
    late = {0: [0.0, 59.8, 64.6, 61.7, 67.9, 31.8, 1.8], 1: [0.0, 0.4, -32.7, 0.2, 0.2, 0.4, -0.4]}
    rows = []
    for i, step in enumerate(range(0, 7)):      # step 0: the warm-up, left out of the noise
        for slot in range(2):
            at = T0 + step * 300 * MS + slot * 100 * MS
            rows += [{"rank": 0, "seq": 2 * step + slot, "op": "all_reduce", "step": step, "arrival": at},
                     {"rank": 1, "seq": 2 * step + slot, "op": "all_reduce", "step": step,
                      "arrival": at + int(late[slot][i] * MS)}]
    noise = noise_table(instance_table(_points(rows)), {0})
    assert noise["noise_ns"].max() < 15 * MS


def test_undetectable_culprits_are_judged_by_the_runs_noise_bar():
    from workbench_zoo.generated import Case, Plant, score

    case = Case(1, 3, 7, "ddp", (Plant(1, "before_forward", "file_write", 6.0, (1, 2)),
                                 Plant(2, "before_forward", "sleep", 80.0, (1, 2, 3))))
    truth = {"truth_by_rank_step_ns": {"1": {"1": 40 * MS, "2": 5 * MS}, "2": {"1": 80 * MS, "2": 80 * MS,
                                                                           "3": 80 * MS}},
             "held_by_rank_step_ns": {"2": {"1": 79 * MS, "2": 3 * MS, "3": 78 * MS}}}
    sc = score(case, truth, [], noise_ns=10 * MS)
    one, two = sc.culprits
    # rank 1: its fsync ran 40 ms in step 1, but the plant was 6 ms (below 2 × 10 ms): the machine was slow then
    assert not one.detectable and one.may == [1, 2]
    # rank 2: in step 2 it held the others back only 3 ms (they were slow too): a step it may be named in; step 1's
    # first collective closes the warm-up (its interval holds step 0's tail): may, not must
    assert two.must == [3] and two.may == [1, 2] and not two.found


def test_the_ranks_own_clocks_say_how_long_a_culprit_held_the_others():
    from workbench_zoo.generated import Case, Plant, held_back, unplanted_holds

    case = Case(1, 3, 5, "ddp", (Plant(1, "optimizer", "sleep", 30.0, (2,)),))
    # arrivals (ms) at each step's all-reduce: rank 1's optimizer sleep in step 2 delays step 3's collective; in
    # step 4 rank 2 is 25 ms late with nothing planted
    ms = {0: [0, 100, 200, 300, 400], 1: [1, 101, 201, 331, 401], 2: [2, 101, 202, 302, 425]}
    arrivals = {r: {f"{s}:0": v * MS for s, v in enumerate(a)} for r, a in ms.items()}
    measured = {1: {"inject:optimizer": {2: 30 * MS}}}
    assert held_back(case, arrivals) == {1: {2: 29 * MS}}
    extra = unplanted_holds(case, arrivals, measured)
    assert extra[2][4] == 24 * MS and 3 not in extra.get(1, {})


def test_a_plant_a_later_unplanted_rank_masked_is_held_by_its_layer_and_need_not_be_named():
    """Rank 1's optimizer sleep in step 2 makes it 30 ms late at step 3's all-reduce, where rank 2 (nothing planted)
    arrives 10 ms after it: rank 1's hold is its layer (30 ms over rank 0), the step is masked (may, not must), and
    its cost counts that layer only where a finding names the step."""
    from types import SimpleNamespace

    from workbench_zoo.generated import Case, Plant, held_back, masked_steps, score

    case = Case(1, 3, 5, "ddp", (Plant(1, "optimizer", "sleep", 30.0, (1, 2)),))
    ms = {0: [0, 100, 200, 300, 400], 1: [1, 101, 230, 330, 401], 2: [2, 101, 202, 340, 402]}
    arrivals = {r: {f"{s}:0": v * MS for s, v in enumerate(a)} for r, a in ms.items()}
    held, masked = held_back(case, arrivals), masked_steps(case, arrivals)
    assert held == {1: {1: 28 * MS, 2: 30 * MS}} and masked == {1: [2]}
    truth = {"truth_by_rank_step_ns": {"1": {"1": 30 * MS, "2": 30 * MS}},
             "held_by_rank_step_ns": {"1": {"1": 28 * MS, "2": 30 * MS}}, "masked_steps_by_rank": {"1": [2]}}

    def straggler(steps, ns):
        from workbench.analyses.kinds import Kind

        return SimpleNamespace(kind=Kind.STRAGGLER, severity="medium", ranks=(1,), blamed_ranks=(1,), steps=steps,
                               cost_ns=ns, evidence=SimpleNamespace(reason="untraced",
                                                                    lateness_by_step={s: ns // len(steps)
                                                                                      for s in steps}))
    named_both = score(case, truth, [straggler((1, 2), 58 * MS)], noise_ns=5 * MS).culprits[0]
    assert named_both.must == [1] and 2 in named_both.may and named_both.held_ns == 58 * MS
    assert named_both.right and named_both.cost_error == 0
    named_one = score(case, truth, [straggler((1,), 28 * MS)], noise_ns=5 * MS).culprits[0]
    assert named_one.right and named_one.held_ns == 28 * MS and named_one.cost_error == 0


def test_two_culprits_arriving_within_the_noise_cannot_be_told_apart_by_order():
    """Ranks 1 and 2, both planted before step 2's forward, reach its all-reduce 3 ms apart at a 10 ms noise bar:
    which of them the others waited for is noise, so rank 1's step 2 may be named, not must. In step 3 rank 2
    arrived 30 ms after rank 1 (three noise units): rank 1's own 62 ms hold there is a must step."""
    from workbench_zoo.generated import Case, Plant, next_arrival_gaps, score

    case = Case(1, 3, 5, "explicit", (Plant(1, "before_forward", "sleep", 60.0, (2, 3, 4)),
                                      Plant(2, "before_forward", "sleep", 60.0, (2, 3))))
    ms = {0: [0, 100, 200, 300, 400], 1: [0, 100, 262, 362, 460], 2: [0, 100, 265, 392, 400]}
    arrivals = {r: {f"{s}:0": v * MS for s, v in enumerate(a)} for r, a in ms.items()}
    gaps = next_arrival_gaps(case, arrivals)
    assert gaps == {1: {2: 3 * MS, 3: 30 * MS}}
    truth = {"truth_by_rank_step_ns": {"1": {"2": 60 * MS, "3": 60 * MS, "4": 60 * MS}},
             "held_by_rank_step_ns": {"1": {"2": 62 * MS, "3": 62 * MS, "4": 60 * MS}},
             "next_arrival_gap_by_rank_step_ns": {"1": {"2": 3 * MS, "3": 30 * MS}}}
    one = score(case, truth, [], noise_ns=10 * MS).culprits[0]
    assert one.must == [3, 4] and 2 in one.may
