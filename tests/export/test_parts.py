"""The pieces: lanes that keep every track nested, the event order at equal times, selections, format by name,
waits from collective matching, streaming rank by rank, bytes for the app, and the command line."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.collectives import match_collectives
from workbench.errors import InputError
from workbench.export import export_bytes, export_run, format_of
from workbench.export.model import INSTANT, SLICE, ZERO, Selection, collective_waits, pack, parse_ids
from workbench.export.perfetto import emission_order
from workbench.export.readback import check, read

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"


def test_pack_nests_or_moves_to_a_lane():
    # a contains b; c overlaps a without nesting; d follows a; z has zero length at a's end
    starts, ends = [0, 2, 5, 10, 10], [10, 4, 12, 15, 10]
    kinds = [SLICE, SLICE, SLICE, SLICE, ZERO]
    lanes, depths = pack(starts, ends, kinds)
    assert lanes == [0, 0, 1, 0, 0] and depths == [0, 1, 0, 0, 0]


def test_equal_times_end_inner_first_and_begin_outer_first():
    class T:
        starts, ends = [0, 0, 10, 5], [10, 5, 20, 5]

    order = emission_order(T, [SLICE, SLICE, SLICE, INSTANT], [0, 1, 0, 0])
    assert [(ts, phase, i) for ts, phase, _, i in order] == [
        (0, 2, 0), (0, 2, 1), (5, 0, 1), (5, 1, 3), (10, 0, 0), (10, 2, 2), (20, 0, 2)]


def test_parse_ids_and_errors():
    assert parse_ids("0-3,7, 9-10", "ranks") == (0, 1, 2, 3, 7, 9, 10)
    assert parse_ids(None, "ranks") is None
    for bad in ("x", "3-1", "-2", "1-"):
        with pytest.raises(InputError, match="--steps"):
            parse_ids(bad, "steps")


def test_format_from_the_name():
    assert format_of("a.pftrace") == ("perfetto", False)
    assert format_of("a.pftrace.gz") == ("perfetto", True)
    assert format_of("a.json.gz") == ("json", True)
    assert format_of("A.JSON") == ("json", False)
    with pytest.raises(ValueError, match="cannot tell the format"):
        format_of("a.txt")


def test_waits_are_the_matched_waits_linked_to_the_last_rank():
    run = workbench.open(SAMPLES / "cpu-gloo-4rank")
    m = match_collectives(run.collectives, run.ranks)
    w = collective_waits(run.collectives, run.ranks)
    expect = m.filter(~pl.col("is_last") & (pl.col("wait_ns") > 0))
    assert w.height == expect.height > 0
    assert sorted((w["end"] - w["start"]).to_list()) == sorted(expect["wait_ns"].to_list())
    last = m.filter(pl.col("is_last")).select(on_rank="rank", on_start="arrival")
    assert w.join(last, on=["on_rank", "on_start"], how="anti").is_empty()  # every target is a last arrival
    assert (w["rank"] != w["on_rank"]).all()


def test_written_rank_by_rank_without_reading_every_event(tmp_path):
    run = workbench.open(SAMPLES / "cpu-gloo-4rank")
    writes: list[int] = []

    class Sink(io.BytesIO):
        def write(self, b):  # noqa: ANN001
            writes.append(len(b))
            return super().write(b)

    sink = Sink()
    export_run(run, sink, fmt="perfetto", findings=False)
    assert not run.loaded("events") and not run.loaded("kernels")  # rank by rank from the cache, never whole
    assert len(writes) >= run.ranks.height + 1
    assert max(writes) < sum(writes) / 2


def test_export_bytes_equals_the_file_and_is_deterministic(tmp_path):
    run = workbench.open(SAMPLES / "h200x2-ddp-nccl")
    export_run(run, tmp_path / "x.json.gz", selection=Selection.parse("1", "6"))
    data = export_bytes(run, fmt="json", gzip_output=True, ranks="1", steps="6")
    assert data == (tmp_path / "x.json.gz").read_bytes()
    assert export_bytes(run, ranks="0", steps="5-6") == export_bytes(run, ranks="0", steps="5-6")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_cli_export_and_check(tmp_path):
    out = tmp_path / "run.pftrace"
    r = _cli("export", str(SAMPLES / "cpu-gloo-4rank"), "-o", str(out), "--ranks", "0-1", "--steps", "5-7",
             "--check", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "2 rank(s)" in r.stdout and "checked against the run" in r.stdout
    rb = read(out)
    assert sorted(rb.processes) == [1, 2, 1_000_000_000] or sorted(rb.processes) == [1, 2]
    assert check(workbench.open(SAMPLES / "cpu-gloo-4rank"), rb, Selection.parse("0-1", "5-7"))[0] == []


def test_cli_bad_input_is_one_line(tmp_path):
    """A name that says no format and a backwards step range are usage errors: the usage line, one error line,
    exit 2."""
    r = _cli("export", str(SAMPLES / "cpu-gloo-4rank"), "-o", str(tmp_path / "x.txt"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and lines[0].startswith("Usage:") and "cannot tell the format" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = _cli("export", str(SAMPLES / "cpu-gloo-4rank"), "-o", str(tmp_path / "x.json"), "--steps", "9-2")
    assert r.returncode == 2 and r.stderr.startswith("Usage:") and "--steps" in r.stderr, r.stderr
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.json.tmp").exists()


def test_help_does_not_import_perfetto():
    code = "import sys, workbench.cli; assert 'perfetto' not in sys.modules and 'google.protobuf' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
