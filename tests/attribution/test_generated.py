"""Generated faults (issue 30 req 6) and the issue's own three cases, in real gloo runs of 2-4 ranks: the late rank is
named with its steps and reason, its cost is the others' wait (p90 within 25 % over the set), the waiting ranks get
no exposed communication of their own, a clean run gets nothing medium or high.

The fast set is :func:`workbench_zoo.generated.plan` of seeds ``0..FAST_CASES-1`` with ``fast=True`` (2-4 ranks,
30-300 ms, six steps): deterministic cases whose sizes stand far out of a shared machine's noise. Every case's ranks
fork from one process that imported torch once (the zoo's launcher).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")

from workbench_zoo.generated import Case, Plant, plan, run_case, score  # noqa: E402

import workbench  # noqa: E402
from workbench.analyses.kinds import Kind  # noqa: E402
from workbench.analyses.late_ranks import noise_bar  # noqa: E402
from workbench.analyses.summary import analysis_tables  # noqa: E402

pytestmark = pytest.mark.slow
FAST_CASES = 20
N = 12
#: The issue's late rank, sized large against a busy CI host's noise: at load 10 on 2 cores the run's own noise bar
#: reached 22 ms, so a 30 ms plant was below twice it (undetectable by the bench's rule) in some runs.
LATE_MS = 80.0
ISSUE = {
    # 3 gloo ranks, DDP over a compiled model, one rank late inside every step before its forward
    "one_late": Case(1, 3, N, "ddp", (Plant(1, "before_forward", "sleep", LATE_MS, tuple(range(N))),)),
    # 4 ranks, one late inside every step and another recompiling alone at step 9
    "late_and_recompile": Case(2, 4, N, "ddp", (Plant(2, "before_forward", "sleep", LATE_MS, tuple(range(N))),
                                                Plant(1, "forward", "recompile", 300.0, (9,)))),
    # 4 ranks with nothing planted
    "clean": Case(3, 4, N, "ddp", ()),
    # not the issue's: 3 ranks, one running full garbage collections over a big heap in its optimizer phase
    "gc": Case(4, 3, N, "ddp", (Plant(1, "optimizer", "gc", 150.0, (3, 6, 9)),)),
}


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    """Records a case once per session (its run directory, ground truth and root causes)."""
    from workbench_zoo._launch import shared_launcher

    root = tmp_path_factory.mktemp("generated")
    done: dict[str, tuple[Path, dict, list]] = {}
    bars: dict[str, int | None] = {}

    def record(name: str, case: Case):
        if name not in done:
            out = root / name
            truth = run_case(case, out)
            assert all(c == 0 for c in truth["returncodes"].values()), truth["returncodes"]
            tables = analysis_tables(workbench.open(out))
            bars[name] = noise_bar(tables.critical_path) if tables.critical_path is not None else None
            done[name] = (out, truth, list(tables.roots))
        return done[name]

    record.bar = bars.get

    with shared_launcher():
        yield record


@pytest.mark.parametrize("seed", range(FAST_CASES))
def test_generated_case(recorder, seed: int) -> None:
    case = plan(seed, fast=True)
    _, truth, roots = recorder(f"seed-{seed}", case)
    sc = score(case, truth, roots, recorder.bar(f"seed-{seed}"))
    if case.control:
        assert not sc.loud_roots, (case.describe(), sc.loud_roots)
        return
    for c in sc.culprits:
        if not c.detectable:
            continue
        assert c.found, (case.describe(), [(f.kind, f.ranks, f.steps) for f in roots])
        # every step the fault clearly cost is named; the finding naming more steps than were planted (a step a
        # busy machine made late too) is the bench's precision measure (bench/attribution.py), not asserted here
        assert set(c.must) <= set(c.found_steps), (case.describe(), c)
        assert c.cost_error is not None, (case.describe(), c)
    assert not [f for f in sc.false_culprits if f["severity"] in ("high", "medium")], sc.false_culprits


#: The issue's bar on the cost: its error's p90 over the set within 25 %; no one case off by as much as itself.
P90_COST_ERROR, MAX_COST_ERROR = 0.25, 1.0


def test_generated_cost_error_p90(recorder) -> None:
    """The cost error over the fast set's detectable culprits (the cases above, recorded once): p90 within 25 % as
    the issue asks of the bench, and none off by its own size. One case's error is not held to 25 %: on a busy
    2-core host a plant's CPU work stretches while the profiler's export competes with it, and how much of that
    the run shows as the export's is that run's (seen: 30 % and 53 % in 2 of 20 cases at load 9, the bench's p90
    19.7 % over 200). An fsync's time is the shared disk's: left to the bench."""
    errors = []
    for seed in range(FAST_CASES):
        case = plan(seed, fast=True)
        _, truth, roots = recorder(f"seed-{seed}", case)
        sc = score(case, truth, roots, recorder.bar(f"seed-{seed}"))
        errors += [(c.cost_error, case.describe()) for c in sc.culprits
                   if c.detectable and c.cost_error is not None
                   and not any(p.rank == c.rank and p.kind == "file_write" for p in case.plants)]
    assert len(errors) >= 10, errors
    ordered = sorted(e for e, _ in errors)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    assert p90 <= P90_COST_ERROR, sorted(errors, reverse=True)[:5]
    assert ordered[-1] < MAX_COST_ERROR, sorted(errors, reverse=True)[:3]


def test_issue_one_rank_late_before_its_forward(recorder) -> None:
    _, truth, roots = recorder("one_late", ISSUE["one_late"])
    sc = score(ISSUE["one_late"], truth, roots, recorder.bar("one_late"))
    st = [f for f in roots if f.kind == Kind.STRAGGLER and f.evidence.rank == 1]
    assert st and st[0].severity in ("medium", "high"), [(f.kind, f.ranks, f.steps, f.severity) for f in roots]
    st = st[0]
    # named in every step it held the others back by twice the run's noise, and in no step it was not planted
    assert sc.culprits[0].found and set(sc.culprits[0].must) <= set(st.steps) <= set(range(1, N))
    assert st.evidence.reason == "untraced" and "before the collective called from" in st.message
    # the cost is how long the others waited for it: what the ranks' own clocks say it held them back, steps 1-11
    held = sc.culprits[0].held_ns   # by the ranks' arrivals; DDP's bucket-rebuild step by the planted truth
    assert st.cost.ns == pytest.approx(held, rel=0.25)
    assert set(st.evidence.wait_by_rank) == {0, 2}
    # any other rank named is the tail of a busy machine's noise (low), never a medium or high root
    assert not [f for f in roots if f.kind == Kind.STRAGGLER and f.evidence.rank != 1 and f.severity != "low"]
    assert_exposed_is_transfer(roots, recorder.bar("one_late"))


def test_issue_late_rank_and_a_one_rank_recompile(recorder) -> None:
    _, truth, roots = recorder("late_and_recompile", ISSUE["late_and_recompile"])
    what = [(f.kind, f.ranks, f.steps) for f in roots]
    st = {f.evidence.rank: f for f in roots if f.kind == Kind.STRAGGLER}
    # the late rank named in every step it held the others back by twice the run's noise (where a rank nothing was
    # planted on arrived after it, a profiler export or a busy host masked it: it held no one back there), and in
    # no step it was not planted in
    sc = score(ISSUE["late_and_recompile"], truth, roots, recorder.bar("late_and_recompile"))
    late = next(c for c in sc.culprits if c.rank == 2)
    assert 2 in st and late.must and set(late.must) <= set(st[2].steps) <= set(range(1, N)), (late, what)
    # the shared compiled model recompiles on rank 1 alone at step 9 (another input shape there, the same compile
    # config on every rank): a divergent recompile of rank 1 at step 9, costed as the others' wait
    div = [f for f in roots if f.kind == Kind.DIVERGENT_RECOMPILE]
    assert div and all(d.evidence.compiling_ranks == (1,) and d.steps == (9,) for d in div), what
    want = truth["truth_by_rank_step_ns"]["1"]["9"]
    assert sum(d.cost.ns for d in div) == pytest.approx(want, rel=0.25)   # one wait, shared by its frames
    assert 1 not in st or 9 not in st[1].steps, what        # the compile is the divergent recompile's, not a straggle
    assert not [f for f in roots if f.kind in (Kind.DIVERGENT_CONFIG, Kind.DIFFERENT_PROGRAMS)], what
    assert_exposed_is_transfer(roots, recorder.bar("late_and_recompile"))


def test_issue_clean_run_has_nothing_medium_or_high(recorder) -> None:
    """Nothing medium or high but the all-reduce's own transfer time (the same on every rank: no waits in it)."""
    _, _, roots = recorder("clean", ISSUE["clean"])
    assert not [(f.kind, f.ranks, f.severity) for f in roots
                if f.severity in ("medium", "high") and f.kind != Kind.EXPOSED_COMMUNICATION]
    assert_exposed_is_transfer(roots, recorder.bar("clean"))


def test_a_rank_late_for_garbage_collections_is_named_with_them(recorder) -> None:
    """The collector keeps the rank's long collections (``gc.jsonl``): the late rank's reason is a garbage
    collection, a full one, in the steps it ran them, and the fix is the one for the collector."""
    _, truth, roots = recorder("gc", ISSUE["gc"])
    sc = score(ISSUE["gc"], truth, roots, recorder.bar("gc"))
    st = [f for f in roots if f.kind == Kind.STRAGGLER and f.evidence.rank == 1]
    assert st, [(f.kind, f.ranks, f.steps) for f in roots]
    assert st[0].evidence.reason == "gc" and st[0].evidence.what == "full collection (generation 2)"
    # every step it clearly cost named, and no step named clearly that was not planted (the bench's rule)
    assert sc.culprits[0].right and {3, 6, 9} & set(st[0].steps), (sc.culprits[0], st[0].steps)
    from workbench.analyses.recommendations import fixers_for

    fixes = [fx for fn in fixers_for(Kind.STRAGGLER) for fx in fn(st[0])]
    assert fixes and fixes[0].fix_id == "tame_gc" and "gc.freeze()" in (fixes[0].code or fixes[0].why), fixes[0]


def assert_exposed_is_transfer(roots: list, noise_ns: int | None) -> None:
    """Exposed communication is transfer time after the last arrival, which every rank spends alike: no rank's is
    more than twice another's plus the run's noise bar a step (a rank that waited for a late peer would carry the
    whole wait: ten times the transfer in the issue's cases)."""
    exposed = {f.ranks[0]: f for f in roots if f.kind == Kind.EXPOSED_COMMUNICATION}
    if len(exposed) < 2:
        return
    least = min(f.cost_ns for f in exposed.values())
    for rank, f in exposed.items():
        slack = (noise_ns or 0) * max(1, len(f.steps))
        assert f.cost_ns <= 2 * least + slack, (rank, f.cost_ns, least, slack)
