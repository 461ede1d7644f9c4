"""Issue 35 (ingest): each hostile input is generated here, and gives either the right tables with what was dropped,
coerced or merged counted in SKIPPED (stable phrases of the security contract), or one line naming the file and
the field — never an internal exception's class name, a hang, or an allocation sized by the input."""

from __future__ import annotations

import copy
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import workbench
from workbench import compile_log, kineto, rundir
from workbench.errors import InputError, TraceError
from workbench.kineto import MAX_WORLD_SIZE

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
LAUNCH_BOUND = SAMPLES / "gpu-launch-bound-before"
NCCL = SAMPLES / "h200x2-ddp-nccl"
BASE = 1_790_000_000_000_000_000
INTERNAL = ("Error:", "Traceback", "InvalidOperation", "ComputeError", "ValueError", "KeyError", "MemoryError")


def _trace(rank: int | None = 0, *, world: Any = 2, pid: int = 1, t0: float = 0.0) -> dict:
    """A three-event trace: a profiler step, a launch and its kernel."""
    doc: dict = {"schemaVersion": 1, "baseTimeNanoseconds": BASE, "distributedInfo": {"backend": "nccl"},
                 "traceEvents": [
                     {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": 1, "ts": t0,
                      "dur": 100.0},
                     {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": 1,
                      "ts": t0 + 1, "dur": 2.0, "args": {"correlation": 10, "External id": 5}},
                     {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 5.5, "dur": 10.25,
                      "args": {"correlation": 10, "External id": 5, "device": 0, "stream": 7}},
                 ]}
    if rank is not None:
        doc["distributedInfo"]["rank"] = rank
    if world is not None:
        doc["distributedInfo"]["world_size"] = world
    return doc


def _write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _limit_memory() -> None:
    """Run a CLI child with 3 GiB of address space: an allocation sized by the input fails instead of swapping."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=300, preexec_fn=_limit_memory, env={**os.environ, **(env or {})})


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert not any(word in lines[0] for word in INTERNAL), lines[0]
    return lines[0]


def _skipped(info: dict, phrase: str) -> int:
    """The count of the SKIPPED reasons holding ``phrase`` (case-insensitive)."""
    return sum(n for k, n in info["skipped"].items() if phrase.lower() in k.lower())


def _sample(tmp_path: Path, src: Path, mutate: Callable[[dict], None], rank: int = 0) -> Path:
    """A copy of the sample run ``src`` whose rank's trace went through ``mutate`` (no cache copied)."""
    d = tmp_path / f"{src.name}-copy"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns(rundir.CACHE_DIR))
    trace = next((d / rundir.TRACE_DIR.format(rank=rank)).glob("*.json.gz"))
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    mutate(doc)
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return d


def _findings(run: workbench.Run) -> list[tuple]:
    return [(f.kind, f.cost.ns, f.ranks, f.steps) for f in run.findings()]


# --- world size: checked against the ranks present, capped, never allocated -------------------------------------


@pytest.mark.parametrize("where", ["trace", "run.json"])
def test_world_size_1e12_is_one_note_in_info_analyze_and_diff(tmp_path: Path, where: str) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=10**12 if where == "trace" else 1))
    if where == "run.json":
        _write(d / "run.json", {"world_size": 1e12})
    for args in (["info", str(d), "--json"], ["analyze", str(d), "--json"], ["diff", str(d), str(d), "--json"]):
        res = _cli(*args)
        assert res.returncode == 0, res.stderr
        assert not any(word in res.stderr for word in INTERNAL), res.stderr
    info = json.loads(_cli("info", str(d), "--json").stdout)
    assert info["world_size"] == 1 and info["ranks"] == [0] and info["kernels"]["compute"] == 1
    field = "distributedInfo.world_size" if where == "trace" else "run.json world_size"
    assert [k for k in info["skipped"] if field in k and "1000000000000" in k and str(MAX_WORLD_SIZE) in k]


@pytest.mark.parametrize("value", ["two", True, 2.5, -1, [2]])
def test_world_size_that_is_not_a_number_is_named_and_ignored(tmp_path: Path, value: Any) -> None:
    doc = _trace(0)
    doc["distributedInfo"]["world_size"] = value
    run = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False)
    assert run.world_size == 1 and run.kernels.height == 1
    assert [k for k in run.info()["skipped"] if k.startswith("distributedInfo.world_size =")]
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=None))
    _write(d / "run.json", {"world_size": value})
    info = workbench.open(d, cache=False).info()
    assert info["world_size"] == 1 and [k for k in info["skipped"] if k.startswith("run.json world_size =")]


def test_world_size_smaller_than_the_ranks_present_is_dropped(tmp_path: Path) -> None:
    d = tmp_path / "job"
    for r in range(4):
        _write(d / f"rank-{r}.json", _trace(r, world=4 if r else 2, pid=10 + r))
    info = workbench.open(d, cache=False).info()
    assert info["ranks"] == [0, 1, 2, 3] and info["world_size"] == 4 and not info["missing_ranks"]
    assert _skipped(info, "distributedInfo.rank = 0") == 0
    note = [k for k in info["skipped"] if k.startswith("world size 2 stated")]
    assert note and "4 rank(s) up to rank 3" in note[0]


# --- ranks: a rank id is an integer from 0 to 2**31 - 1; one rank, one folder -----------------------------------


def test_twenty_digit_rank_in_distributed_info_names_the_field(tmp_path: Path) -> None:
    doc = _trace(None, world=None)
    doc["distributedInfo"]["rank"] = 12345678901234567890
    path = _write(tmp_path / "profile.json", doc)
    with pytest.raises(TraceError, match=r"profile\.json: .*distributedInfo\.rank = 12345678901234567890 is not a rank"):
        workbench.open(path, cache=False)
    line = _one_line(_cli("info", str(path)))
    assert str(path) in line and "distributedInfo.rank" in line
    run = workbench.open(path, cache=False, rank=3)  # told which rank it is, the file loads
    assert run.ranks["rank"].to_list() == [3] and _skipped(run.info(), "distributedInfo.rank = 1234") == 1


@pytest.mark.parametrize("name", ["rank12345678901234567890.json", "rank-99999999999.json"])
def test_huge_rank_in_a_file_name_is_one_line(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path / name, _trace(None, world=None, pid=1) | {"distributedInfo": {}})
    line = _one_line(_cli("info", str(path)))
    assert str(path) in line and "is not a rank" in line


def test_huge_rank_folder_and_rank_option(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0))
    _write(d / "rank12345678901234567890" / "trace" / "t.json", _trace(1))
    run = workbench.open(d, cache=False)
    assert run.ranks["rank"].to_list() == [0]
    assert [p for p in run.problems if "rank12345678901234567890" in p and "names no rank" in p]
    line = _one_line(_cli("info", str(d / "rank0" / "trace" / "t.json"), "--rank", "99999999999"))
    assert "--rank 99999999999 is not a rank" in line


def test_rank0_and_rank00_are_refused_naming_both(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "a.json", _trace(0, pid=1))
    _write(d / "rank00" / "trace" / "b.json", _trace(0, pid=2))
    with pytest.raises(InputError, match=r"rank0 and .*rank00: two folders claim rank 0"):
        workbench.open(d, cache=False)
    line = _one_line(_cli("info", str(d)))
    assert str(d / "rank0") in line and str(d / "rank00") in line


# --- step numbers: int32 in the tables; 2**63 - 1 dropped and counted -------------------------------------------


@pytest.mark.parametrize("n", [2**63 - 1, 99_999_999_999, 10**30])
def test_profiler_step_number_out_of_range_is_counted(tmp_path: Path, n: int) -> None:
    doc = _trace(0)
    doc["traceEvents"][0]["name"] = f"ProfilerStep#{n}"
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1,
                               "ts": 200.0, "dur": 50.0})
    res = _cli("info", str(_write(tmp_path / "rank-0.json", doc)), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["step_ids"] == [2] and info["events"] == 4
    assert _skipped(info, "ProfilerStep number out of range") == 1


def test_steps_jsonl_fields_of_the_wrong_type_are_named_and_counted(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=1))
    lines = [
        {"step": 0, "start_ns": 10, "end_ns": 20, "device_ns": 5},
        {"step": 2**63 - 1, "start_ns": 30, "end_ns": 40},            # step out of range
        {"step": "3", "start_ns": 50, "end_ns": 60},                   # step as text
        {"step": 4, "start_ns": "70", "end_ns": 80},                   # start as text
        {"step": 5, "start_ns": 2**63 - 1, "end_ns": 2**64},           # end past int64
        {"step": 6, "start_ns": 90, "end_ns": 100, "device_ns": -5, "data_wait_ns": "x"},
        {"step": 7, "start_ns": 120, "end_ns": 110},                   # ends before it starts
    ]
    (d / "rank0" / "steps.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    res = _cli("info", str(d), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    run = workbench.open(d, cache=False)
    got = run.steps.filter(pl.col("source") == "collector")
    assert got["step"].to_list() == [0, 6] and got["device_ns"].to_list() == [5, None]
    assert _skipped(info, "steps.jsonl 'step'") == 2
    assert _skipped(info, "steps.jsonl 'start_ns'/'end_ns'") == 3
    assert _skipped(info, "steps.jsonl 'device_ns'") == 1 and _skipped(info, "steps.jsonl 'data_wait_ns'") == 1


# --- durations: dropped and counted, never clamped to 0 -----------------------------------------------------------


def _some_kernels(doc: dict) -> list[dict]:
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    return kernels[:: max(1, len(kernels) // 40)]


@pytest.mark.parametrize("bad, phrase", [(lambda d: -d - 1.0, "negative 'dur'"), (lambda d: None, "no 'dur'"),
                                         (None, "no 'dur'")])
def test_bad_durations_are_dropped_not_clamped(tmp_path: Path, bad: Callable | None, phrase: str) -> None:
    if not LAUNCH_BOUND.is_dir():
        pytest.skip(f"{LAUNCH_BOUND} is absent")

    def removed(doc: dict) -> None:
        gone = {id(e) for e in _some_kernels(doc)}
        doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in gone]

    def broken(doc: dict) -> None:
        for e in _some_kernels(doc):
            if bad is None:
                del e["dur"]
            else:
                e["dur"] = bad(e["dur"])

    without = workbench.open(_sample(tmp_path / "a", LAUNCH_BOUND, removed), cache=False)
    hostile = workbench.open(_sample(tmp_path / "b", LAUNCH_BOUND, broken), cache=False)
    n = len(_some_kernels(json.loads(gzip.decompress(next(
        (LAUNCH_BOUND / "rank0" / "trace").glob("*.json.gz")).read_bytes()))))
    assert _findings(hostile) == _findings(without) and _findings(hostile)  # clamping to 0 changed the cost
    assert hostile.kernels.height == without.kernels.height
    assert _skipped(hostile.info(), phrase) == n


def test_instant_events_need_no_duration(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": 50,
                               "s": "t"})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events"] == 4 and info["events_by_kind"]["instant"] == 1 and not info["skipped"]


# --- events without ph, exact duplicates, clock jumps, kernels before their launch --------------------------------


def test_events_without_ph_are_counted(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"] += [{"cat": "cpu_op", "name": "noph", "pid": 1, "tid": 1, "ts": 10, "dur": 1}] * 2
    doc["traceEvents"].append({"ph": None, "cat": "cpu_op", "name": "nullph", "pid": 1, "tid": 1, "ts": 10, "dur": 1})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events"] == 3 and _skipped(info, "no 'ph' field") == 3


def test_a_duplicated_event_is_counted_once(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"] += [copy.deepcopy(doc["traceEvents"][2]) for _ in range(3)]  # the kernel four times
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["kernels"]["compute"] == 1 and info["events"] == 3
    assert _skipped(info, "duplicate event") == 3


def test_duplicates_across_pieces_of_a_large_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _trace(0)
    doc["traceEvents"] += [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10.0 + i / 100,
                            "dur": 0.5, "args": {"External id": 100 + i}} for i in range(3000)]
    doc["traceEvents"] += copy.deepcopy(doc["traceEvents"])  # the whole list written twice
    path = _write(tmp_path / "rank-0.json", doc)
    monkeypatch.setattr(kineto, "PIECE_BYTES", 20_000)
    assert kineto._pieces(path.read_bytes()) is not None
    run = workbench.open(path, cache=False)
    assert run.events.height == 3003 and run.kernels.height == 1
    assert _skipped(run.info(), "duplicate event") == 3003


def test_same_time_python_calls_are_not_duplicates(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"] += [{"ph": "X", "cat": "python_function", "name": "<built-in method len>", "pid": 1,
                            "tid": 1, "ts": 20.0, "dur": 0.0, "args": {"Python id": i, "Python parent id": 1}}
                           for i in (7, 8)]
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events_by_kind"]["python"] == 2 and not info["skipped"]


def test_one_hour_clock_jump_is_dropped_and_counted(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1, "ts": 3600e6,
                               "dur": 1.0})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["span_ns"] == 100_000 and info["events"] == 3
    assert _skipped(info, "clock jump") == 1


def test_a_long_idle_gap_inside_a_long_trace_is_not_a_jump(tmp_path: Path) -> None:
    doc = _trace(0)
    events = doc["traceEvents"]
    events[0]["dur"] = 100e6  # steps of 100 s, with 90 s of nothing at all between them
    for step, t0 in ((2, 190e6), (3, 380e6)):
        events += [dict(e, ts=e["ts"] + t0, name=e["name"].replace("#1", f"#{step}")) for e in events[:3]]
        events[-2]["args"] = {"correlation": 10 + step, "External id": 5 + step}
        events[-1]["args"] = {"correlation": 10 + step, "External id": 5 + step, "device": 0, "stream": 7}
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events"] == 9 and info["steps"] == 3 and not info["skipped"]


def test_kernel_before_its_launch_is_counted_and_kept(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"][2]["ts"] = 0.5  # the kernel starts before cudaLaunchKernel (ts 1.0)
    run = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False)
    k = run.kernels.row(0, named=True)
    assert run.kernels.height == 1 and k["launch_start"] is None and k["step"] == 1
    assert _skipped(run.info(), "before its launch") == 1


# --- fields of the wrong type: coerced where safe, counted; collectives kept ---------------------------------------


@pytest.mark.parametrize("field, value, phrase", [
    ("name", 42, "'name' of the wrong type (number"), ("name", ["a"], "'name' of the wrong type (list"),
    ("name", True, "'name' of the wrong type (boolean"), ("cat", 7, "'cat' of the wrong type"),
    ("args", [1, 2], "'args' of the wrong type (list"), ("args", "x", "'args' of the wrong type (text"),
])
def test_wrong_type_is_coerced_or_left_out_and_counted(tmp_path: Path, field: str, value: Any, phrase: str) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 10, "dur": 1,
                               field: value})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events"] == 4 and info["kernels"]["compute"] == 1
    assert _skipped(info, phrase) == 1 and _skipped(info, "wrong type") == 1


def test_wrong_types_do_not_lose_collectives(tmp_path: Path) -> None:
    if not NCCL.is_dir():
        pytest.skip(f"{NCCL} is absent")

    def odd(doc: dict) -> None:
        ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name") != "record_param_comms"]
        ops[0]["name"] = 12345
        ops[1]["args"] = ["not", "an", "object"]
        ops[2]["name"] = {"a": 1}
        comms = [e for e in doc["traceEvents"] if e.get("name") == "record_param_comms"
                 and isinstance(e.get("args"), dict) and "In msg nelems" in e["args"]]
        comms[0]["args"]["In msg nelems"] = str(comms[0]["args"]["In msg nelems"])
        doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": 7, "pid": 1, "tid": 1,
                                   "ts": ops[0]["ts"], "dur": 1.0})

    good = workbench.open(NCCL, cache=False)
    run = workbench.open(_sample(tmp_path, NCCL, odd), cache=False)
    assert run.collectives.height == good.collectives.height > 0
    assert run.collectives.drop("kernel_name").equals(good.collectives.drop("kernel_name"))
    assert _skipped(run.info(), "wrong type") == 5


@pytest.mark.parametrize("value, phrase", [(True, "'ts' is not a number"), ("soon", "'ts' is not a number")])
def test_odd_ts_is_counted_as_a_wrong_type(tmp_path: Path, value: Any, phrase: str) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": value, "dur": 1})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert _skipped(info, phrase) == 1 and _skipped(info, "wrong type") == 1


def test_boolean_dur_is_counted(tmp_path: Path) -> None:
    doc = _trace(0)
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "odd", "pid": 1, "tid": 1, "ts": 3, "dur": True})
    info = workbench.open(_write(tmp_path / "rank-0.json", doc), cache=False).info()
    assert info["events"] == 3 and _skipped(info, "'dur' is not a number (wrong type") == 1


# --- reads: regular files only, never blocking, up to a size cap --------------------------------------------------


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _returns(fn: Callable[[], Any]) -> Any:
    """``fn()`` run on a thread: its result or exception; fails the test if it blocks for a minute."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "reading a FIFO blocked"
    return out.get("error", out.get("value"))


@pytest.mark.parametrize("reader", [
    lambda p: kineto.read_bytes(p), lambda p: rundir.read_json(p), lambda p: rundir.read_jsonl(p),
    lambda p: compile_log.read_compile_logs([p]),
])
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, reader: Callable[[Path], Any]) -> None:
    fifo = _fifo(tmp_path / "dedicated_log_torch_trace_rank_0_x.log")
    err = _returns(lambda: reader(fifo))
    assert isinstance(err, TraceError) and str(err).startswith(f"{fifo}: a FIFO, not a file: a "), err


def test_fifos_in_a_run_directory_are_not_read(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=1))
    for name in ("run.json", "rank0/steps.jsonl", "rank0/fingerprint.json", "rank0/compile/x.log",
                 "rank0/trace/u.json"):
        _fifo(d / name)
    run = _returns(lambda: workbench.open(d, cache=False))
    assert isinstance(run, workbench.Run) and run.ranks["rank"].to_list() == [0] and run.kernels.height == 1


def test_size_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=1))
    _write(d / "run.json", {"world_size": 1, "pad": "x" * 5000})
    steps = "".join(json.dumps({"step": i, "start_ns": i, "end_ns": i + 1}) + "\n" for i in range(400))
    _write(d / "rank0" / "steps.jsonl", steps)
    monkeypatch.setattr(rundir, "MAX_JSON_BYTES", 4096)
    with pytest.raises(TraceError, match=r"run\.json: 5,0\d\d bytes: larger than the 4 KiB a JSON file may have"):
        workbench.open(d, cache=False)
    (d / "run.json").unlink()
    run = workbench.open(d, cache=False)
    kept = run.steps.filter(pl.col("source") == "collector").height
    assert 0 < kept < 400 and kept == steps.encode()[:4096].count(b"\n")
    assert _skipped(run.info(), "steps.jsonl over 4,096 bytes") == 1


def test_gzip_bomb_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = _trace(0)
    doc["pad"] = " " * 3_000_000
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert path.stat().st_size < 100_000
    monkeypatch.setattr(kineto, "MAX_TRACE_BYTES", 1 << 20)
    with pytest.raises(TraceError, match=r"rank-0\.json\.gz: decompresses to more than 1,048,576 bytes"):
        workbench.open(path, cache=False)
    monkeypatch.setattr(kineto, "MAX_TRACE_BYTES", 8 << 20)
    assert workbench.open(path, cache=False).kernels.height == 1  # under the cap: read as before


def test_multi_member_gzip_still_reads(tmp_path: Path) -> None:
    raw = json.dumps(_trace(0)).encode()
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(raw[:50]) + gzip.compress(raw[50:]))
    assert workbench.open(path, cache=False).kernels.height == 1


# --- the cache never writes through a link that leaves the run -----------------------------------------------------


@pytest.mark.parametrize("link", [".workbench", ".workbench/kineto"])
def test_cache_link_leaving_the_run_is_not_written_through(tmp_path: Path, link: str) -> None:
    d = tmp_path / "run"
    _write(d / "rank-0.json", _trace(0, world=1))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (d / link).parent.mkdir(parents=True, exist_ok=True)
    (d / link).symlink_to(outside)
    user_cache = tmp_path / "xdg"
    res = _cli("info", str(d), "--json", env={"XDG_CACHE_HOME": str(user_cache)})
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["kernels"]["compute"] == 1
    assert list(outside.iterdir()) == []
    assert list(user_cache.glob("workbench/*/kineto/*/events.parquet"))
    assert [p for p in info["problems"] if f"{d / '.workbench'}" in p and "leaves" in p and str(user_cache) in p]


def test_cache_link_inside_the_run_is_used(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank-0.json", _trace(0, world=1))
    (d / "cache-here").mkdir()
    (d / ".workbench").symlink_to(d / "cache-here")
    run = workbench.open(d)
    assert not run.problems and list((d / "cache-here" / "kineto").glob("*/events.parquet"))


# --- info shows what compile logs and steps.jsonl dropped ------------------------------------------------------------


def test_info_shows_skipped_rows_of_compile_logs_and_steps(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _write(d / "rank0" / "trace" / "t.json", _trace(0, world=1))
    (d / "rank0" / "steps.jsonl").write_text('{"step": 0, "start_ns": 1, "end_ns": 2}\n{"step": "x"}\n{"ste')
    _write(d / "rank0" / "compile" / "dedicated_log_torch_trace_rank_0_a.log",
           'V1129 11:00:06.279000 1 torch/x.py:1] {"mystery_event": {}, "rank": 0}\n'
           'V1129 11:00:06.279000 1 torch/x.py:1] {"dynamo_start": {"stack": []}, "rank": 0, "frame_id": 0, '
           '"frame_compile_id": 0, "attempt": "zero"}\n')
    res = _cli("info", str(d), "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert _skipped(info, "unknown event type mystery_event") == 1
    assert _skipped(info, "'attempt' is text that is not a number") == 1
    assert _skipped(info, "steps.jsonl 'step'") == 1 and _skipped(info, "steps.jsonl line incomplete") == 1
    text = _cli("info", str(d))
    assert text.returncode == 0 and "not kept" in text.stdout and "mystery_event" in text.stdout


# --- compile logs: linear in their size, ranks and ids checked ------------------------------------------------------


def test_compile_log_parsing_visits_each_compilation_a_bounded_number_of_times(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader never scans the compilations read so far per line (that made 40k compilations take a minute):
    the rows are visited a fixed number of times, however many there are."""
    visits = [0]

    class CountingList(list):
        def __iter__(self):  # type: ignore[override]
            for x in super().__iter__():
                visits[0] += 1
                yield x

    real_init = compile_log._LogReader.__init__

    def counting_init(self: Any) -> None:
        real_init(self)
        self.rows = CountingList()

    monkeypatch.setattr(compile_log._LogReader, "__init__", counting_init)
    head = "V1129 11:00:06.279000 1 torch/_dynamo/convert_frame.py:303] "
    n = 3000
    log = tmp_path / "dedicated_log_torch_trace_rank_0_a.log"
    log.write_text("".join(
        f'{head}{{"dynamo_start": {{"stack": []}}, "rank": 0, "frame_id": {i}, "frame_compile_id": 0, "attempt": 0}}\n'
        f'{head}{{"compilation_metrics": {{"compile_id": "{i}/0", "co_name": "f{i}", "start_time": 1.0, '
        f'"entire_frame_compile_time_s": 0.1}}, "rank": 0, "frame_id": {i}, "frame_compile_id": 0, "attempt": 0}}\n'
        for i in range(n)))
    compiles, skipped = compile_log.read_compile_logs([log])
    assert compiles.height == n and skipped.height == 0
    assert visits[0] <= 2 * n


@pytest.mark.parametrize("line, phrase", [
    ('{"dynamo_start": {}, "rank": 99999999999, "frame_id": 0, "frame_compile_id": 0}', "the rank key ignored"),
    ('{"compilation_metrics": {"compile_id": "99999999999/0"}}', "'compile_id' with a number out of range"),
    ('{"dynamo_start": {}, "rank": 0, "frame_id": 1e300, "frame_compile_id": 0}', "'frame_id' = 1000000000000"),
    ('{"compilation_metrics": {"compile_id": "0/0", "start_time_us": 1e17}, "frame_id": 0, "frame_compile_id": 0}',
     "start_time_us is out of range"),
])
def test_compile_log_numbers_out_of_range_are_counted(tmp_path: Path, line: str, phrase: str) -> None:
    log = tmp_path / "dedicated_log_torch_trace_rank_0_a.log"
    log.write_text(f"V1129 11:00:06.279000 1 torch/x.py:1] {line}\n")
    compiles, skipped = compile_log.read_compile_logs([log])
    assert [r for r in skipped["reason"].to_list() if phrase in r], skipped.to_dicts()
    assert compiles.height <= 1


def test_compile_log_with_a_huge_rank_in_its_name_is_one_problem(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    good = _write(d / "dedicated_log_torch_trace_rank_0_a.log",
                  'V1129 11:00:06.279000 1 torch/x.py:1] {"dynamo_start": {}, "frame_id": 0, "frame_compile_id": 0}\n')
    bad = d / "dedicated_log_torch_trace_rank_99999999999_b.log"
    shutil.copyfile(good, bad)
    problems: list[str] = []
    compiles, _ = compile_log.read_compile_logs([good, bad], problems=problems)
    assert compiles["rank"].to_list() == [0]
    assert len(problems) == 1 and bad.name in problems[0] and "is not a rank" in problems[0]
    line = _one_line(_cli("info", str(bad)))
    assert str(bad) in line
