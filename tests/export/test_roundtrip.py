"""Both formats written and read back on a run of every bundled kind: every event at its rank and time to the
nanosecond, steps, compiles, collectives, Flight Recorder entries, proper nesting on every track, every wait joined
to the collective it waited for, every finding drawn (workbench.export.readback.check)."""

from __future__ import annotations

import pytest

import workbench
from workbench.export import export_run
from workbench.export.model import Selection
from workbench.export.readback import check, read, read_chrome, read_perfetto

#: One run of every bundled kind: CPU gloo, 2-GPU NCCL (DDP, planted faults), pipeline (CPU, GPU), FSDP2 (CPU, GPU).
KINDS = ("cpu-gloo-4rank", "h200x2-ddp-nccl", "h200x2-planted", "cpu-gloo-pipeline", "h200x2-pipeline",
         "cpu-gloo-fsdp2", "h200x2-fsdp2")

FORMATS = ("run.pftrace", "run.json.gz")


def _roundtrip(run, path, selection=None):
    summary = export_run(run, path, selection=selection)
    rb = read(path)
    problems, counts = check(run, rb, selection)
    assert problems == [], "\n".join(problems)
    return summary, rb, counts


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("out", FORMATS)
def test_every_bundled_kind_reads_back_exactly(tmp_path, sample_run, name, out):
    run = sample_run(name)
    summary, rb, counts = _roundtrip(run, tmp_path / out)
    assert counts["events"] == run.count("events") > 0          # every Kineto event, none dropped
    assert counts["steps"] == run.steps.height
    assert counts["collectives"] == run.collectives.height > 0
    assert counts["compiles"] == run.compiles.filter(run.compiles["start"].is_not_null()).height
    assert counts["findings"] > 0 and summary["findings_drawn"] == counts["findings"]
    assert {p - 1 for p in rb.processes if p < 1_000_000_000} == set(run.ranks["rank"].to_list())
    multi = "pipeline" not in name                               # point-to-point calls are not paired into waits
    assert (counts["flows"] > 0) == multi
    assert "other ranks waited for this" not in set(rb.slices["track_name"].to_list())  # flows end on collectives
    assert rb.metadata["clock"]["aligned"] is False             # every sample ran on one host
    assert rb.metadata["findings"] and "fixes" in rb.metadata


def test_the_planted_faults_are_drawn_with_their_labels(tmp_path, sample_run):
    rb = read_perfetto(_roundtrip(sample_run("h200x2-planted"), tmp_path / "p.pftrace")[0]["path"])
    names = rb.slices.filter(rb.slices["cat"] == "workbench.finding")["name"].to_list()
    assert any(n.startswith("root cause: divergent recompile, rank 1, 2.") and n.endswith(" s") for n in names)
    assert any(n.startswith("root cause: straggler, rank 0") for n in names)
    assert any(n.startswith("symptom: ") for n in names)
    tracks = rb.slices.filter(rb.slices["cat"] == "workbench.finding")["track_name"].to_list()
    assert tracks[0] != tracks[1]                                # each finding on its own track
    procs = sorted(p["name"] for p in rb.processes.values())
    assert procs == ["rank 0 · vm · NVIDIA H200", "rank 1 · vm · NVIDIA H200"]


@pytest.mark.parametrize("out", FORMATS)
def test_ranks_and_steps_selection(tmp_path, sample_run, out):
    run = sample_run("cpu-gloo-4rank")
    sel = Selection.parse("1-3", "6-7")
    summary, rb, counts = _roundtrip(run, tmp_path / out, sel)
    assert summary["ranks"] == [1, 2, 3]
    assert sorted({p - 1 for p in rb.processes if p < 1_000_000_000}) == [1, 2, 3]
    steps = rb.slices.filter(rb.slices["cat"] == "workbench.step")["name"].unique().sort().to_list()
    assert steps == ["step 6", "step 7"]
    assert 0 < counts["events"] < run.count("events")
    assert counts["flows"] > 0                                   # waits among ranks 1-3 only


@pytest.mark.slow
@pytest.mark.parametrize("out", FORMATS)
def test_hang_run_from_the_zoo(tmp_path, hang_run, out):
    run = workbench.open(hang_run)
    summary, rb, counts = _roundtrip(run, tmp_path / out)
    assert counts["flight_recorder"] > 0 and counts["steps"] > 0
    assert counts["events"] == 0                                 # no profiler window: steps and dumps only
    roots = [f["kind"] for f in rb.metadata["findings"]]
    assert roots and roots[0] == "desync"
    assert any(n.startswith("root cause: desync, rank 1")
               for n in rb.slices.filter(rb.slices["cat"] == "workbench.finding")["name"].to_list())


def test_json_is_read_by_the_workbench_kineto_reader(tmp_path, sample_run):
    run = sample_run("h200x2-ddp-nccl")
    export_run(run, tmp_path / "r.json")
    rb = read_chrome(tmp_path / "r.json")
    kernels = rb.slices.filter(rb.slices["cat"] == "kernel")
    assert kernels.height == run.kernels.filter(run.kernels["kind"].cast(str) == "kernel").height
    assert rb.problems == []
