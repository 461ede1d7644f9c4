"""Issue 36, requirement 4 on CPU: the idle-cause engine on real 2-rank gloo runs (torch CPU, the collector, one
profiler window) with host work planted between the ops (tests/analyses/gloo_host_work.py): a rank without a GPU
has its host op stream analysed (``idle_causes.host_op_stream``), and each plant is named with its cause, the line
of the plant, and a cost within 25 % of what the script timed around the plant itself, on every rank; the clean
control names none of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.analyses.idle_causes import HOST_STREAM
from workbench.analyses.kinds import Kind
from workbench.analyses.summary import analysis_tables

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("gloo_host_work.py")
#: Plant → the finding that must name it.
KIND = {"sync": Kind.HOST_SYNC, "optimizer": Kind.UNFUSED_OPTIMIZER, "data": Kind.DATA_LOADING}
IDLE_KINDS = set(KIND.values())
#: The cost bar of requirement 4.
COST_ERROR = 0.25


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gloo_host_work")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, str(SCRIPT), str(out), "clean", *KIND], check=True, env=env, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return out


@pytest.fixture(scope="module")
def roots(runs) -> dict[str, list]:
    """Each run's root findings (analysed once)."""
    return {k: list(analysis_tables(workbench.open(runs / k)).roots) for k in ("clean", *KIND)}


def plant_line(kind: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if f"# plant: {kind}" in line)


def proof_rows(run_dir: Path, plant: str, roots: list) -> list[dict]:
    """One row per rank: the finding that names ``plant``, its line, its cost and the script's own timing of the
    plant over the same steps."""
    rows = []
    for rank in (0, 1):
        timed = {int(s): ns for s, ns in json.loads((run_dir / "plant" / f"rank{rank}.json").read_text())[
            "plant_ns"].items()}
        f = next((f for f in roots if f.kind == KIND[plant] and f.ranks == (rank,)), None)
        assert f is not None, (plant, rank, "not named", [(f.kind, f.ranks, f.cost_ns) for f in roots])
        truth = sum(timed[s] for s in f.evidence.by_step)
        rows.append({"rank": rank, "finding": f, "cost": f.cost_ns, "truth": truth,
                     "error": abs(f.cost_ns - truth) / truth})
    return rows


@pytest.mark.parametrize("plant", list(KIND))
def test_host_work_between_ops_is_named_with_its_line_and_cost(runs, roots, plant):
    for row in proof_rows(runs / plant, plant, roots[plant]):
        f = row["finding"]
        assert f.evidence.stream == HOST_STREAM and f.evidence.cause == plant
        assert f.evidence.site == f"{SCRIPT}:{plant_line(plant)}", (f.evidence.site, plant_line(plant))
        assert len(f.evidence.by_step) >= 3, (plant, row["rank"], f.evidence.by_step)
        assert row["error"] <= COST_ERROR, (plant, row["rank"], row["cost"], row["truth"], f.evidence.by_step)
        assert "between its compute ops" in f.message


@pytest.mark.parametrize("plant", ["clean", *KIND])
def test_only_the_planted_cause_is_named(roots, plant):
    named = {f.kind for f in roots[plant] if f.kind in IDLE_KINDS}
    assert named == ({KIND[plant]} if plant in KIND else set()), [(f.kind, f.ranks, f.cost_ns) for f in roots[plant]]
