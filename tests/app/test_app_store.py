"""The app's server side without a browser: run discovery, caching, error capture, Apply's safety, relayout parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import rundir
from workbench.app.page_timeline import parse_relayout
from workbench.app.store import RunStore, RunUnavailable, find_runs


def _trace_dir(path: Path, name: str = "rank0.json") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text('{"traceEvents": []}')
    return path


def test_find_runs_walks_folders_of_runs(tmp_path):
    _trace_dir(tmp_path / "a")
    (tmp_path / "b" / "rank0").mkdir(parents=True)
    (tmp_path / "b" / rundir.RUN_JSON).write_text("{}")
    _trace_dir(tmp_path / "group" / "c")
    (tmp_path / "empty").mkdir()
    entries = find_runs([tmp_path])
    assert [e.id for e in entries] == ["a", "b", "group-c"]
    assert [e.is_run_dir for e in entries] == [False, True, False]
    # a root that is itself a run, and a missing root (listed, shown broken)
    entries = find_runs([tmp_path / "a", tmp_path / "missing"])
    assert [e.id for e in entries] == ["a", "missing"]


def test_duplicate_names_get_unique_ids(tmp_path):
    _trace_dir(tmp_path / "x" / "run")
    _trace_dir(tmp_path / "y" / "run")
    ids = [e.id for e in find_runs([tmp_path / "x" / "run", tmp_path / "y" / "run"])]
    assert ids == ["run", "run-2"]


def test_store_caches_runs_and_errors(tmp_path):
    _trace_dir(tmp_path / "good")
    _trace_dir(tmp_path / "bad")
    calls = []

    def opener(path: Path):
        calls.append(path.name)
        if path.name == "bad":
            raise RunUnavailable("bad: not a trace")
        return object()

    store = RunStore([tmp_path], opener=opener)
    run = store.run("good")
    assert store.run("good") is run
    for _ in range(2):
        with pytest.raises(RunUnavailable, match="not a trace"):
            store.run("bad")
    assert calls == ["bad", "good"] or calls == ["good", "bad"]
    assert store.status("good") == "ok" and store.status("bad").startswith("error")
    with pytest.raises(RunUnavailable, match="no run"):
        store.run("../../etc")


def test_apply_writes_only_inside_the_run_directory(tmp_path, monkeypatch):
    from workbench.app import compute, page_recommendations

    _trace_dir(tmp_path / "run" / "rank0")
    (tmp_path / "run" / rundir.RUN_JSON).write_text("{}")
    _trace_dir(tmp_path / "plain")
    store = RunStore([tmp_path / "run"], opener=lambda p: object())
    # a plain folder of traces is not a run directory: Apply refuses to write there
    plain = RunStore([tmp_path / "plain"], opener=lambda p: object())
    with pytest.raises(ValueError, match="not a run directory"):
        page_recommendations.apply(plain, plain.ids()[0])
    assert not (tmp_path / "plain" / rundir.COMPILE_CONFIG_FILE).exists()
    monkeypatch.setattr(compute, "compile_config_toml", lambda s, rid, header=None: "[compile]\ndynamic = true\n")
    path, text = page_recommendations.apply(store, "run")
    assert path == (tmp_path / "run" / rundir.COMPILE_CONFIG_FILE).resolve()
    assert path.read_text() == text
    # an invalid config is never written
    monkeypatch.setattr(compute, "compile_config_toml", lambda s, rid, header=None: "[nonsense]\nx = 1\n")
    path.unlink()
    with pytest.raises(Exception):
        page_recommendations.apply(store, "run")
    assert not path.exists()


def test_parse_relayout():
    o = 1_000_000_000
    assert parse_relayout({"xaxis.range[0]": 1.0, "xaxis.range[1]": 2.5}, o) == (o + 1_000_000, o + 2_500_000)
    assert parse_relayout({"xaxis.range": [3, 1]}, o) == (o + 1_000_000, o + 3_000_000)
    assert parse_relayout({"xaxis.autorange": True}, o) == "auto"
    assert parse_relayout({"autosize": True}, o) is None
    assert parse_relayout(None, o) is None


def test_least_recently_used_runs_are_closed(tmp_path):
    for name in "abc":
        _trace_dir(tmp_path / name)
    opened = []

    def opener(path):
        opened.append(path.name)
        return object()

    store = RunStore([tmp_path], opener=opener, max_open_runs=2)
    store.run("a"), store.run("b"), store.run("a"), store.run("c")
    assert store.status("b") == "not opened" and store.status("a") == "ok" and store.status("c") == "ok"
    store.run("b")
    assert opened == ["a", "b", "c", "b"]


def test_apply_writes_a_new_file_each_time_and_never_recreates_a_deleted_run(tmp_path, monkeypatch):
    from workbench.app import compute, page_recommendations

    _trace_dir(tmp_path / "run" / "rank0")
    (tmp_path / "run" / rundir.RUN_JSON).write_text("{}")
    store = RunStore([tmp_path / "run"], opener=lambda p: object())
    monkeypatch.setattr(compute, "compile_config_toml", lambda s, rid, header=None: "[compile]\ndynamic = true\n")
    first, _ = page_recommendations.apply(store, "run")
    second, _ = page_recommendations.apply(store, "run")
    assert first.name == rundir.COMPILE_CONFIG_FILE and second.name == "compile_config-2.toml"
    assert page_recommendations.existing_configs(store, "run") == [first, second]
    import shutil

    shutil.rmtree(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="no longer exists"):
        page_recommendations.apply(store, "run")
    assert not (tmp_path / "run").exists()


def test_next_command_reruns_the_job_with_the_config(tmp_path):
    from workbench.app.page_recommendations import next_command

    (tmp_path / rundir.RUN_JSON).write_text('{"world_size": 2, "argv": ["train.py", "--out", "runs/a b", "--lr", "1"]}')
    cmd, check = next_command(tmp_path, tmp_path / "compile_config.toml")
    assert cmd == (f"WORKBENCH_COMPILE_CONFIG={tmp_path / 'compile_config.toml'} torchrun --nproc-per-node=2 "
                   "train.py --out 'runs/a b-fixed' --lr 1")
    assert check == f"workbench diff {tmp_path} 'runs/a b-fixed'"


def test_lands_on_a_gpu_run_and_reads_the_users_line():
    root = Path(__file__).resolve().parents[2] / "sample_traces"
    if not (root / "h200x2-planted").is_dir():
        pytest.skip("sample_traces/h200x2-planted is absent")
    from workbench.app.compute import read_user_frames

    store = RunStore([root])
    assert store.default_id().startswith("h200")
    log = next((root / "h200x2-planted" / "rank1" / "compile").glob("*.log"))
    frames = read_user_frames(str(log))
    assert frames["0/1"].startswith("cpu_gloo_4rank.py:86 in main: loss = ")
