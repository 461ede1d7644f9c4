"""A Flight Recorder dump is a pickle: a hostile one is refused with one line naming the file and never runs; one
that would expand past the bounds (elements counting shared references, nesting, operations, size), an old-protocol
pickle, a FIFO or a device is one line too, and nothing blocks."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path

import orjson
import polars as pl
import pytest

import workbench.flight_recorder as fr
from workbench.errors import InputError, TraceError
from workbench.flight_recorder import UnsafePickleError, load_hang_tables, read_dump, safe_unpickle


class _Reduce:
    """Pickles as ``fn(*args)``: what an attacker's dump does."""

    def __init__(self, fn, *args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _hostile(tmp_path: Path, marker: Path) -> list[tuple[str, bytes]]:
    cmd = f"touch {marker}"
    return [
        ("os.system", pickle.dumps(_Reduce(os.system, cmd))),
        ("eval", pickle.dumps(_Reduce(eval, f"open({str(marker)!r}, 'w')"))),
        ("exec inside a dict", pickle.dumps({"version": "2.10", "entries": [_Reduce(exec, f"open({str(marker)!r}, 'w')")]})),
        ("subprocess", pickle.dumps(_Reduce(__import__("subprocess").call, ["touch", str(marker)]))),
        ("protocol 0", pickle.dumps(_Reduce(os.system, cmd), protocol=0)),
    ]


@pytest.mark.parametrize("case", range(5))
def test_hostile_pickle_is_refused_and_never_runs(tmp_path, case):
    marker = tmp_path / "pwned"
    label, data = _hostile(tmp_path, marker)[case]
    dump = tmp_path / "nccl_trace_rank_0"
    dump.write_bytes(data)
    with pytest.raises(UnsafePickleError) as exc:
        read_dump(dump)
    msg = str(exc.value)
    assert msg.startswith(str(dump)), msg
    assert "\n" not in msg and "refused" in msg, msg
    assert not marker.exists(), f"{label}: the pickle ran"


def test_hostile_dump_in_a_folder_is_a_problem_line_not_a_crash(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(_Reduce(os.system, f"touch {marker}")))
    tables = load_hang_tables(tmp_path)
    assert not marker.exists()
    assert tables.entries.is_empty()
    assert len(tables.problems) == 1 and "nccl_trace_rank_1" in tables.problems[0] and "refused" in tables.problems[0]


def test_cli_refuses_a_hostile_dump_with_one_line(tmp_path):
    from typer.testing import CliRunner

    from workbench.cli import app

    marker = tmp_path / "pwned"
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "nccl_trace_rank_0").write_bytes(pickle.dumps(_Reduce(os.system, f"touch {marker}")))
    result = CliRunner().invoke(app, ["analyze", str(dumps), "--json"])
    assert not marker.exists()
    import json

    assert result.exit_code == 0, (result.output, result.exception)
    problems = json.loads(result.output)["problems"]
    assert len(problems) == 1 and problems[0].startswith(str(dumps / "nccl_trace_rank_0")), problems
    assert "refused" in problems[0] and "posix.system" in problems[0]


def test_plain_data_still_loads():
    data = {"version": "2.10", "entries": [{"process_group": ("0", "default_pg"), "input_sizes": [[4]],
                                            "x": 1.5, "ok": True, "none": None, "b": b"raw", "s": {1, 2}}]}
    assert safe_unpickle(pickle.dumps(data)) == data
    del data["entries"][0]["b"], data["entries"][0]["s"]  # protocol 2 builds bytes and sets with globals: refused
    assert safe_unpickle(pickle.dumps(data, protocol=2)) == data


def test_not_a_pickle_is_one_clear_line(tmp_path):
    bad = tmp_path / "nccl_trace_rank_3"
    bad.write_bytes(b"\x80\x04garbage")
    with pytest.raises(TraceError) as exc:
        read_dump(bad)
    assert str(exc.value).startswith(str(bad)) and "\n" not in str(exc.value)
    assert isinstance(exc.value, InputError)
    text = tmp_path / "other_rank_2"
    text.write_text("hello")
    with pytest.raises(TraceError, match="not a readable pickle"):
        read_dump(text)
    lst = tmp_path / "list_rank_4"
    lst.write_bytes(__import__("pickle").dumps([1, 2]))
    with pytest.raises(TraceError, match="not a Flight Recorder dump"):
        read_dump(lst)


# ------------------------------------------------------------------------------------ bounds (issue 35)
def _dump(entries, **extra) -> dict:
    return {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries, **extra}


def _refused(path: Path, phrase: str) -> str:
    with pytest.raises(TraceError) as exc:
        read_dump(path)
    msg = str(exc.value)
    assert msg.startswith(str(path)) and phrase in msg and "\n" not in msg, msg
    for name in ("RecursionError", "MemoryError", "ValueError", "Error:"):
        assert name not in msg, msg
    return msg


def test_shared_reference_bomb_is_refused_before_anything_expands_it(tmp_path):
    """A sub-kilobyte pickle whose list references the previous one twice, 40 times: 2^40 elements expanded."""
    x: list = [1]
    for _ in range(40):
        x = [x, x]
    data = pickle.dumps(_dump([{"profiling_name": "gloo:all_reduce", "input_sizes": x}]), protocol=2)
    assert len(data) < 1000
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    _refused(path, "expands to more than 50,000,000 elements")
    tables = load_hang_tables(tmp_path)
    assert tables.entries.is_empty() and "expands to more than" in tables.problems[0]


def test_entries_sharing_one_list_count_every_reference(tmp_path):
    shared = list(range(1000))
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(_dump([{"input_sizes": shared, "collective_seq_id": i} for i in range(200_000)])))
    _refused(path, "counting each shared reference")
    same = tmp_path / "nccl_trace_rank_1"
    same.write_bytes(pickle.dumps(_dump([{"input_sizes": shared}] * 200_000)))
    _refused(same, "expands to more than")


def test_shared_references_within_the_bounds_still_load(tmp_path):
    """torch's pickler shares the frame dicts of every entry: a dump of shared frames reads as before."""
    frames = [{"filename": "/home/u/train.py", "line": 12, "name": "step"}]
    entries = [{"process_group": ("0", "default_pg"), "collective_seq_id": i + 1, "profiling_name": "gloo:all_reduce",
                "input_sizes": [[4]], "input_dtypes": ["Float"], "state": "completed", "time_created_ns": i,
                "frames": frames} for i in range(1000)]
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(_dump(entries), protocol=2))
    d = read_dump(path)
    assert len(d.entries) == 1000 and not d.notes
    entries_t, _ = fr.dump_tables([d])
    assert entries_t.height == 1000 and entries_t["call_site"][0] == "/home/u/train.py:12 in step"


def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path):
    n = 200_000   # a list inside a list, 200k deep: built by hand (pickle.dumps itself would recurse)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".")
    _refused(path, "nested deeper than 64 levels")
    deep_json = tmp_path / "nccl_trace_rank_1.json"
    deep_json.write_bytes(b'{"version": "2.10", "pg_config": {}, "entries": [' + b"[" * 100 + b"]" * 100 + b"]}")
    _refused(deep_json, "nested deeper than 64 levels")
    very_deep = tmp_path / "nccl_trace_rank_2.json"
    very_deep.write_bytes(b'{"version": "2.10", "pg_config": {}, "entries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    _refused(very_deep, "invalid JSON")


@pytest.mark.parametrize("levels", [64, 65])
def test_the_depth_limit_is_exact(levels):
    obj: list = []
    for _ in range(levels - 1):
        obj = [obj]
    if levels <= fr.MAX_DUMP_DEPTH:
        assert fr.check_bounds(obj, "x") == levels
    else:
        with pytest.raises(TraceError, match="nested deeper than 64"):
            fr.check_bounds(obj, "x")
    chain: list = [[]]
    for _ in range(levels - 3):
        chain.append([chain[-1]])
    shared = [[chain[-1]], chain[-1]]   # the deepest part reached twice: measured once, its depth counted from both
    if levels <= fr.MAX_DUMP_DEPTH:
        assert fr.check_bounds(shared, "x") == 2 * levels - 2
    else:
        with pytest.raises(TraceError, match="nested deeper than 64"):
            fr.check_bounds(shared, "x")


def test_a_list_containing_itself_is_refused(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x02]q\x00h\x00a.")   # L = []; L.append(L)
    _refused(path, "contains itself")


def test_pickle_operations_are_counted_in_a_large_file(tmp_path, monkeypatch):
    """Past MAX_DUMP_OPS bytes a file could hold more operations than the limit: they are counted (decoded, never
    run) before the unpickler builds anything."""
    monkeypatch.setattr(fr, "MAX_DUMP_OPS", 1000)
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(b"\x80\x02](" + b"N" * 5000 + b"e.")     # 5,000 Nones appended to one list
    _refused(path, "more than 1,000 pickle operations")
    small = tmp_path / "nccl_trace_rank_1"
    small.write_bytes(pickle.dumps(_dump([{"collective_seq_id": 1}]), protocol=2))
    assert len(small.read_bytes()) < 1000 and read_dump(small).entries == [{"collective_seq_id": 1}]


def test_torch_jit_typed_lists_are_returned_not_copied():
    """The typed-list rebuilders of old dumps give back their argument (a copy per reference would let a few
    bytes build gigabytes); anything but a list is refused."""
    data = b"\x80\x02ctorch.jit._pickle\nbuild_intlist\nq\x00](K\x01K\x02eq\x01\x85Rh\x00h\x01\x85R\x86."
    a, b = safe_unpickle(data)
    assert a == [1, 2] and a is b
    with pytest.raises(TraceError, match="not a readable pickle"):
        safe_unpickle(b"\x80\x02ctorch.jit._pickle\nbuild_intlist\nK\x01\x85R.")
    with pytest.raises(TraceError, match="not a readable pickle"):
        safe_unpickle(b"\x80\x02ccollections\nOrderedDict\n](K\x01K\x02ee\x85R.")


@pytest.mark.parametrize("protocol", [0, 1])
def test_old_protocol_pickles_named_like_dumps_are_noted(tmp_path, protocol):
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump([{"collective_seq_id": 1}]), protocol=protocol))
    (folder / "fr_trace_rank_1.pkl").write_bytes(pickle.dumps(_dump([]), protocol=protocol))
    (folder / "notes_7.txt").write_bytes(pickle.dumps([1], protocol=protocol))   # not named like a dump: not read
    tables = load_hang_tables(folder)
    assert tables.entries.is_empty()
    assert len(tables.problems) == 2, tables.problems
    for p in tables.problems:
        assert "protocol 0/1 pickle" in p and "refused" in p and "\n" not in p
    assert {p.split(":")[0] for p in tables.problems} == {str(folder / "nccl_trace_rank_0"),
                                                          str(folder / "fr_trace_rank_1.pkl")}


TORCH_JSON_DUMP = {   # the shape torch 2.13's _dump_fr_trace_json() writes (keys sorted; no stacks)
    "comm_lib_version": "", "nccl_comm_state": {},
    "entries": [{"collective_seq_id": s, "input_dtypes": ["Float"], "input_sizes": [[4]], "is_p2p": False, "op_id": s,
                 "output_dtypes": ["Float"], "output_sizes": [[4]], "p2p_seq_id": 0, "pg_id": 0,
                 "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce", "record_id": s - 1,
                 "retired": True, "state": "completed", "thread_id": "1", "thread_name": "python",
                 "time_created_ns": 1_796_513_087_648_474_995 + s, "time_discovered_completed_ns": 0,
                 "time_discovered_started_ns": 0, "timeout_ms": 1_800_000} for s in (1, 2, 3)],
    "pg_config": {"0": {"desc": "default_pg", "name": "0", "ranks": "[0, 1]"}},
    "pg_status": {"0": {"last_completed_collective": "3", "last_enqueued_collective": "3",
                        "last_started_collective": "-1"}},
    "version": "2.10",
}


def test_json_dumps_are_read_not_taken_for_kineto_traces(tmp_path):
    """docs/hangs.md: a folder of `<prefix><rank>.json` dumps (torch's JSON form) is read like pickles."""
    import json as _json

    from typer.testing import CliRunner

    from workbench.cli import app

    folder = tmp_path / "dumps"
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"nccl_trace_rank_{rank}.json").write_bytes(orjson.dumps(TORCH_JSON_DUMP))
    d = read_dump(folder / "nccl_trace_rank_1.json")
    assert d.rank == 1 and len(d.entries) == 3
    tables = load_hang_tables(folder)
    assert tables.entries.height == 6 and not tables.problems
    assert tables.status.filter(pl.col("rank") == 0)["last_completed"].to_list() == [3]
    result = CliRunner().invoke(app, ["info", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    info = _json.loads(result.output)
    assert not info["problems"] and [r["op"] for r in info["ranks_last"]] == ["all_reduce", "all_reduce"]


def _in_thread(fn, timeout_s: float = 120):
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(value=fn()), daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), "reading blocked (a FIFO or device was read)"
    return out["value"]


def test_fifos_devices_and_huge_files_in_a_run_directory(tmp_path):
    """Hang files that are FIFOs, /dev/zero or a 1 GiB fatal.txt: each one line in problems, nothing blocks, the
    rest is read (fatal.txt from its last MiB)."""
    run = tmp_path / "run"
    (run / "rank0" / "hang").mkdir(parents=True)
    (run / "rank1" / "hang").mkdir(parents=True)
    (run / "run.json").write_text('{"world_size": 2}')
    h0, h1 = run / "rank0" / "hang", run / "rank1" / "hang"
    os.mkfifo(h0 / "fr_trace_rank_0")
    (h0 / "events.jsonl").symlink_to("/dev/zero")
    os.mkfifo(h0 / "heartbeat.jsonl")
    fatal = h1 / "fatal.txt"
    with fatal.open("wb") as fh:   # sparse: 1 GiB of zeros, then the real traceback at its end
        fh.truncate(1 << 30)
        fh.seek(1 << 30)
        fh.write(b'\nFatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n'
                 b'  File "/home/u/train.py", line 42 in step\n  File "/home/u/train.py", line 50 in <module>\n')
    (h1 / "fr_trace_rank_1").symlink_to("/dev/zero")
    tables = _in_thread(lambda: load_hang_tables(run))
    text = "\n".join(tables.problems)
    assert f"{h0 / 'fr_trace_rank_0'}: a FIFO, not a file" in text
    assert f"{h0 / 'events.jsonl'}: a character device, not a file" in text
    assert f"{h0 / 'heartbeat.jsonl'}: a FIFO, not a file" in text
    assert f"{h1 / 'fr_trace_rank_1'}: a character device, not a file" in text
    assert f"{fatal}: 1,073,741,9" in text and "only its last 1 MiB read" in text
    r1 = tables.rank_state.filter(pl.col("rank") == 1).row(0, named=True)
    assert r1["fatal"] and r1["fatal_call_site"] == "/home/u/train.py:42 in step"


def test_a_huge_dump_is_refused_unread(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    with path.open("wb") as fh:
        fh.truncate(fr.MAX_DUMP_BYTES + 1)
    _refused(path, "larger than the 512 MiB a Flight Recorder dump may have")


def test_rank_ids_and_fields_out_of_range(tmp_path):
    """A 20-digit rank in the file name is refused with one line; fields of the wrong type or past int64 are kept
    as null and counted, and the collective is kept."""
    big = tmp_path / "nccl_trace_rank_99999999999999999999"
    big.write_bytes(pickle.dumps(_dump([])))
    _refused(big, "is not an id below 2^31")
    ok = tmp_path / "nccl_trace_rank_0"
    ok.write_bytes(pickle.dumps(_dump([
        {"process_group": ("0", "default_pg"), "collective_seq_id": 2**70, "profiling_name": 7, "state": "completed",
         "input_sizes": [[2**70]], "time_created_ns": "12", "frames": "not a list"},
        {"process_group": ("0", "default_pg"), "collective_seq_id": 2, "profiling_name": "gloo:broadcast",
         "input_sizes": [{(1, 2): 3}], "time_created_ns": float("inf")},
        "not an entry",
    ])))
    tables = load_hang_tables(tmp_path)
    rows = tables.entries.sort("created_ns", nulls_last=True).to_dicts()
    assert [r["op"] for r in rows] == ["7", "broadcast"]
    assert rows[0]["seq"] is None and rows[0]["in_sizes"] is None and rows[0]["created_ns"] == 12
    assert rows[1]["seq"] == 2 and rows[1]["in_sizes"] is None and rows[1]["created_ns"] is None
    text = "\n".join(tables.problems)
    assert "nccl_trace_rank_99999999999999999999: rank 99999999999999999999" in text
    assert "1 of 3 entries skipped: not objects" in text
    assert "wrong type" in text and "'collective_seq_id' in 1" in text and "'input_sizes' in 2" in text


def test_ranks_last_lists_absent_ranks_only_while_few(tmp_path):
    """A run stating a world size of 1,000,000 with one rank present: one row (the run's problems count the
    missing ranks), not a million; a world size of 3: the two ranks without a record are rows too."""
    from types import SimpleNamespace

    from workbench import schema
    from workbench.analyses.rank_end import rank_last_rows

    (tmp_path / "nccl_trace_rank_0.json").write_bytes(orjson.dumps(TORCH_JSON_DUMP))

    def rows(world_size):
        run = SimpleNamespace(path=tmp_path, steps=schema.empty(schema.STEPS), compiles=schema.empty(schema.COMPILES),
                              world_size=world_size,
                              problems=[])
        return rank_last_rows(fr.run_hangs(run), run.steps, run.compiles, world_size)

    assert [(r["rank"], r["state"]) for r in rows(3)] == [(0, "unknown"), (1, "unknown"), (2, "unknown")]
    assert [r["rank"] for r in rows(1_000_000)] == [0]
    assert rows(1_000_000)[0]["last_collective"].startswith("pg 0 seq 3 all_reduce")
