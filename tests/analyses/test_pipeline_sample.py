"""``pipeline_bubbles`` on a real ``torch.distributed.pipelining`` run against the schedule's theoretical bubble.

The sample ``sample_traces/cpu-gloo-pipeline`` (``examples/cpu_gloo_pipeline.py``): 2 stages (one per rank, gloo on
CPU), GPipe, m = 4 micro-batches, stages of equal cost (32 ``Linear(512, 512)`` + ReLU each, micro-batch 256 rows;
stage 0's tiny input layer makes all of its big layers compute input gradients, as stage 1's do). Per stage and
step GPipe runs m forwards and m backwards inside a period of (m + p - 1) micro-batch slots, so with equal-cost
stages and free communication the bubble fraction is (p - 1) / (m + p - 1) = 1/5 = 20 %, on every stage.

Two sets of forward/backward ranges are in the traces:

* ``forward_mb<i>`` / ``backward_mb<i>``, written by the example around ``PipelineStage.forward_one_chunk`` /
  ``backward_one_chunk``: compute only;
* the schedule's own ``Forward <i>`` / ``Backward <i>`` (``record_function`` in ``ScheduleGPipe``), which also hold
  the wait for the neighbouring stage's activations or gradients (``_wait_batch_p2p``, the ``gloo:recv`` ranges):
  the bubble is inside them.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.bubbles import pipeline_bubbles
from workbench.analyses.collectives import collective_findings, collective_instances, match_collectives

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu-gloo-pipeline"
pytestmark = pytest.mark.skipif(not (SAMPLE / "run.json").is_file(),
                                reason="sample_traces/cpu-gloo-pipeline not recorded")

COMPUTE = {"forward_pattern": r"^forward_mb\d+$", "backward_pattern": r"^backward_mb\d+$"}

# Tolerance, in percentage points of the step, around the theoretical bubble (see test_bubble_matches_gpipe_theory).
BELOW_PP, ABOVE_PP = 3.0, 8.0
RANK_BELOW_PP, RANK_ABOVE_PP = 5.0, 10.0


@pytest.fixture(scope="module")
def run():
    return workbench.open(SAMPLE)


@pytest.fixture(scope="module")
def extra() -> dict:
    return json.loads((SAMPLE / "run.json").read_text())["extra"]


def theory(extra: dict) -> float:
    """GPipe's bubble fraction in %: (p - 1) / (m + p - 1)."""
    p, m = extra["stages"], extra["microbatches"]
    return 100.0 * (p - 1) / (m + p - 1)


def overall_pct(b: pl.DataFrame) -> float:
    return 100.0 * b["bubble_ns"].sum() / b["step_ns"].sum()


def test_sample_is_gpipe_two_stages(extra):
    assert extra["example"] == "cpu_gloo_pipeline" and extra["schedule"] == "gpipe"
    assert extra["stages"] == 2 and extra["microbatches"] == 4
    assert theory(extra) == pytest.approx(20.0)


def test_every_microbatch_has_its_ranges(run, extra):
    b = pipeline_bubbles(run.events, run.steps, **COMPUTE)
    assert sorted(b["rank"].unique().to_list()) == [0, 1]
    assert b.group_by("rank").len()["len"].min() >= 3          # steady steps per rank (window 3-7, last dropped)
    assert (b["forwards"] == extra["microbatches"]).all() and (b["backwards"] == extra["microbatches"]).all()
    assert (b["timeline"] == "cpu").all()
    # equal-cost stages: the two ranks' compute differs by a few % only
    work = b.group_by("rank").agg(pl.col("work_ns").sum()).sort("rank")["work_ns"].to_list()
    assert abs(work[0] - work[1]) / max(work) < 0.15


def test_bubble_matches_gpipe_theory(run, extra):
    """Measured bubble (compute-only ranges, all ranks and steady steps pooled) within [-3, +8] points of theory.

    Recorded: 23.7 % pooled (rank 0 22.6 %, rank 1 24.8 %) against 20.0 %.

    Why the band is lopsided. Above the theory, by construction: the theory leaves out work that is neither
    forward nor backward but is real bubble for the analysis and for the stage: the optimizer step (0.6-0.8 % of the
    step here), the last stage's loss, the schedule's bookkeeping (chunking, posting sends and receives) and two
    point-to-point hops on the critical path of every step (stage 0's first forward to stage 1, stage 1's last
    backward to stage 0); about 1-3 points on a quiet host. The sample was recorded on a shared 2-core host (load
    average about 7), where the scheduler stretches micro-batches unevenly; unequal micro-batches only add bubble
    in expectation, since the other stage waits for any stall on the critical path. Per rank and step the bubble
    ranged 17-36 %, so pooling the 8 rank-steps leaves a few points of noise: +8 points. Below the theory only by
    noise: with equal, constant costs (p - 1) / (m + p - 1) is a lower bound, and going under it needs the
    fill/drain micro-batches to run faster than the average ones: -3 points. The band [17, 28] % still excludes
    the neighbouring schedules (m = 8: 11.1 %, m = 2: 33.3 %, no pipelining: 50 %), so it checks that the analysis
    sees the m-dependence, not only that some bubble exists.
    """
    t = theory(extra)
    b = pipeline_bubbles(run.events, run.steps, **COMPUTE)
    measured = overall_pct(b)
    assert t - BELOW_PP <= measured <= t + ABOVE_PP, f"bubble {measured:.1f} % vs GPipe theory {t:.1f} %"
    per_rank = b.group_by("rank").agg(pct=100.0 * pl.col("bubble_ns").sum() / pl.col("step_ns").sum())
    for rank, pct in per_rank.iter_rows():
        assert t - RANK_BELOW_PP <= pct <= t + RANK_ABOVE_PP, f"rank {rank}: {pct:.1f} % vs {t:.1f} %"


def test_default_patterns_see_the_bubble(run, extra):
    """The default patterns match the schedule's ``Forward <i>`` / ``Backward <i>`` too; their receive waits
    (``gloo:recv``) and send calls (``c10d::send``) are taken out of the work (``p2p_wait_ns``), so the bubble
    agrees with the compute-only one.

    Recorded: 23.6 % (default) vs 23.7 % (compute-only); before the p2p waits were taken out it was 5.7 %, with
    the receives only 23.1 %. What is left between the two is host bookkeeping inside the schedule's ranges
    (chunking, posting receives), which the default patterns count as work: at most 2 points. The send calls
    matter under load: on a busy host one can hold the thread for a quarter of the step (the zoo's
    pipeline_bubble at load average 10: 61 ms of a 218 ms step), and counted as work they pushed one stage's
    bubble under the finding's threshold.
    """
    t = theory(extra)
    b = pipeline_bubbles(run.events, run.steps)
    assert (b["p2p_wait_ns"] > 0).all()
    measured = overall_pct(b)
    assert t - BELOW_PP <= measured <= t + ABOVE_PP, f"default patterns: {measured:.1f} % vs theory {t:.1f} %"
    compute_only = overall_pct(pipeline_bubbles(run.events, run.steps, **COMPUTE))
    assert abs(measured - compute_only) <= 2.0


def test_p2p_is_not_a_collective_mismatch(run):
    instances = collective_instances(match_collectives(run.collectives))
    assert instances["p2p"].all()                    # the pipeline's only communication is send/recv
    found = collective_findings(instances)
    assert [f for f in found if f.kind == "collective_mismatch"] == []


def _start_offsets(run) -> dict[int, int]:
    """Per profiled step: rank 0's step start minus rank 1's (ns)."""
    st = run.steps.with_columns(pl.col("source").cast(pl.String)).filter(pl.col("source") == "profiler")
    wide = st.pivot(on="rank", index="step", values="start").sort("step")
    return {row[0]: row[1] - row[2] for row in wide.select("step", "0", "1").iter_rows()}


def test_stage0_lateness_is_the_gpipe_drain(run, extra):
    """Stage 0 starts every step after stage 1 by the length of its own last backward of the previous step: GPipe's
    drain (stage 1 finishes its backwards first, stage 0 runs the last one after it), not a slow rank.
    Recorded: offsets 171 / 164 / 123 / 245 ms against last backwards of 178 / 177 / 137 / 232 ms."""
    last = f"backward_mb{extra['microbatches'] - 1}"
    bwd = run.events.filter((pl.col("rank") == 0) & (pl.col("name").cast(pl.String) == last))
    last_bwd = dict(bwd.select("step", "dur").iter_rows())
    offsets = _start_offsets(run)
    pairs = [(offsets[s], last_bwd[s - 1]) for s in offsets if s - 1 in last_bwd]
    assert len(pairs) >= 3
    for offset, drain in pairs:
        assert offset > 0 and abs(offset - drain) <= 0.25 * drain + 20_000_000, (offset, drain)


def test_no_straggler_on_balanced_pipeline(run):
    from workbench.analyses.summary import analysis_tables

    found = analysis_tables(run).findings
    assert found.filter(pl.col("kind") == "straggler").is_empty()
