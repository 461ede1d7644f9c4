"""Reading a run directory laid out as docs/run-directory.md says (hand-made here; the collectors' tests make real ones)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

import workbench
from workbench import rundir


def _make_run(root: Path, data: Path) -> Path:
    run = root / "exp"
    rundir.write_json(run / rundir.RUN_JSON, {"run_id": "x", "world_size": 3, "argv": ["train.py"]})
    for rank in (0, 1):
        trace_dir = run / rundir.TRACE_DIR.format(rank=rank)
        trace_dir.mkdir(parents=True)
        shutil.copyfile(data / f"traces/hta/trace_filter/sampled_rank-{rank}.json.gz", trace_dir / "window0.json.gz")
        steps = run / rundir.STEPS_JSONL.format(rank=rank)
        for step in range(4):
            start = 1_000_000_000 * step
            rundir.append_jsonl(steps, {"step": step, "start_ns": start, "end_ns": start + 900_000_000 + rank,
                                        "data_wait_ns": 1000, "profiled": step == 2})
            rundir.append_jsonl(steps, {"step": step, "device_ns": 800_000_000})
        with steps.open("ab") as f:  # a line cut by a kill
            f.write(b'{"step": 4, "start_ns": 40')
        rundir.write_json(run / rundir.FINGERPRINT.format(rank=rank), {
            "host": "node0", "rank": rank, "local_rank": rank,
            "versions": {"python": "3.11.7", "torch": "2.13.0", "nccl": None},
            "device": {"name": "cpu"}, "env": {"TORCH_LOGS": "+dynamo"}, "config_hash": "abc",
        })
    return run


def test_run_directory(tmp_path: Path, data_dir: Path) -> None:
    path = _make_run(tmp_path, data_dir)
    run = workbench.open(path)
    assert run.ranks.get_column("rank").to_list() == [0, 1]
    assert run.ranks.get_column("rank_source").to_list() == ["run directory"] * 2
    assert run.world_size == 3
    assert any("ranks missing from the run: 2" in p for p in run.problems)
    coll = run.steps.filter(pl.col("source") == "collector")
    assert coll.height == 8
    row = coll.filter((pl.col("rank") == 1) & (pl.col("step") == 2)).row(0, named=True)
    assert row["dur"] == 900_000_001 and row["device_ns"] == 800_000_000 and row["profiled"] is True
    assert run.steps.filter(pl.col("source") == "profiler").height == 4
    cut = run.skipped.filter(pl.col("reason").str.contains("steps.jsonl"))
    assert cut.get_column("count").to_list() == [1, 1]
    fp = run.fingerprints.sort("rank")
    assert fp.get_column("torch").to_list() == ["2.13.0", "2.13.0"]
    assert json.loads(fp.row(0, named=True)["env"]) == {"TORCH_LOGS": "+dynamo"}
    assert run.ranks.get_column("torch_version").to_list() == ["2.13.0", "2.13.0"]
    assert run.meta["argv"] == ["train.py"]


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.json"
    rundir.write_json(target, {"x": 1})
    rundir.write_json(target, {"x": 2})
    assert json.loads(target.read_text()) == {"x": 2}
    assert [p.name for p in target.parent.iterdir()] == ["b.json"]


def test_lost_step_records_become_one_skipped_row_and_the_steps_around_them_stay(tmp_path: Path) -> None:
    """The step writer's ``lost_records`` lines (it fell behind the loop) are said per file, summed, in
    ``workbench info``'s "not kept"; a bad one counts as an unreadable line; every step row is kept."""
    from workbench.run import STEP_RECORDS_LOST

    steps = tmp_path / rundir.STEPS_JSONL.format(rank=1)
    steps.parent.mkdir()
    for line in ({"step": 0, "start_ns": 0, "end_ns": 5}, {"lost_records": 40, "lost_after_step": 0},
                 {"step": 41, "start_ns": 410, "end_ns": 415}, {"lost_records": 2, "lost_after_step": 41},
                 {"step": 44, "start_ns": 440, "end_ns": 445}, {"lost_records": "many"}):
        rundir.append_jsonl(steps, line)
    run = workbench.open(tmp_path)
    assert run.steps.filter(pl.col("source") == "collector").get_column("step").to_list() == [0, 41, 44]
    assert sorted(run.skipped.rows()) == [(1, str(steps), STEP_RECORDS_LOST, 42),
                                          (1, str(steps), "steps.jsonl line incomplete or unreadable", 1)]
    assert run.info()["skipped"][STEP_RECORDS_LOST] == 42
