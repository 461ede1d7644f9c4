"""Parsing on a Dask cluster (``workbench.open(..., cluster=ADDR)``, ``workbench ingest --cluster``) gives the
same tables as the local path and writes the same cache; a real ``distributed.LocalCluster`` with 2 workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import workbench

distributed = pytest.importorskip("distributed", reason="Dask is optional (the scale extra)")

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "cpu-gloo-4rank"
TABLES = ("ranks", "events", "kernels", "collectives", "steps", "compiles", "fingerprints", "skipped")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None,
                                  silence_logs=40) as c:
        yield c


def _copy(dst: Path) -> Path:
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns(".workbench"))
    return dst


def test_cluster_tables_equal_local(cluster, tmp_path: Path) -> None:
    root = _copy(tmp_path / "run")
    remote = workbench.open(root, cluster=cluster.scheduler_address)
    assert not remote.loaded("events")                  # the workers sent back paths, not events
    entries = list((root / ".workbench" / "kineto").iterdir())
    assert len(entries) == remote.ranks.height == 4      # one cache entry per trace, written by the workers
    for local in (workbench.open(root, cache=False), workbench.open(root)):   # parsed here; read from their cache
        for t in TABLES:
            assert_frame_equal(local.table(t), remote.table(t), check_exact=True)
        assert local.info() == remote.info()
    # a bad file on the cluster is one line, the good ranks still load
    bad = _copy(tmp_path / "bad")
    victim = next((bad / "rank2" / "trace").glob("*.json.gz"))
    victim.write_bytes(victim.read_bytes()[:200])
    run = workbench.open(bad, cluster=cluster.scheduler_address, on_error="skip")
    assert sorted(run.ranks.filter(run.ranks["events"] > 0)["rank"].to_list()) == [0, 1, 3]
    assert any(str(victim) in p for p in run.problems)


def test_cli_ingest_cluster(cluster, tmp_path: Path) -> None:
    root = _copy(tmp_path / "cli")
    env = {**os.environ, "WORKBENCH_DASK_SCHEDULER": cluster.scheduler_address}
    res = subprocess.run([sys.executable, "-m", "workbench.cli", "ingest", str(root)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    expected = workbench.open(root)                      # read back from the cache the workers wrote
    assert f"ingested 4 rank(s), {expected.count('events'):,} events" in res.stdout
    assert len(list((root / ".workbench" / "kineto").iterdir())) == 4
