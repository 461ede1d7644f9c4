import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import kernels_frame, steps_frame
from typer.testing import CliRunner

from workbench.analyses.findings import Cost, findings_frame, make_finding, sort_findings, within_root
from workbench.analyses.kinds import ClockOffsetEvidence, CollectiveMismatchEvidence
from workbench.analyses.summary import analysis_tables, analyze
from workbench.cli import app
from workbench.schema import FINDINGS

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "hta" / "trace_filter"


def _run(comm_ns):
    k = kernels_frame([
        {"start": 0, "end": 100},
        {"start": 100, "end": 100 + comm_ns, "kernel_class": "communication"},
        {"start": 1000, "end": 1100, "step": 2},
        {"start": 5000, "end": 5001, "step": 3},
    ])
    s = steps_frame([{"step": i, "start": 1000 * i, "end": 1000 * i + 1000} for i in (1, 2, 3)])
    return SimpleNamespace(kernels=k, steps=s)


def test_findings_order_divergence_first_then_measured_then_estimated_by_cost():
    ev = ClockOffsetEvidence(())
    a = make_finding("clock_offset", "m", ev, Cost.measured(5, "x"), ranks=[0], wall_ns=10**6)
    b = make_finding("collective_mismatch", "m", CollectiveMismatchEvidence("missing", 1, ()), Cost.none(),
                     wall_ns=10**6)
    c = make_finding("clock_offset", "m", ev, Cost.measured(50, "x"), ranks=[1], wall_ns=10**6)
    d = make_finding("clock_offset", "m", ev, Cost.estimated(500, "a guess"), ranks=[2], wall_ns=10**6)
    e = make_finding("clock_offset", "m", ev, Cost.none(), ranks=[3], wall_ns=10**6)
    f = sort_findings([e, d, a, b, c])
    # ranks may run different programs > measured costs (most costly first) > estimated > no cost
    assert [x.id for x in f] == [b.id, c.id, a.id, d.id, e.id]
    frame = findings_frame(f)
    assert dict(frame.schema) == FINDINGS and frame["is_root"].all()
    assert frame["cost_basis"].to_list() == ["measured", "measured", "measured", "estimated", "measured"]


def test_analyze_on_tables_without_files():
    s = analyze(_run(400))
    r = s["ranks"]["0"]
    assert r["exposed_comm_pct"] == pytest.approx(100 * 400 / 1100, abs=0.01)
    assert r["comm_compute_overlap_pct"] == 0.0 and r["compute_pct"] is not None
    assert any(f["kind"] == "exposed_communication" for f in s["findings"])
    t = analysis_tables(_run(400))
    assert {"breakdown", "overlap", "idle_gaps", "collective_instances", "stragglers", "findings"} <= set(t.names())


def test_cli_analyze_json():
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
    top = out["findings"][0]
    assert top["cost"]["basis"] in ("measured", "estimated") and top["cost"]["method"] and "symptoms" in top


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


def test_analyze_text_tells_symptoms_within_their_root_and_notes_apart(capsys):
    """The printed story agrees with the app's: a symptom measured over a wider window than its root cause reads
    the root's time (its own said beside it), and a zero-cost info finding is a note, not a numbered root cause."""
    from workbench.analyses.findings import findings_to_dicts
    from workbench.commands.analyze import print_summary

    ev = ClockOffsetEvidence(())
    sym = make_finding("clock_offset", "symptom", ev, Cost.measured(2_640_000_000, "own window"), key="s")
    bare = make_finding("clock_offset", "root", ev, Cost.measured(2_630_000_000, "root"), key="r",
                        wall_ns=10_000_000_000)
    root = make_finding("clock_offset", "root", ev, Cost.measured(2_630_000_000, "root"), key="r",
                        symptoms=[within_root(sym, bare)], wall_ns=10_000_000_000)   # as rootcause assembles it
    note = make_finding("clock_offset", "note", ev, Cost.none("a trend"), key="n")
    print_summary({"window": "steady", "ranks": {}, "findings": findings_to_dicts([root, note])}, Path("run"))
    out = capsys.readouterr().out
    assert "1. [" in out and "2. [" not in out
    assert "└ [" in out and "2.63 s measured (own window; within its root cause's cost (measured alone over its own " \
        "window: 2.64 s))" in " ".join(out.split())
    notes = out.split("Also noticed, costing no time:")[1]
    assert "no time cost (a trend)" in notes and "0 ns" not in out
