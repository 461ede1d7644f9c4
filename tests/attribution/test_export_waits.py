"""The critical path's waits drawn as flows in a trace export: each victim's wait linked to what its culprit was
doing (``analyses.critical_path.export_waits`` through ``export_run(waits=...)``), read back exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from workbench.analyses.critical_path import critical_path_of, export_waits
from workbench.export import export_run
from workbench.export.readback import check, read

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "h200x2-planted"


@pytest.mark.parametrize("out", ["run.pftrace", "run.json.gz"])
def test_engine_waits_export_as_flows_to_the_culprit(tmp_path, out):
    run = workbench.open(SAMPLE)
    cp = critical_path_of(run)
    w = export_waits(cp, run.ranks)
    attributed = cp.waits.filter(cp.waits["culprit"].is_not_null())
    assert w.height == attributed.height > 0
    assert set(zip(w["rank"].to_list(), w["on_rank"].to_list())) == set(
        zip(attributed["victim"].to_list(), attributed["culprit"].to_list()))
    assert (w["on_start"] <= w["on_end"]).all() and (w["start"] <= w["end"]).all()
    assert any("rank 0 late, waiting for its batch" in s for s in w["what"].to_list())   # the planted data stall
    path = tmp_path / out
    export_run(run, path, waits=w)
    problems, counts = check(run, read(path), waits=w)
    assert problems == [], "\n".join(problems)
    assert counts["flows"] == w.height
