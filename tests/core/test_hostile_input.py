"""Hostile inputs (issue 10, items 3, 4, 6, 7, 10): each gives one line naming the file and the field, the right
exit code, and the good data still loads."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.compile_log import read_compile_logs
from workbench.errors import InputError, TraceError
from workbench.kineto import ASSUMED_RANK, MAX_WORLD_SIZE

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "data" / "compile_logs" / "torch2.13-cpu" / "2rank-gloo-divergent-shape"
BASE = 1_790_000_000_000_000_000


def _trace(rank: int | None, *, pid: int = 1, t0: float = 0.0, world: int | None = 2, base: bool = True) -> dict:
    doc: dict = {
        "schemaVersion": 1,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": 1, "ts": t0,
             "dur": 100.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": 1, "ts": t0 + 1,
             "dur": 2.0, "args": {"correlation": 10, "External id": 5}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 5.5, "dur": 10.25,
             "args": {"correlation": 10, "External id": 5, "device": 0, "stream": 7}},
        ],
    }
    if base:
        doc["baseTimeNanoseconds"] = BASE
    if rank is not None or world is not None:
        doc["distributedInfo"] = {"backend": "nccl", **({"rank": rank} if rank is not None else {}),
                                  **({"world_size": world} if world is not None else {})}
    return doc


def _write(path: Path, doc: dict | list) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=120)


def _one_error_line(res: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr + res.stdout, res.stderr
    return lines[0]


# --- item 3: a huge world size allocates nothing per rank ---------------------------------------------------


def test_huge_world_size_is_ignored_with_a_note(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["distributedInfo"]["world_size"] = 10**9
    path = _write(tmp_path / "rank-0.json", doc)
    res = _cli("info", str(path), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["ranks"] == [0] and info["world_size"] == 1 and info["kernels"]["compute"] == 1
    reason = next(k for k in info["skipped"] if "world_size" in k)
    assert "1000000000" in reason and str(MAX_WORLD_SIZE) in reason


def test_huge_world_size_in_run_json_lists_missing_ranks_lazily(tmp_path: Path) -> None:
    (tmp_path / "rank0" / "trace").mkdir(parents=True)
    _write(tmp_path / "run.json", {"world_size": MAX_WORLD_SIZE})
    _write(tmp_path / "rank0" / "trace" / "rank0.json", _trace(0, world=None))
    run = workbench.open(tmp_path, cache=False)
    assert run.ranks.get_column("rank").to_list() == [0]
    assert len(run.meta["missing_ranks"]) <= 64
    assert any(f"{MAX_WORLD_SIZE - 1} in all" in p for p in run.problems)


# --- item 4: one odd field in one rank's compile log ----------------------------------------------------------


def _odd_log(tmp_path: Path, replace: str, by: str, line_with: str = '{"dynamo_start"') -> Path:
    """A copy of the two-rank logs where rank 1's first line holding ``line_with`` has ``replace`` -> ``by``."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for f in sorted(LOGS.glob("*.log.gz")):
        lines = gzip.decompress(f.read_bytes()).decode().split("\n")
        if "rank_1" in f.name:
            i = next(i for i, ln in enumerate(lines) if line_with in ln and replace in ln)
            lines[i] = lines[i].replace(replace, by, 1)
        (logs / f.name.removesuffix(".gz")).write_text("\n".join(lines))
    return logs


@pytest.mark.parametrize("by", ['"attempt": "0"', '"attempt": [0]', '"frame_id": {"a": 1}'])
def test_odd_field_in_one_compile_log_skips_that_line_only(tmp_path: Path, by: str) -> None:
    logs = _odd_log(tmp_path, '"attempt": 0', by)
    good, _ = read_compile_logs(sorted(LOGS.glob("*.log.gz")))
    compiles, skipped = read_compile_logs(sorted(logs.glob("*.log")))
    assert sorted(set(compiles["rank"].to_list())) == [0, 1]
    assert compiles.filter(pl.col("rank") == 0).height == good.filter(pl.col("rank") == 0).height
    field = by.split('"')[1]
    rows = skipped.filter(pl.col("reason").str.contains(f"'{field}'"))
    assert rows.height == 1, skipped.to_dicts()
    assert "rank_1" in rows["file"][0] and rows["rank"][0] == 1
    run = workbench.open(logs, on_error="skip", cache=False)
    assert sorted(set(run.compiles["rank"].to_list())) == [0, 1] and not run.problems
    res = _cli("info", str(logs), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["compiles"] == compiles.height and [k for k in info["skipped"] if f"'{field}'" in k]


def test_odd_metrics_field_is_null_not_fatal(tmp_path: Path) -> None:
    logs = _odd_log(tmp_path, '"co_firstlineno": ', '"co_firstlineno": [1, 2], "x": ', '{"compilation_metrics"')
    compiles, skipped = read_compile_logs(sorted(logs.glob("*.log")))
    assert compiles.filter(pl.col("rank") == 1)["co_firstlineno"].null_count() < compiles.filter(
        pl.col("rank") == 1).height  # the frame's other compiles still give the line
    assert skipped.filter(pl.col("reason").str.contains("co_firstlineno")).height == 1


def test_unreadable_compile_log_is_one_problem_with_skip(tmp_path: Path) -> None:
    logs = _odd_log(tmp_path, '"attempt": 0', '"attempt": 0')
    bad = next(logs.glob("*rank_1*.log"))
    bad.unlink()
    bad.symlink_to(tmp_path / "gone.log")  # a dangling link: cannot be read, even by root
    with pytest.raises(TraceError, match=r"rank_1.*cannot read the file"):
        read_compile_logs(sorted(logs.glob("*.log")))
    problems: list[str] = []
    compiles, _ = read_compile_logs(sorted(logs.glob("*.log")), problems=problems)
    assert compiles["rank"].unique().to_list() == [0]
    assert len(problems) == 1 and bad.name in problems[0] and "\n" not in problems[0]


# --- item 6: the folder walk --------------------------------------------------------------------------------


def test_link_to_root_and_loops_do_not_hang(tmp_path: Path) -> None:
    d = tmp_path / "job"
    (d / "sub").mkdir(parents=True)
    _write(d / "sub" / "rank-0.json", _trace(0))
    (d / "sub" / "to_root").symlink_to("/")
    (d / "sub" / "loop").symlink_to(d)
    (d / "inside").symlink_to(d / "sub")  # inside the root: followed once, the file is not read twice
    run = workbench.open(d, cache=False)
    assert run.ranks.get_column("rank").to_list() == [0]
    assert any("to_root" in p and "not followed" in p for p in run.problems)


def test_fifo_is_never_opened(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    _write(d / "rank-0.json", _trace(0))
    os.mkfifo(d / "rank-1.json")
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(run=workbench.open(d, cache=False)), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "opening a folder with a FIFO hung"
    run = result["run"]
    assert run.ranks.get_column("rank").to_list() == [0]
    assert any("rank-1.json: a FIFO" in p for p in run.problems)
    with pytest.raises(InputError, match="a FIFO"):
        workbench.open(d / "rank-1.json", cache=False)
    res = _cli("info", str(d / "rank-1.json"))
    assert res.returncode == 1 and _one_error_line(res) == f"error: {d / 'rank-1.json'}: a FIFO, not a file"


_AS_NOBODY = os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.mark.skipif(os.geteuid() == 0 and not _AS_NOBODY, reason="root lists folders whatever their mode")
def test_unreadable_subfolder_is_skipped_with_one_line() -> None:
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="wb-unreadable-"))  # not under pytest's 0700 tmp: another user reads it
    try:
        top.chmod(0o755)
        d = top / "job"
        (d / "locked").mkdir(parents=True)
        d.chmod(0o755)
        _write(d / "rank-0.json", _trace(0)).chmod(0o644)
        (d / "locked").chmod(0)
        probe = ("import json, sys, workbench; r = workbench.open(sys.argv[1], cache=False); "
                 "print(json.dumps({'ranks': r.ranks['rank'].to_list(), 'problems': r.problems}))")
        cmd = [sys.executable, "-c", probe, str(d)]
        if _AS_NOBODY:  # root reads any folder: look as an unprivileged user
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["ranks"] == [0]
        assert [p for p in out["problems"] if "locked: cannot list the folder (Permission denied)" in p]
    finally:
        (top / "job" / "locked").chmod(0o755)
        shutil.rmtree(top)


# --- item 7: odd ts values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ts, reason", [
    (1e300, "'ts' out of range"), (-5.0, "negative 'ts'"), (True, "'ts' is not a number"),
    ("soon", "'ts' is not a number"), ([1], "'ts' is not a number"),
])
def test_bad_ts_drops_those_events_only(tmp_path: Path, ts: object, reason: str) -> None:
    doc = _trace(0)
    doc["traceEvents"] += [{"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": ts, "dur": 1}] * 3
    path = _write(tmp_path / "rank-0.json", doc)
    res = _cli("info", str(path), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["events"] == 3 and info["span_ns"] == 100_000 and info["kernels"]["compute"] == 1
    assert [n for k, n in info["skipped"].items() if reason in k] == [3]


def test_numeric_text_ts_is_read_as_a_number(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "text", "pid": 1, "tid": 1, "ts": "12.5",
                               "dur": "2"})
    run = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False)
    row = run.events.filter(pl.col("name") == "text").row(0, named=True)
    assert row["start"] == BASE + 12_500 and row["dur"] == 2_000
    coerced = {r: n for r, n in run.info()["skipped"].items() if "wrong type" in r}
    assert coerced == {"'ts' of the wrong type (text, not a number): read as a number": 1,
                       "'dur' of the wrong type (text, not a number): read as a number": 1}


def test_one_stray_ts_in_an_epoch_trace_does_not_span_decades(tmp_path: Path) -> None:
    doc = _trace(0, t0=1.7e15, base=False)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "stray", "pid": 1, "tid": 1, "ts": 1.0,
                               "dur": 1})
    run = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False)
    info = run.info()
    assert info["span_ns"] == 100_000 and info["clock"] == ["absolute"]
    assert [n for k, n in info["skipped"].items() if "clock outlier" in k] == [1]


# --- item 10: --skip-bad with nothing loaded, profiler cycles, lone rankless traces ---------------------------


def test_skip_bad_with_no_rank_loaded_exits_non_zero(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    (d / "rank-0.json").write_text("{ not json")
    (d / "rank-1.json").write_text("")
    res = _cli("info", str(d), "--skip-bad")
    assert res.returncode == 1
    line = _one_error_line(res)
    assert line.startswith("error: no rank could be loaded: ") and "rank-0.json" in line and "1 more" in line


def test_two_profiler_cycles_of_one_process_are_windows_of_one_rank(tmp_path: Path) -> None:
    d = tmp_path / "tb"
    d.mkdir()
    _write(d / "host_4242.1790000000000000000.pt.trace.json", _trace(0, pid=4242))
    _write(d / "host_4242.1790000000500000000.pt.trace.json", _trace(0, pid=4242, t0=500_000.0))
    run = workbench.open(d, cache=False)
    assert run.ranks.get_column("rank").to_list() == [0]
    assert len(run.ranks.row(0, named=True)["trace_files"]) == 2
    assert run.kernels.height == 2 and run.steps.height == 2
    assert any("2 profiler windows of one process" in n for n in run.meta["notes"])
    res = _cli("info", str(d))
    assert res.returncode == 0 and "profiler windows of one process" in res.stdout


def test_two_processes_claiming_one_rank_still_refused(tmp_path: Path) -> None:
    d = tmp_path / "two"
    d.mkdir()
    _write(d / "a.json", _trace(0, pid=1))
    _write(d / "b.json", _trace(0, pid=2, t0=500_000.0))
    with pytest.raises(InputError, match=r"two trace files claim rank 0: .*a\.json and .*b\.json \(different"):
        workbench.open(d, cache=False)


def test_lone_rankless_one_process_trace_is_rank_zero_with_a_note(tmp_path: Path) -> None:
    path = _write(tmp_path / "profile.json", _trace(None, world=None))
    res = _cli("info", str(path), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["ranks"] == [0] and any("read as rank 0" in n for n in info["notes"])
    run = workbench.open(path, cache=False)
    assert run.ranks.row(0, named=True)["rank_source"] == ASSUMED_RANK
    # a distributed trace (world size 2) that names no rank still asks for one
    with pytest.raises(TraceError, match="--rank"):
        workbench.open(_write(tmp_path / "dist.json", _trace(None, world=2)), cache=False)
    # two rankless processes in one folder: one line that says how to fix it
    d = tmp_path / "pair"
    d.mkdir()
    _write(d / "a.json", _trace(None, pid=1, world=None))
    _write(d / "b.json", _trace(None, pid=2, world=None))
    with pytest.raises(InputError, match="neither names its rank"):
        workbench.open(d, cache=False)


def test_compile_log_found_by_content_whatever_its_name(tmp_path: Path) -> None:
    src = sorted(LOGS.glob("*rank_0*.log.gz"))[0]
    d = tmp_path / "renamed"
    d.mkdir()
    (d / "train_output.txt").write_bytes(gzip.decompress(src.read_bytes()))
    (d / "notes.txt").write_text("V is for vendetta, not a log\n")
    run = workbench.open(d, cache=False)
    assert run.compiles.height > 0 and set(run.compiles["log_file"].to_list()) == {str(d / "train_output.txt")}


@pytest.mark.parametrize("ts, reason", [(True, "'ts' is not a number"), ("soon", "'ts' is not a number"),
                                        (1e300, "'ts' out of range")])
def test_bad_ts_in_a_large_trace_read_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ts: object,
                                               reason: str) -> None:
    from workbench import kineto

    doc = _trace(0)
    doc["traceEvents"] += [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10.0 + i / 100,
                            "dur": 0.5} for i in range(3000)]
    doc["traceEvents"][1500]["ts"] = ts
    path = _write(tmp_path / "rank-0.json", doc)
    monkeypatch.setattr(kineto, "PIECE_BYTES", 20_000)
    assert kineto._pieces(path.read_bytes()) is not None  # the file is large enough to be read in pieces
    run = workbench.open(path, cache=False)
    assert run.events.height == 3 + 3000 - 1 and run.info()["span_ns"] == 100_000
    assert [n for k, n in run.info()["skipped"].items() if reason in k] == [1]


def test_rankless_file_beside_ranked_files_is_not_taken_for_rank_zero(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    _write(d / "rank-0.json", _trace(0, pid=10))
    _write(d / "rank-1.json", _trace(1, pid=11))
    _write(d / "profile.json", _trace(None, pid=12, world=None))
    with pytest.raises(InputError, match=r"profile\.json: no rank recorded, and rank 0 is .*rank-0\.json's"):
        workbench.open(d, cache=False)
    run = workbench.open(d, cache=False, on_error="skip")
    assert run.ranks.get_column("rank").to_list() == [0, 1] and run.kernels.height == 2
    assert [p for p in run.problems if "profile.json" in p] and all("\n" not in p for p in run.problems)


def test_two_processes_claiming_one_rank_with_skip_keep_the_first(tmp_path: Path) -> None:
    d = tmp_path / "two"
    d.mkdir()
    _write(d / "a.json", _trace(0, pid=1))
    _write(d / "b.json", _trace(0, pid=2, t0=500_000.0))
    _write(d / "c.json", _trace(1, pid=3))
    run = workbench.open(d, cache=False, on_error="skip")
    assert run.ranks.get_column("rank").to_list() == [0, 1]
    assert run.ranks.row(0, named=True)["trace_files"] == [str(d / "a.json")]
    assert any("b.json left out" in p for p in run.problems)
