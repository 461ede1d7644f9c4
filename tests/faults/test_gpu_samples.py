"""The GPU faults, recorded on one H200 by ``bench/faults_gpu.sh`` into ``sample_traces/gpu-*``, checked from the
recording: the planted kind is found on the right rank with its cost (the launch gaps inside the profiled steps)
within 25 % of the script's own measurement over the same steps (step body less the same step replayed as a CUDA
graph); the launch-bound fix the recommender writes for that run is the config the rerun applied, and the rerun
has no launch gaps left (no launch-bound finding; the script's own timers agree); the pageable copy gets a code
fix, never a setting."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")

from workbench_zoo.registry import get_fault, script_path  # noqa: E402
from workbench_zoo.verify import COST_TOLERANCE, check_found, fix_written, gone_on_rerun, roots_of  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
LB_BEFORE, LB_AFTER, H2D = (SAMPLES / "gpu-launch-bound-before", SAMPLES / "gpu-launch-bound-after",
                             SAMPLES / "gpu-pageable-h2d")


def _need(path: Path) -> Path:
    if not (path / "run.json").is_file():
        pytest.skip(f"{path} not recorded (bench/faults_gpu.sh on a GPU machine)")
    return path


@pytest.fixture(scope="module")
def launch_bound():
    before, after = _need(LB_BEFORE), _need(LB_AFTER)
    return before, after, roots_of(before), roots_of(after)


def test_launch_bound_found_and_costed(launch_bound):
    before, _, roots, _ = launch_bound
    truth = json.loads((before / "ground_truth.json").read_text())
    found = check_found(get_fault("launch_bound"), roots, truth)
    assert found.position == 0, [f.kind for f in roots]
    assert found.finding.kind == "launch_bound" and found.ranks_ok and found.cost_basis == "measured"
    assert found.finding.steps and set(found.finding.steps) <= set(map(int, truth["cost_by_rank_step_ns"]["0"]))
    assert found.cost_error is not None and found.cost_error <= COST_TOLERANCE, (found.cost_ns, found.truth_ns)
    row = found.finding.evidence.per_rank[0]       # the cost is the launch gaps, not the idle between steps
    assert found.cost_ns == row["launch_gap_ns"] < row["idle_ns"]


def test_launch_bound_fix_is_the_applied_config_and_it_worked(launch_bound):
    from workbench.analyses.recommendations import recommend

    before, after, roots, after_roots = launch_bound
    recs = recommend(roots)
    fault = get_fault("launch_bound")
    assert fix_written(fault, recs) == "config compile.mode='reduce-overhead'"
    applied_cfg = tomllib.loads((LB_BEFORE / "fixes.toml").read_text())
    written = {}
    for c in recs.filter(pl.col("apply"))["config"].to_list():
        for sec, body in json.loads(c).items():
            written.setdefault(sec, {}).update(body)
    assert written == applied_cfg
    meta = json.loads((after / "run.json").read_text())
    assert all(r["applied"] for r in meta["compile_config_applied"]), meta["compile_config_applied"]
    ok, detail = gone_on_rerun(fault, None, after_roots, after)
    assert ok, detail
    # what idle is left is between the steps (loop, synchronisation, the profiler's step), none inside them
    idle = [f for f in after_roots if f.kind == "gpu_idle" and f.ranks == (0,)]
    assert all(f.evidence.per_rank[0]["launch_gap_ns"] == 0 for f in idle), [f.message for f in idle]
    # and the script's own timers agree: the step now costs what its CUDA-graph replay costs
    per_step = {d: json.loads((d / "ground_truth.json").read_text())["launch_cost_per_step_ns"] for d in (before, after)}
    assert per_step[after] < 0.1 * per_step[before], per_step


def test_pageable_copy_found_with_a_code_fix():
    from workbench.analyses.recommendations import recommend

    before = _need(H2D)
    roots = roots_of(before)
    truth = json.loads((before / "ground_truth.json").read_text())
    fault = get_fault("pageable_h2d")
    found = check_found(fault, roots, truth)
    assert found.position is not None, [f.kind for f in roots]
    assert found.cost_error is not None and found.cost_error <= COST_TOLERANCE, (found.cost_ns, found.truth_ns)
    recs = recommend(roots).filter(pl.col("finding_kind") == "exposed_memcpy")
    assert recs.height and recs.row(0, named=True)["code_advice"] and not recs["apply"].any()
    assert fix_written(fault, recommend(roots)).startswith("code (pin_memory")


def test_pageable_copy_fix_names_the_copy_line():
    """The recording predates ``source_sites`` in run.json, so the line cannot come from it: the script is scanned
    now at its step (as the collector does at close), and the copy line it names must be the one the recording's
    own ground truth marked then (same line number: the script has not moved that line since)."""
    from workbench.analyses.recommendations import recommend
    from workbench_zoo.truth import fix_line
    from workbench_zoo.verify import script_sites, source_sites_of

    before = _need(H2D)
    assert source_sites_of(before) is None, "recorded with source_sites now: check the recorded sites instead"
    recorded = json.loads((before / "ground_truth.json").read_text())["line"]
    now = fix_line(str(script_path("pageable_h2d")))
    assert recorded.rsplit(":", 1)[1] == now.rsplit(":", 1)[1], (recorded, now)
    first = recommend(roots_of(before), sites=script_sites("pageable_h2d")).filter(
        pl.col("finding_kind") == "exposed_memcpy").row(0, named=True)
    assert first["fix_id"] == "pin_memory" and first["location"] == now, first
