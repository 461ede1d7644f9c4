"""A skipped frame (dynamo gave the frame up: it runs eagerly) is one root cause of its own kind, costed as what
eager costs, on every torch of the matrix and in a real torch 2.13 CPU run under the collector."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workbench.analyses.kinds import Kind
from workbench.analyses.recompiles import classify_compiles, recompile_finding_list, skipped_frame_findings
from workbench.compile_log import read_compile_logs

HERE = Path(__file__).resolve().parent
MATRIX = HERE.parent / "data" / "compile_logs" / "matrix"


def _all_text(findings) -> str:
    return " ".join(f.message + " " + str(f.evidence) for f in findings)


@pytest.mark.parametrize("version", ["2.5.1", "2.7.1", "2.9.1", "2.11.0", "2.13.0", "2.15.0"])
def test_graph_break_in_loop_is_one_skipped_frame_never_a_fullgraph_failure(version: str) -> None:
    c = classify_compiles(read_compile_logs(sorted((MATRIX / version / "gb_loop").glob("*.log.gz")))[0])
    found = recompile_finding_list(c) + skipped_frame_findings(c)
    assert [f.kind for f in found] == [Kind.SKIPPED_FRAME]
    f = found[0]
    assert "fullgraph" not in _all_text(found)
    assert f.evidence.co_name == "forward" and f.cost.basis == "estimated" and "estimated" in f.cost.method
    if version != "2.5.1":   # torch 2.5 logs neither the reason nor the line
        assert f.evidence.skip_reason == "graph_break_in_loop" and f.evidence.cause_line.endswith("gb_loop.py:20")
        assert "torch.cond" in f.message
    else:
        assert f.evidence.skip_reason == "no_reason_logged"


@pytest.mark.parametrize("version", ["2.7.1", "2.9.1", "2.11.0", "2.13.0", "2.15.0"])
def test_suppressed_error_is_a_skipped_frame_and_fullgraph_failure_stays_a_failure(version: str) -> None:
    sup = classify_compiles(read_compile_logs(sorted((MATRIX / version / "suppress_errors").glob("*.log.gz")))[0])
    found = recompile_finding_list(sup) + skipped_frame_findings(sup)
    assert [f.kind for f in found] == [Kind.SKIPPED_FRAME] and found[0].evidence.skip_reason == "suppressed_error"
    fg = classify_compiles(read_compile_logs(sorted((MATRIX / version / "fail_fullgraph").glob("*.log.gz")))[0])
    failures = [f for f in recompile_finding_list(fg) if f.kind == Kind.COMPILE_FAILURE]
    assert len(failures) == 1 and not skipped_frame_findings(fg)
    assert "fullgraph=True" in failures[0].message   # the compile asked for it: a break raised into user code


@pytest.fixture(scope="module")
def eager_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eager") / "run"
    subprocess.run([sys.executable, str(HERE / "eager_frame_worker.py"), "--out", str(out)], check=True,
                   timeout=900, capture_output=True)
    return out


def test_real_run_skipped_frame_leads_in_analyze(eager_run: Path) -> None:
    """torch 2.13 CPU, the collector, a branch inside ``forward``'s loop: ``analyze`` leads with the skipped frame
    at the branch's line, costed from the profiled steps after the skip (else the steps that ran eagerly, an
    estimate labelled so), and nothing mentions fullgraph or a compile failure."""
    import workbench
    from workbench.analyses.summary import analyze

    summary = analyze(workbench.open(eager_run))
    roots = summary["findings"]
    first = roots[0]
    assert first["kind"] == Kind.SKIPPED_FRAME
    assert "eager_frame_worker.py:24" in first["message"] and "torch.cond" in first["message"]
    method = first["cost"]["method"]   # from the profiled steps after the skip, else the steps run eagerly
    assert ("profiled steps after the skip" in method) if first["cost"]["basis"] == "measured" else "upper bound" in method
    text = str(summary)
    assert "fullgraph" not in text and Kind.COMPILE_FAILURE.value not in [r["kind"] for r in roots]


def test_real_run_fix_is_at_the_branch(eager_run: Path) -> None:
    import workbench
    from workbench.analyses.recommendations import ranked_fixes_run

    run = workbench.open(eager_run)
    fixes = [r for r in ranked_fixes_run(run, run.findings()) if r.finding.kind == Kind.SKIPPED_FRAME]
    assert fixes and fixes[0].fix.fix_id == "branchless_in_loop"
    assert fixes[0].fix.location.endswith("eager_frame_worker.py:24") and not fixes[0].fix.config


#: The zoo's gpu_eager_frame recorded on an H200 (bundled) and on an H100 (its call sites noted by the collector).
GPU_RUNS = {"h200": HERE.parents[1] / "sample_traces" / "gpu-eager-frame",
            "h100": HERE.parents[1] / "tests" / "data" / "gpu_idle_h100" / "eager_frame"}


@pytest.mark.parametrize("gpu", sorted(GPU_RUNS))
def test_gpu_recording_leads_with_the_skipped_frame_in_analyze_and_report(gpu: str) -> None:
    """The GPU recordings (torch 2.11, the zoo's gpu_eager_frame: a branch inside ``forward``'s loop from step 12):
    the skipped frame is the first root cause, at the planted line, costed from the profiled steps after the skip
    against those before it, within a factor 2 of the script's CUDA-event truth (steps 17-19; step 20 also holds the
    profiler's export), with the launch-bound idle under it; nothing says fullgraph."""
    import json

    import workbench
    from workbench.analyses.summary import analyze
    from workbench.report import build_report

    truth = json.loads((GPU_RUNS[gpu] / "ground_truth.json").read_text())
    run = workbench.open(GPU_RUNS[gpu])
    first = analyze(run)["findings"][0]
    assert first["kind"] == Kind.SKIPPED_FRAME and first["cost"]["basis"] == "measured"
    assert "_gpu_idle.py:76" in first["message"] and truth["line"].endswith("_gpu_idle.py:76")
    want = sum(truth["cost_by_rank_step_ns"]["0"][s] for s in ("17", "18", "19"))
    assert want / 2 <= first["cost_ns"] <= want * 2, (first["cost_ns"], want)
    assert [s["kind"] for s in first["symptoms"]] == [Kind.LAUNCH_BOUND]
    assert "fullgraph" not in json.dumps(analyze(run))
    rep = build_report(run, timeline=False).to_json()
    text = json.dumps(rep, default=str)
    assert text.find(Kind.SKIPPED_FRAME.value) < text.find(Kind.COMPILING.value) or Kind.COMPILING.value not in text
