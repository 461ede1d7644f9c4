"""The read-back check is no rubber stamp: a trace moved by one nanosecond, missing an end, naming the wrong rank
or losing a flow is caught, in both formats."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

import workbench
from workbench.export import export_run
from workbench.export.perfetto import frame_packet
from workbench.export.readback import check, packets, read

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def run():
    return workbench.open(SAMPLES / "cpu-gloo-4rank")


def _json_tampered(src: Path, dst: Path, change) -> None:
    doc = orjson.loads(src.read_bytes())
    change(doc["traceEvents"])
    dst.write_bytes(orjson.dumps(doc))


def _problems(run, path: Path) -> list[str]:
    return check(run, read(path))[0]


def test_untouched_exports_pass(tmp_path, run):
    for name in ("t.json", "t.pftrace"):
        export_run(run, tmp_path / name)
        assert _problems(run, tmp_path / name) == []


def test_json_one_nanosecond_off_is_caught(tmp_path, run):
    export_run(run, tmp_path / "t.json")

    def nudge(events):
        e = next(e for e in events if e.get("cat") == "cpu_op")
        e["ts"] = round(e["ts"] + 0.001, 3)

    _json_tampered(tmp_path / "t.json", tmp_path / "bad.json", nudge)
    assert any("Kineto events" in p for p in _problems(run, tmp_path / "bad.json"))


def test_json_wrong_rank_and_lost_flow_are_caught(tmp_path, run):
    export_run(run, tmp_path / "t.json")

    def rename(events):
        next(e for e in events if e.get("name") == "process_name" and e["pid"] == 2)["args"]["name"] = "rank 7 · vm · CPU"

    _json_tampered(tmp_path / "t.json", tmp_path / "r.json", rename)
    assert any("not after rank 1" in p for p in _problems(run, tmp_path / "r.json"))

    def drop_flow(events):
        events.remove(next(e for e in events if e.get("ph") == "f"))

    _json_tampered(tmp_path / "t.json", tmp_path / "f.json", drop_flow)
    assert any("endpoint" in p for p in _problems(run, tmp_path / "f.json"))


def test_protobuf_lost_end_and_moved_slice_are_caught(tmp_path, run):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    export_run(run, tmp_path / "t.pftrace")
    ps = list(packets(tmp_path / "t.pftrace"))
    ends = [i for i, p in enumerate(ps) if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_END]
    lost = [p for i, p in enumerate(ps) if i != ends[len(ends) // 2]]
    (tmp_path / "lost.pftrace").write_bytes(b"".join(frame_packet(p.SerializeToString()) for p in lost))
    assert any("never ended" in p for p in _problems(run, tmp_path / "lost.pftrace"))
    ps[ends[3]].timestamp += 1
    (tmp_path / "moved.pftrace").write_bytes(gzip.compress(b"".join(frame_packet(p.SerializeToString()) for p in ps)))
    assert _problems(run, tmp_path / "moved.pftrace")


def test_cut_protobuf_is_one_line(tmp_path, run):
    export_run(run, tmp_path / "t.pftrace")
    data = (tmp_path / "t.pftrace").read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(data[:-1])   # the last packet cut (a cut between packets is a shorter trace)
    with pytest.raises(ValueError, match="cut short"):
        read(tmp_path / "cut.pftrace")
