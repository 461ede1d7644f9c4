"""The zoo's GPU idle faults (``zoo/workbench_zoo/faults/gpu_*.py``) as recorded on two GPUs (H200 into
``tests/data/gpu_idle/*`` and ``sample_traces/gpu-*``; H100 into ``tests/data/gpu_idle_h100/*``; torch 2.11; each with
the script's own ``ground_truth.json``): the planted
cause is found with its kind, its line (the fault script's ``# fix here`` line, compared by file name and line: the
recording's paths are the device's), its cost within 25 % of the script's measurement, and a code fix that acts on
it; the clean run (and the one-``.cpu()``-a-step run, which costs nothing measurable on this model) gets no cause
finding of medium/high severity, and its launch-bound finding is worded as the model's own nature.

Costs are compared per planted step over the steps whose previous step is recorded too (the idle before a profiler
window's first step is not in the trace: the kernel before it is not) and never the window's last step (its period
holds the profiler's stop and export). The H200 recordings predate the collector's scan of sync calls and
optimizer flags, so their line is taken from that scan run now on the same script (``collectors/source_sites.scan``);
the H100 ones carry it in their own run.json."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.kinds import Kind
from workbench.analyses.recommendations import recommend
from workbench.analyses.summary import analysis_tables

ROOT = Path(__file__).resolve().parents[2]
#: Recording set → where its runs are: the H200 set (recorded before the collector noted call sites, so its lines
#: come from the scan run now) and the H100 set (each run's own ``source_sites``).
SETS = {"h200": (ROOT / "tests" / "data" / "gpu_idle", ROOT / "sample_traces"),
        "h100": (ROOT / "tests" / "data" / "gpu_idle_h100",)}
SCRIPT = ROOT / "zoo" / "workbench_zoo" / "faults" / "_gpu_idle.py"
TOLERANCE = 0.25
#: fault → (kind, fix id).
EXPECT = {"gpu_item_sync": (Kind.HOST_SYNC, "defer_sync"),
          "gpu_unfused_optimizer": (Kind.UNFUSED_OPTIMIZER, "fused_optimizer"),
          "gpu_cpu_dataload": (Kind.DATA_LOADING, "loader_workers")}


def recordings(places: tuple[Path, ...]) -> dict[str, Path]:
    """Fault name → its recorded run directory in ``places`` (those present)."""
    out = {}
    for d in sorted(p for place in places for p in place.iterdir() if p.is_dir()):
        for name in ("ground_truth.json", "truth.json"):
            f = d / name
            if f.is_file() and (d / "run.json").is_file():
                out[json.loads(f.read_text()).get("fault")] = d
                break
    return out


def _truth(d: Path) -> dict:
    f = d / "ground_truth.json"
    return json.loads((f if f.is_file() else d / "truth.json").read_text())


def _need(fault: str, recording_set: str) -> Path:
    d = recordings(SETS[recording_set]).get(fault)
    assert d is not None, f"{fault}: no {recording_set} recording in the repository"
    return d


def _scan():
    from workbench.collectors.source_sites import scan

    lines = SCRIPT.read_text().splitlines()
    return scan(str(SCRIPT), next(i for i, line in enumerate(lines, 1) if "with collector.step():" in line))


def score(d: Path, kind: Kind) -> dict:
    """The finding of ``kind`` on a recording against its truth: per-step cost error, line, fix."""
    from workbench.analyses.idle_findings import site_of

    truth = _truth(d)
    roots = list(analysis_tables(workbench.open(d)).roots)
    found = [f for f in roots if f.kind == kind]
    by_step = {int(s): int(v) for s, v in (truth.get("cost_by_rank_step_ns") or {}).get("0", {}).items()}
    out = {"roots": roots, "finding": found[0] if found else None, "truth": truth}
    if found:
        f = found[0]
        last = max(by_step) if by_step else None
        common = sorted(s for s in set(by_step) & set(f.evidence.by_step) if s - 1 in f.evidence.by_step and s != last)
        t = sum(by_step[s] for s in common)
        c = sum(f.evidence.by_step[s] for s in common)
        out.update(common=common, truth_ns=t, cost_ns=c, error=abs(c - t) / t if t else None)
        site = f.evidence.site
        if site is None:
            got = site_of(f.evidence.cause, f.evidence.label, _scan())
            site = got.location if got else None
        out["site"] = site
        recs = recommend(roots)
        out["fix"] = recs.filter(pl.col("finding_kind") == kind.value)["fix_id"].to_list()
    return out


@pytest.mark.parametrize("recording_set", sorted(SETS))
@pytest.mark.parametrize("fault", sorted(EXPECT))
def test_recorded_fault_cause_line_cost_and_fix(fault, recording_set):
    d = _need(fault, recording_set)
    kind, fix = EXPECT[fault]
    got = score(d, kind)
    f = got["finding"]
    assert f is not None, [(g.kind, g.cost_ns) for g in got["roots"]]
    if recording_set == "h100":   # the collector noted the line itself
        assert f.evidence.site is not None, f.evidence
    assert got["common"], (f.evidence.by_step, got["truth"].get("cost_by_rank_step_ns"))
    assert got["error"] is not None and got["error"] <= TOLERANCE, (got["cost_ns"], got["truth_ns"])
    line = got["truth"].get("line")
    assert got["site"] and Path(got["site"]).name == Path(line).name, (got["site"], line)
    assert got["fix"] and got["fix"][0] == fix


@pytest.mark.parametrize("recording_set", sorted(SETS))
@pytest.mark.parametrize("fault", ["gpu_clean", "gpu_dtoh_sync"])
def test_controls_get_no_cause_and_the_models_own_nature(fault, recording_set):
    d = _need(fault, recording_set)
    roots = list(analysis_tables(workbench.open(d)).roots)
    assert not [f for f in roots if f.kind in (Kind.HOST_SYNC, Kind.UNFUSED_OPTIMIZER, Kind.DATA_LOADING)
                and f.severity in ("high", "medium")]
    for f in roots:
        if f.kind in (Kind.LAUNCH_BOUND, Kind.HOST_BOUND):
            assert "the model's own launch-bound nature" in f.message
