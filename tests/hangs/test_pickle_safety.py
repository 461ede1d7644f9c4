"""A Flight Recorder dump is a pickle: a hostile one is refused with one line naming the file and never runs."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

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
