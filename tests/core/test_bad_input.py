"""Broken inputs: each gives one clear line naming the file and the problem, and never loses good ranks."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.errors import InputError, TraceError


def _good_trace(rank: int) -> dict:
    base = 1_790_000_000_000_000_000
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 100.0},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
             "args": {"correlation": 10, "External id": 5}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 5.5, "dur": 10.25,
             "args": {"correlation": 10, "External id": 5, "device": 0, "stream": 7}},
        ],
    }


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BROKEN = {
    "truncated_gzip": (lambda: gzip.compress(json.dumps(_good_trace(0)).encode())[:-30], "truncated gzip", ".json.gz"),
    "truncated_json": (lambda: json.dumps(_good_trace(0)).encode()[:-40], "truncated JSON", ".json"),
    "not_json": (lambda: b"PK\x03\x04 this is a zip file, not a trace", "not JSON", ".json"),
    "no_trace_events": (lambda: json.dumps({"schemaVersion": 1, "foo": [1, 2]}).encode(), "without 'traceEvents'", ".json"),
    "empty_trace": (lambda: json.dumps({"schemaVersion": 1, "traceEvents": []}).encode(), "empty trace", ".json"),
    "empty_file": (lambda: b"", "empty file", ".json"),
    "gz_not_gzip": (lambda: b'{"traceEvents": []}', "not gzip-compressed", ".json.gz"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_file_message(tmp_path: Path, case: str) -> None:
    make, expected, suffix = BROKEN[case]
    path = _write(tmp_path / f"rank-0{suffix}", make())
    with pytest.raises(TraceError) as err:
        workbench.open(path, cache=False)
    msg = str(err.value)
    assert msg.startswith(str(path) + ": ")
    assert expected in msg
    assert "\n" not in msg


def test_unreadable_file(tmp_path: Path) -> None:
    _write(tmp_path / "rank-0.json", json.dumps(_good_trace(0)).encode())
    link = tmp_path / "rank-1.json"
    link.symlink_to(tmp_path / "gone.json")  # a dangling link cannot be read, even by root
    with pytest.raises(TraceError, match=r"rank-1\.json: cannot read the file \(No such file"):
        workbench.open(tmp_path, cache=False)
    run = workbench.open(tmp_path, cache=False, on_error="skip")
    assert run.ranks.get_column("rank").to_list() == [0] and "rank-1.json" in run.problems[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_file_without_read_permission(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank-0.json", json.dumps(_good_trace(0)).encode())
    path.chmod(0)
    with pytest.raises(TraceError, match="cannot read"):
        workbench.open(path, cache=False)


def test_skip_loads_good_ranks_and_reports_bad(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    _write(d / "rank-0.json", json.dumps(_good_trace(0)).encode())
    _write(d / "rank-1.json.gz", gzip.compress(json.dumps(_good_trace(1)).encode())[:-30])
    with pytest.raises(TraceError, match="rank-1.json.gz: truncated gzip"):
        workbench.open(d)
    run = workbench.open(d, on_error="skip")
    assert run.ranks.get_column("rank").to_list() == [0]
    assert len(run.problems) == 1 and "rank-1.json.gz" in run.problems[0]
    assert run.kernels.height == 1
    k = run.kernels.row(0, named=True)
    assert k["start"] == 1_790_000_000_000_005_500 and k["dur"] == 10_250
    assert k["kernel_class"] == "compute" and k["launch_start"] == 1_790_000_000_000_001_000
    assert k["step"] == 1


def test_mixed_types_fall_back_to_tolerant_parser(tmp_path: Path) -> None:
    doc = _good_trace(0)
    doc["traceEvents"][2]["args"]["stream"] = "seven"          # a string where a number is expected
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k2", "pid": "0", "tid": 7, "ts": 20, "dur": 1,
                               "args": {"device": 0, "stream": 7, "correlation": [1, 2]}})
    run = workbench.open(_write(tmp_path / "rank-0.json", json.dumps(doc).encode()), cache=False)
    assert run.kernels.height == 2


def test_chrome_array_format(tmp_path: Path) -> None:
    events = _good_trace(0)["traceEvents"]
    run = workbench.open(_write(tmp_path / "rank-4.json", json.dumps(events).encode()), cache=False)
    assert run.ranks.row(0, named=True)["rank"] == 4
    assert run.ranks.row(0, named=True)["clock"] == "relative"
    assert run.kernels.height == 1


def test_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Kineto traces"):
        workbench.open(tmp_path)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        workbench.open(tmp_path / "nope")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path / "rank-0.json", json.dumps(_good_trace(0)).encode()[:-40])
    res = _cli("info", str(path))
    assert res.returncode == 1    # bad input: 1 (usage errors: 2)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == [f"error: {path}: truncated JSON: the document ends at byte {path.stat().st_size} before it is complete"]
    assert "Traceback" not in res.stderr + res.stdout
    dbg = _cli("--debug", "info", str(path))
    assert "Traceback" in dbg.stderr


def test_cli_info_json(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        _write(d / f"rank-{r}.json", json.dumps(_good_trace(r)).encode())
    res = _cli("info", str(d), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["ranks"] == [0, 1] and info["world_size"] == 2 and info["steps"] == 1
    assert info["events"] == 6 and info["span_ns"] == 100_000
    assert info["kernels"] == {"compute": 2, "communication": 0, "memcpy": 0, "memset": 0, "sync": 0}
    assert info["collectives"] == 0
    res = _cli("ingest", str(d))
    assert res.returncode == 0 and "ingested 2 rank(s)" in res.stdout
    assert (d / ".workbench" / "kineto").is_dir()
