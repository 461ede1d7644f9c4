"""The zoo's GPU idle faults (``zoo/workbench_zoo/faults/gpu_*.py``) as recorded on a GPU into ``sample_traces/gpu-*``
(each with the script's own ``ground_truth.json``): the planted cause is found with its kind, its line (the fault
script's ``# fix here`` line), its cost within 25 % of the script's measurement over the same planted steps, and a
code fix that acts on it; the clean run gets no cause finding and its launch-bound finding is worded as the model's
own nature. Skipped until the recordings are in the repository."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.kinds import Kind
from workbench.analyses.recommendations import recommend
from workbench.analyses.summary import analysis_tables

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TOLERANCE = 0.25
#: fault → (kind, fix id).
EXPECT = {"gpu_item_sync": (Kind.HOST_SYNC, "defer_sync"), "gpu_dtoh_sync": (Kind.HOST_SYNC, "defer_sync"),
          "gpu_unfused_optimizer": (Kind.UNFUSED_OPTIMIZER, "fused_optimizer"),
          "gpu_cpu_dataload": (Kind.DATA_LOADING, "loader_workers")}


def recordings() -> dict[str, Path]:
    """Fault name → its recorded run directory (those present)."""
    out = {}
    for d in sorted(SAMPLES.glob("gpu-*")):
        for name in ("ground_truth.json", "truth.json"):
            f = d / name
            if f.is_file() and (d / "run.json").is_file():
                out[json.loads(f.read_text()).get("fault")] = d
                break
    return out


def _truth(d: Path) -> dict:
    f = d / "ground_truth.json"
    return json.loads((f if f.is_file() else d / "truth.json").read_text())


def _need(fault: str) -> Path:
    d = recordings().get(fault)
    if d is None:
        pytest.skip(f"{fault} not recorded yet (sample_traces/gpu-*)")
    return d


def score(d: Path, kind: Kind) -> dict:
    """The finding of ``kind`` on a recording against its truth: cost error over the planted steps, line, fix."""
    truth = _truth(d)
    roots = list(analysis_tables(workbench.open(d)).roots)
    found = [f for f in roots if f.kind == kind]
    by_step = {int(s): int(v) for s, v in (truth.get("cost_by_rank_step_ns") or {}).get("0", {}).items()}
    out = {"roots": roots, "finding": found[0] if found else None, "truth": truth}
    if found:
        f = found[0]
        common = sorted(set(by_step) & set(f.evidence.by_step))
        t = sum(by_step[s] for s in common)
        c = sum(f.evidence.by_step[s] for s in common)
        out.update(common=common, truth_ns=t, cost_ns=c, error=abs(c - t) / t if t else None)
        recs = recommend(roots)
        out["fix"] = recs.filter(pl.col("finding_kind") == kind.value)["fix_id"].to_list()
    return out


@pytest.mark.parametrize("fault", sorted(EXPECT))
def test_recorded_fault_cause_line_cost_and_fix(fault):
    d = _need(fault)
    kind, fix = EXPECT[fault]
    got = score(d, kind)
    f = got["finding"]
    assert f is not None, [(g.kind, g.cost_ns) for g in got["roots"]]
    assert got["common"], (f.evidence.by_step, got["truth"].get("cost_by_rank_step_ns"))
    assert got["error"] is not None and got["error"] <= TOLERANCE, (got["cost_ns"], got["truth_ns"])
    line = got["truth"].get("line")
    if line:
        assert f.evidence.site and f.evidence.site.rsplit(":", 1)[1] == line.rsplit(":", 1)[1], (f.evidence.site, line)
    assert got["fix"] and got["fix"][0] == fix


def test_clean_recording_is_the_models_own_nature():
    d = _need("gpu_clean")
    roots = list(analysis_tables(workbench.open(d)).roots)
    assert not [f for f in roots if f.kind in (Kind.HOST_SYNC, Kind.UNFUSED_OPTIMIZER, Kind.DATA_LOADING)
                and f.severity in ("high", "medium")]
    for f in roots:
        if f.kind in (Kind.LAUNCH_BOUND, Kind.HOST_BOUND):
            assert "the model's own launch-bound nature" in f.message
