"""Flight Recorder entries for every step (issue 30 req 1): the collector dumps the recorder before its buffer wraps,
the readers merge those dumps with the one written at close, and a foreign gzip bomb is refused in one line.
Real one-rank gloo processes (forked from one that imported torch)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

from workbench.errors import TraceError
from workbench.flight_recorder import MAX_DUMP_BYTES, find_dumps, load_hang_tables, read_dump

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
STEPS = 150

WORKER = textwrap.dedent('''
    import os, socket, sys, time
    import torch, torch.distributed as dist
    from workbench.collectors import Collector

    out, steps = sys.argv[1], int(sys.argv[2])
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    with Collector(out, profile_repeat=0, compile_capture=False) as c:
        for step in range(steps):
            with c.step():
                dist.all_reduce(torch.ones(3))
                time.sleep(0.05)          # a few collectives per watchdog look: none is overwritten
''')


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """150 steps of one all-reduce, a Flight Recorder buffer of 64 entries (a dump is due at 48: 16 steps, 0.8 s, before
    anything is overwritten), the dump budget lifted (1.0)."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("fr")
    script = tmp / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": "64",
           "WORKBENCH_FR_DUMP_BUDGET": "1"}
    env.pop("RANK", None)
    p = subprocess.run([sys.executable, str(script), str(tmp / "run"), str(STEPS)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return tmp / "run"


def test_every_collective_is_kept_although_the_buffer_holds_64(run: Path) -> None:
    periodic = sorted((run / "rank0/hang/fr").glob("*.pkl.gz"))
    assert len(periodic) >= STEPS // 64
    events = [json.loads(x) for x in (run / "rank0/hang/events.jsonl").read_text().splitlines()]
    dumps = [e for e in events if e["event"] == "fr_dump"]
    assert len(dumps) == len(periodic) and sum(e["lost"] for e in dumps) == 0
    tables = load_hang_tables(run)
    assert not tables.problems
    seqs = tables.entries.filter(pl.col("op") == "all_reduce")["seq"].to_list()
    assert sorted(seqs) == list(range(1, STEPS + 1))          # each once: periodic and final dumps merged
    # the last entries come from the dump written at close, with their call site (the periodic ones have none)
    last = tables.entries.filter(pl.col("seq") == STEPS).row(0, named=True)
    assert last["call_site"] and "worker.py" in last["call_site"]


def test_every_step_has_its_collective(run: Path) -> None:
    import workbench
    from workbench.analyses.critical_path import critical_path_of

    cp = critical_path_of(workbench.open(run))
    assert sorted(cp.sync["step"].unique().to_list()) == list(range(STEPS))


def test_periodic_dumps_are_found_only_in_the_run_directory_layout(run: Path) -> None:
    found = find_dumps(run)
    assert any(p.parent.name == "fr" for p in found[0])


def test_a_gzip_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "000000.pkl.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        block = b"\0" * (1 << 20)
        for _ in range(MAX_DUMP_BYTES // len(block) + 1):
            fh.write(block)
    with pytest.raises(TraceError, match="unzips to more than"):
        read_dump(path, rank=0)


def test_a_gzipped_dump_reads_like_a_plain_one(tmp_path: Path) -> None:
    doc = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [
        {"record_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1, "p2p_seq_id": 0,
         "profiling_name": "gloo:all_reduce", "time_created_ns": 5, "state": "scheduled", "is_p2p": False}]}
    path = tmp_path / "000001.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(doc, protocol=2)))
    d = read_dump(path, rank=3)
    assert d.rank == 3 and d.entries[0]["collective_seq_id"] == 1
