"""Ingestion of the real Kineto traces in tests/data/traces."""

from __future__ import annotations

import gzip
import json
import shutil
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench import schema
from workbench.errors import InputError
from workbench.kineto import ASSUMED_RANK, read_trace

RANKLESS = ["hta/rank_unavailable", "hta/distributed_info_unavailable", "hta/amd_trace"]


def _ns(us: float) -> int:
    """Exact ns of a microsecond value as the JSON text writes it (float ``us * 1000`` is off past 2**53)."""
    return int((Decimal(repr(us)) * 1000).to_integral_value(ROUND_HALF_EVEN))


def _raw_events(path: Path) -> dict:
    return json.loads(gzip.open(path).read())


def test_every_real_trace_opens(data_dir: Path) -> None:
    files = sorted((data_dir / "traces").rglob("*.json.gz"))
    assert len(files) >= 10
    for f in files:
        needs_rank = any(str(f).startswith(str(data_dir / "traces" / r)) for r in RANKLESS)
        if needs_rank:  # one process and no rank anywhere: rank 0, saying so; --rank still wins
            run = workbench.open(f, cache=False)
            assert run.ranks.get_column("rank").to_list() == [0]
            assert run.ranks.get_column("rank_source").to_list() == [ASSUMED_RANK]
            run = workbench.open(f, rank=5, cache=False)
            assert run.ranks.get_column("rank").to_list() == [5]
            assert run.ranks.get_column("rank_source").to_list() == ["given"]
        else:
            run = workbench.open(f, cache=False)
        assert run.events.height > 0, f
        assert run.events.schema == pl.Schema(schema.EVENTS)
        assert (run.events.get_column("dur") >= 0).all(), f


def test_trace_filter_two_ranks(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/hta/trace_filter", cache=False)
    assert run.ranks.get_column("rank").to_list() == [0, 1]
    assert run.world_size == 128
    info = run.info()
    assert info["ranks"] == [0, 1]
    # every kept event is accounted for: timed events + skipped == raw events
    for rank, name in ((0, "sampled_rank-0.json.gz"), (1, "sampled_rank-1.json.gz")):
        raw = _raw_events(data_dir / "traces/hta/trace_filter" / name)["traceEvents"]
        kept = run.events.filter(pl.col("rank") == rank).height
        skipped = run.skipped.filter(pl.col("rank") == rank).get_column("count").sum()
        assert kept + skipped == len(raw)
    # old NCCL kernels (ncclKernel_*) are communication; their record_param_comms carry no args
    comm = run.kernels.filter(pl.col("kernel_class") == "communication")
    assert comm.height == 20
    assert comm.get_column("name").cast(pl.String).str.starts_with("ncclKernel_SendRecv").all()
    assert set(run.collectives.get_column("collective").cast(pl.String)) == {"sendrecv"}


def test_nccl_collectives_have_args_and_kernel_times(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/h200-probe/nccl2c_r1.json.gz", cache=False)
    assert run.ranks.get_column("rank").to_list() == [1]
    c = run.collectives
    assert c.height == 42
    row = c.row(0, named=True)
    assert row["collective"] == "allreduce"
    assert row["pg_name"] == "0" and row["pg_ranks"] == "[0, 1]" and row["group_size"] == 2
    assert row["dtype"] == "Float" and row["in_elems"] > 0 and row["bytes"] == row["in_elems"] * 4
    assert row["kernel_name"].startswith("ncclDevKernel_AllReduce")
    assert row["kernel_start"] >= row["start"] and row["kernel_end"] > row["kernel_start"]
    assert c.get_column("seq").to_list() == list(range(42))
    # the DDP/side-stream kernels are communication by name, whatever stream they ran on
    comm = run.kernels.filter(pl.col("kernel_class") == "communication")
    assert comm.height == 42


def test_world_size_one_reduce_kernels_are_communication(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/h200-probe/ws1c_r0.json.gz", cache=False)
    comm = run.kernels.filter(pl.col("kernel_class") == "communication")
    assert comm.height > 0
    assert comm.get_column("name").cast(pl.String).str.contains("onerank").all()
    assert run.collectives.filter(pl.col("collective") == "wait").height == 0


def test_times_are_absolute_ns_and_launches_linked(data_dir: Path) -> None:
    path = data_dir / "traces/hta/nccl_parser_config/nccl_data.json.gz"
    doc = _raw_events(path)
    base = doc["baseTimeNanoseconds"]
    first_kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    run = workbench.open(path, cache=False)
    k = run.kernels.filter(pl.col("correlation") == first_kernel["args"]["correlation"]).row(0, named=True)
    assert k["start"] == base + _ns(first_kernel["ts"])
    assert abs(k["end"] - (base + _ns(first_kernel["ts"]) + _ns(first_kernel["dur"]))) <= 1
    assert k["launch_start"] is not None and k["launch_start"] <= k["start"]
    assert run.kernels.get_column("launch_start").is_not_null().mean() > 0.99
    # steps from ProfilerStep#N, and device events take their launch's step
    assert run.steps.get_column("source").cast(pl.String).unique().to_list() == ["profiler"]
    assert run.kernels.get_column("step").is_not_null().any()


def test_nanosecond_fractions_survive(data_dir: Path) -> None:
    path = data_dir / "traces/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    doc = _raw_events(path)
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["ts"] % 1)
    run = workbench.open(path, cache=False)
    row = run.kernels.filter(pl.col("correlation") == k["args"]["correlation"]).row(0, named=True)
    # No base: epoch microseconds (~1.7e15) with a fraction. A float64 holds them to 0.25 µs, so the
    # fraction in the JSON text is only kept to the nearest representable value (documented limitation).
    assert abs(row["start"] - _ns(k["ts"])) <= 125
    assert abs(row["dur"] - _ns(k["dur"])) <= 250


def test_old_trace_without_base_time(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/hta/distributed_info_unavailable", rank=0, cache=False)
    assert run.ranks.get_column("clock").to_list() == ["absolute"]  # epoch microseconds
    assert run.events.get_column("start").min() > 1_600_000_000 * 10**9


def test_rocm_trace_reads_through_tolerant_parser(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/hta/amd_trace", rank=0, cache=False)
    kernels = run.kernels.filter(pl.col("kind") == "kernel")
    assert kernels.height == 14 and run.kernels.filter(pl.col("kind") == "memcpy").height == 2
    assert kernels.get_column("kernel_class").cast(pl.String).to_list() == ["compute"] * 14


def test_cpu_only_trace_takes_rank_from_distributed_info(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/hta/cpu_only", cache=False)
    assert run.ranks.get_column("rank").to_list() == [34]
    assert run.world_size == 300
    assert run.kernels.height == 0
    assert run.collectives.get_column("backend").cast(pl.String).unique().to_list() == ["gloo"]


def test_two_files_claiming_one_rank_is_an_error(data_dir: Path) -> None:
    with pytest.raises(InputError, match="claim rank 0") as err:
        workbench.open(data_dir / "traces/h200-probe", cache=False)
    assert "nccl2c_r0.json.gz" in str(err.value) and "ws1c_r0.json.gz" in str(err.value)


def test_rank_from_file_name(tmp_path: Path, data_dir: Path) -> None:
    src = data_dir / "traces/hta/rank_unavailable/rank_not_found.json.gz"
    for name, rank in (("rank-3.json.gz", 3), ("rank7.json.gz", 7), ("worker_rank_11.json.gz", 11),
                       ("2.1712345678901.pt.trace.json.gz", 2)):
        d = tmp_path / name.replace(".", "_")
        d.mkdir()
        shutil.copy(src, d / name)
        run = workbench.open(d / name, cache=False)
        assert run.ranks.row(0, named=True)["rank"] == rank
        assert run.ranks.row(0, named=True)["rank_source"] == "file name"


def test_cache_reopen_and_invalidation(tmp_path: Path, data_dir: Path) -> None:
    d = tmp_path / "traces"
    d.mkdir()
    for f in (data_dir / "traces/hta/trace_filter").glob("*.json.gz"):
        shutil.copyfile(f, d / f.name)
    first = workbench.open(d)
    entries = list((d / ".workbench" / "kineto").iterdir())
    assert len(entries) == 2
    again = workbench.open(d)
    assert again.events.equals(first.events)
    assert again.kernels.equals(first.kernels)
    # a changed source file makes a new entry: drop rank 1's events after its first 100
    f = d / "sampled_rank-1.json.gz"
    doc = _raw_events(f)
    doc["traceEvents"] = doc["traceEvents"][:100]
    f.write_bytes(gzip.compress(json.dumps(doc).encode()))
    changed = workbench.open(d)
    assert changed.events.filter(pl.col("rank") == 1).height < first.events.filter(pl.col("rank") == 1).height
    assert len(list((d / ".workbench" / "kineto").iterdir())) == 3


def test_cache_invalidated_by_schema_version(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    d = tmp_path / "t"
    d.mkdir()
    for f in (data_dir / "traces/hta/trace_filter").glob("*.json.gz"):
        shutil.copyfile(f, d / f.name)
    workbench.open(d)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 1000)
    workbench.open(d)
    assert len(list((d / ".workbench" / "kineto").iterdir())) == 4


def test_pandas_view(data_dir: Path) -> None:
    run = workbench.open(data_dir / "traces/hta/trace_filter", cache=False)
    df = run.kernels.to_pandas()
    assert len(df) == run.kernels.height and "kernel_class" in df.columns


def test_read_trace_keeps_every_timed_event(data_dir: Path) -> None:
    path = data_dir / "traces/hta/nccl_parser_config/nccl_data.json.gz"
    raw = _raw_events(path)["traceEvents"]
    timed = [e for e in raw if e.get("ph") in ("X", "i")]
    t = read_trace(path)
    assert t.events.height == len(timed)
    assert t.events.height + t.skipped.get_column("count").sum() == len(raw)


def test_read_only_input_caches_in_user_dir(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    for f in (data_dir / "traces/hta/trace_filter").glob("*.json.gz"):
        shutil.copyfile(f, d / f.name)
    d.chmod(0o555)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "usercache"))
    try:
        workbench.open(d)
    finally:
        d.chmod(0o755)
    assert not (d / ".workbench").exists()
    assert list((tmp_path / "usercache" / "workbench").rglob("meta.json"))
