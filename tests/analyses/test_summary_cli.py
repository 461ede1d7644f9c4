import json
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from conftest import kernels_frame, steps_frame
from typer.testing import CliRunner

from workbench.analyses.diff import diff_findings, diff_summaries
from workbench.analyses.findings import finding, findings_frame, rank_findings
from workbench.analyses.summary import analysis_tables, analyze
from workbench.cli import app
from workbench.schema import FINDINGS

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACE = SHARED / "traces" / "hta" / "trace_filter"


def _run(comm_ns):
    k = kernels_frame([
        {"start": 0, "end": 100},
        {"start": 100, "end": 100 + comm_ns, "kernel_class": "communication"},
        {"start": 1000, "end": 1100, "step": 2},
        {"start": 5000, "end": 5001, "step": 3},
    ])
    s = steps_frame([{"step": i, "start": 1000 * i, "end": 1000 * i + 1000} for i in (1, 2, 3)])
    return SimpleNamespace(kernels=k, steps=s)


def test_rank_findings_orders_by_cost_then_severity():
    f = rank_findings([
        findings_frame([finding("a", "low", "m", "t", cost_ns=5), finding("b", "high", "m", "t", cost_ns=5)]),
        findings_frame([finding("c", "info", "m", "t", cost_ns=50, ranks=[1], evidence={"x": 1})]),
        None,
    ])
    assert f["kind"].to_list() == ["c", "b", "a"]
    assert dict(f.schema) == FINDINGS


def test_analyze_on_tables_without_files():
    s = analyze(_run(400))
    r = s["ranks"]["0"]
    assert r["exposed_comm_pct"] == pytest.approx(100 * 400 / 1100, abs=0.01)
    assert r["comm_compute_overlap_pct"] == 0.0 and r["compute_pct"] is not None
    assert any(f["kind"] == "exposed_communication" for f in s["findings"])
    t = analysis_tables(_run(400))
    assert {"breakdown", "overlap", "idle_gaps", "collective_instances", "stragglers", "findings"} <= set(t)


def test_diff_direction_and_size():
    before, after = analyze(_run(400)), analyze(_run(100))
    d = diff_summaries(before, after)
    row = d.filter((pl.col("scope") == "job") & (pl.col("metric") == "exposed_comm_pct")).row(0, named=True)
    assert row["direction"] == "better" and row["delta"] < 0
    row = d.filter((pl.col("scope") == "job") & (pl.col("metric") == "comm_ns")).row(0, named=True)
    assert row["delta_pct"] == pytest.approx(-75.0)
    same = diff_summaries(before, before)
    assert set(same["direction"].to_list()) <= {"same", "n/a"}
    k = diff_findings(before, after)
    assert k.filter(pl.col("kind") == "exposed_communication")["status"][0] in ("better", "fixed")


@pytest.mark.skipif(not TRACE.is_dir(), reason=f"{SHARED} (the shared traces) is absent")
def test_cli_analyze_json_and_diff():
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(TRACE), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for rank in ("0", "1"):
        for key in ("compute_pct", "idle_pct", "comm_compute_overlap_pct", "exposed_comm_pct"):
            assert isinstance(out["ranks"][rank][key], float)
    assert out["ranks"]["0"]["comm_compute_overlap_pct"] == pytest.approx(11.81, abs=0.01)
    assert isinstance(out["findings"], list) and out["findings"]
    assert runner.invoke(app, ["analyze", str(TRACE), "--window", "all", "--json"]).exit_code == 0
    assert runner.invoke(app, ["analyze", str(TRACE), "--window", "bogus"]).exit_code != 0
    res = runner.invoke(app, ["diff", str(TRACE), str(TRACE), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert {m["direction"] for m in d["metrics"]} <= {"same", "n/a"}


SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu-gloo-4rank"


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_traces/cpu-gloo-4rank not recorded yet")
def test_cpu_gloo_sample_names_the_straggler():
    res = CliRunner().invoke(app, ["analyze", str(SAMPLE), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out["ranks"]) == {"0", "1", "2", "3"}
    stragglers = [f for f in out["findings"] if "straggler" in f["kind"]]
    assert [f["ranks"] for f in stragglers] == [[2]]
    assert stragglers[0]["cost_ns"] > 0 and "data loading" in stragglers[0]["message"]
    assert out["collectives"]["instances"] >= 3 and out["collectives"]["mismatched"] == 0
