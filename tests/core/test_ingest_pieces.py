"""Large traces are parsed in pieces cut between events: the tables must be exactly those of a whole parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench import kineto
from workbench.errors import TraceError

TABLES = ("events", "kernels", "collectives", "steps", "skipped")


def _read(path: Path, piece_bytes: int, monkeypatch: pytest.MonkeyPatch, threads: int = 1) -> kineto.TraceTables:
    monkeypatch.setattr(kineto, "PIECE_BYTES", piece_bytes)
    return kineto.read_trace(path, rank=0 if kineto.rank_from_name(path) is None else None, threads=threads)


def _assert_same(a: kineto.TraceTables, b: kineto.TraceTables) -> None:
    for t in TABLES:
        x, y = getattr(a, t), getattr(b, t)
        assert x.schema == y.schema, t
        assert x.equals(y), t  # same rows in the same order
    assert a.meta == b.meta
    assert (a.rank, a.rank_source) == (b.rank, b.rank_source)


@pytest.mark.parametrize("name", [
    "h200-probe/nccl2c_r0.json.gz",                  # NCCL collectives with args, python stacks
    "h200-probe/ws1c_r0.json.gz",                    # world size 1
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",       # old NCCL kernels, no collective args
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
])
@pytest.mark.parametrize("threads", [1, 3])
def test_real_trace_in_pieces_equals_whole(data_dir: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                           threads: int) -> None:
    path = data_dir / "traces" / name
    whole = _read(path, 1 << 40, monkeypatch)
    monkeypatch.setattr(kineto, "PIECE_BYTES", 150_000)
    parsed = kineto._parse_pieces(kineto.read_bytes(path), threads)
    assert parsed is not None and len(parsed[0]) > 3, "the trace was not cut"
    _assert_same(whole, _read(path, 150_000, monkeypatch, threads))


def _synthetic(n_steps: int = 40, tail_fields: bool = True, bad_strings: bool = False) -> dict:
    events: list[dict] = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
    corr = 0
    for s in range(n_steps):
        t0 = s * 1000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": 900.0})
        for k in range(20):
            corr += 1
            ts = t0 + 10 + k * 40
            comm = k % 5 == 0
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms" if comm else "aten::mm",
                           "pid": 1, "tid": 1, "ts": ts, "dur": 5.0,
                           "args": {"External id": corr, **({"Collective name": "allreduce", "dtype": "Float",
                                                             "In msg nelems": 1024, "Out msg nelems": 1024,
                                                             "Group size": 2, "Process Group Name": "0"}
                                                            if comm else {})}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts + 1, "dur": 2.0, "args": {"correlation": corr, "External id": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32" if comm else "gemm",
                           "pid": 0, "tid": 7, "ts": ts + 3, "dur": 20.0,
                           "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7,
                                    **({"Concrete Inputs": "},{"} if bad_strings else {})}})
            events.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts + 3, "cat": "ac2g", "name": "ac2g"})
    if bad_strings:  # a '},{' inside a string at the end of every event: cuts land inside strings
        events = [{**e, "zz": "},{"} for e in events]
    doc: dict = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
                 "traceEvents": events}
    if tail_fields:  # as Kineto writes them: after the events
        doc.update(traceName="x.json", displayTimeUnit="ms", baseTimeNanoseconds=1_790_000_000_000_000_000)
    return doc


@pytest.mark.parametrize("layout", ["kineto", "compact", "array", "no_tail"])
def test_synthetic_trace_in_pieces_equals_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 layout: str) -> None:
    doc = _synthetic(tail_fields=layout != "no_tail")
    if layout == "array":
        text = json.dumps(doc["traceEvents"], indent=1)
    elif layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    else:
        text = json.dumps(doc, indent=2)
    path = tmp_path / "rank-0.json"
    path.write_text(text)
    whole = _read(path, 1 << 40, monkeypatch)
    monkeypatch.setattr(kineto, "PIECE_BYTES", 20_000)
    parsed = kineto._parse_pieces(path.read_bytes())
    assert parsed is not None and len(parsed[0]) > 5
    if layout in ("kineto", "compact"):  # header fields after the events are read from the last piece
        assert int(parsed[1]["baseTimeNanoseconds"]) == whole.meta["baseTimeNanoseconds"]  # text until checked
    _assert_same(whole, _read(path, 20_000, monkeypatch))


def test_cut_inside_a_string_falls_back_to_whole_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(_synthetic(bad_strings=True), indent=2))
    monkeypatch.setattr(kineto, "PIECE_BYTES", 20_000)
    assert kineto._parse_pieces(path.read_bytes()) is None  # a '},{' inside a string made a bad cut
    assert kineto._parse_pieces(path.read_bytes(), threads=2) is None
    _assert_same(_read(path, 1 << 40, monkeypatch), _read(path, 20_000, monkeypatch, threads=2))


def test_truncated_large_trace_gives_the_same_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank-0.json"
    path.write_bytes(json.dumps(_synthetic(), indent=2).encode()[:-5000])
    messages = []
    for piece, threads in ((1 << 40, 1), (20_000, 1), (20_000, 2)):
        monkeypatch.setattr(kineto, "PIECE_BYTES", piece)
        with pytest.raises(TraceError) as err:
            kineto.read_trace(path, threads=threads)
        messages.append(str(err.value))
    assert messages[0] == messages[1] == messages[2]
    assert "truncated JSON" in messages[0]
