"""Real multi-rank runs: torchrun, gloo on CPU, ``DDP(torch.compile(model, backend="aot_eager"))``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from collector_helpers import ROOT, compile_metrics, open_run, read_steps

pytest.importorskip("torch")

EXAMPLE = ROOT / "examples" / "cpu_gloo_4rank.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int, out: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(EXAMPLE), "--out", str(out), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def check_run(out: Path, world: int, *, steps: int, window: tuple[int, int], recompile: tuple[int, int],
              straggler: int, delay_s: float) -> None:
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["world_size"] == world and run_json["steps"] == steps
    hashes = {json.loads((out / f"rank{r}/fingerprint.json").read_text())["config_hash"] for r in range(world)}
    assert len(hashes) == 1                      # same config on every rank -> same hash
    for rank in range(world):
        rdir = out / f"rank{rank}"
        fp = json.loads((rdir / "fingerprint.json").read_text())
        assert (fp["rank"], fp["world_size"], fp["backend"], fp["errors"]) == (rank, world, "gloo", [])
        rows, bad = read_steps(rdir)
        assert bad == 0 and sorted(rows) == list(range(steps))
        assert [s for s, r in rows.items() if r["profiled"]] == list(range(window[0], window[1] + 1))
        traces = list((rdir / "trace").glob("*.json.gz"))
        assert [p.name.split(".")[1] for p in traces] == [f"steps{window[0]}-{window[1]}"]
        metrics = compile_metrics(rdir)
        if rank == recompile[0]:
            assert metrics["0/1"]["recompile_user_contexts"] == [f"step={recompile[1]}"]
        else:
            assert "0/1" not in metrics, f"rank {rank} recompiled"
        waits = [r["data_wait_ns"] for s, r in rows.items() if s > 0]
        if rank == straggler:
            assert min(waits) >= delay_s * 1e9 * 0.9
        else:
            assert max(waits) < delay_s * 1e9 * 0.5
    run = open_run(out)
    if run is not None:
        assert sorted(run.ranks["rank"].to_list()) == list(range(world))
        coll = run.steps.filter(run.steps["source"] == "collector")
        prof = run.steps.filter(run.steps["source"] == "profiler")
        assert coll.height == world * steps
        assert sorted(set(prof["step"].to_list())) == list(range(window[0], window[1] + 1))
        assert run.compiles.filter(run.compiles["step"] == recompile[1])["rank"].unique().to_list() == [recompile[0]]


@pytest.mark.slow
def test_four_ranks(tmp_path):
    """One torchrun (4 ranks) with every planted knob moved off its default: rank, step, window, delay."""
    out = tmp_path / "run4"
    torchrun(4, out, "--steps", "8", "--recompile-rank", "0", "--recompile-step", "4",
             "--straggler-rank", "3", "--straggler-delay", "0.03", "--profile-start", "3", "--profile-length", "2")
    check_run(out, 4, steps=8, window=(3, 4), recompile=(0, 4), straggler=3, delay_s=0.03)


SIGTERM_WORKER = """
import sys, time, torch, torch.distributed as dist
sys.path.insert(0, {root!r})
from workbench.collectors import Collector
dist.init_process_group("gloo")
model = torch.nn.Linear(16, 16)
collector = Collector({out!r}, profile_start=2, profile_length=100000)   # a window open when the signal comes
with collector:
    for i in range(100000):
        with collector.step():
            model(torch.randn(4, 16)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            time.sleep(0.02)
"""


@pytest.mark.slow
def test_sigterm_from_torchrun_saves_window_and_run_json(tmp_path):
    """torchrun stops its workers with SIGTERM: each rank's open window is saved, rank 0's final run.json is
    written, no rank reports a step that did not run, and the workers still die of the signal."""
    import gzip
    import signal
    import time

    out = tmp_path / "run"
    script = tmp_path / "worker.py"
    script.write_text(SIGTERM_WORKER.format(root=str(ROOT), out=str(out)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    files = [out / f"rank{r}/steps.jsonl" for r in range(2)]
    while time.time() < deadline and not all(f.exists() and f.read_bytes().count(b"\n") >= 6 for f in files):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)          # the agent forwards SIGTERM to every worker
    log = proc.communicate(timeout=600)[0]
    assert proc.returncode != 0, log[-2000:]
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["stop_reason"] == "SIGTERM" and "finished" in run_json, run_json
    for rank in range(2):
        rdir = out / f"rank{rank}"
        rows, bad = read_steps(rdir)
        assert bad == 0 and sorted(rows) == list(range(len(rows))) and len(rows) >= 6
        fp = json.loads((rdir / "fingerprint.json").read_text())
        assert fp["steps"] == len(rows) and fp["errors"] == []
        if rank == 0:
            assert run_json["steps"] == len(rows)
        traces = list((rdir / "trace").glob("*.json.gz"))
        assert len(traces) == 1, log[-2000:]
        last = max(rows)
        assert traces[0].name.split(".")[1] == f"steps2-{last}"
        events = json.loads(gzip.decompress(traces[0].read_bytes()))["traceEvents"]
        steps_in_trace = {int(e["name"].split("#")[1]) for e in events
                          if e.get("name", "").startswith("ProfilerStep#")}
        assert steps_in_trace == set(range(2, last + 1))
