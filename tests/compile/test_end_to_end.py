"""Issue 5, item 6: a real 2-rank gloo run where rank 1 alone sees another batch size at step 4 →
``workbench analyze`` finds the divergent recompile (rank, step, the others' wait) → ``workbench recommend -o`` →
the rerun with that config has no divergent recompile and a shorter worst step."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("divergent_worker.py")
ODD_RANK, ODD_STEP = 1, 4

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(out: Path, *extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_port()), str(WORKER), "--out", str(out),
           "--odd-rank", str(ODD_RANK), "--odd-step", str(ODD_STEP), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _workbench(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _worst_step_ns(run) -> int:
    """The slowest step after step 0 (step 0 holds every rank's first compile), over all ranks."""
    s = run.steps.filter((pl.col("source").cast(pl.String) == "collector") & (pl.col("step") > 0))
    return int(s["dur"].max())


def test_divergent_recompile_fixed_by_recommended_config(tmp_path):
    import workbench
    from workbench.analyses.recompiles import divergent_compiles

    before, after, fixes = tmp_path / "before", tmp_path / "after", tmp_path / "fixes.toml"
    _torchrun(before)

    # analyze: the divergent recompile on rank 1 at step 4, and rank 0's wait
    summary = json.loads(_workbench("analyze", str(before), "--json"))
    div = [f for f in summary["findings"] if "divergen" in f["kind"]]
    assert div, [f["kind"] for f in summary["findings"]]
    ev = div[0]["evidence"] if isinstance(div[0]["evidence"], dict) else json.loads(div[0]["evidence"])
    assert ev["compiling_ranks"] == [ODD_RANK] and ev["waiting_ranks"] == [0] and ev["step"] == ODD_STEP
    assert div[0]["steps"] == [ODD_STEP] and sorted(div[0]["ranks"]) == [0, 1]
    assert ev["wait_ns"] > 0

    # recommend: the config marks the batch dim dynamic
    _workbench("recommend", str(before), "-o", str(fixes))
    text = fixes.read_text()
    assert "[mark_dynamic]" in text and "divergent_recompile" in text
    from workbench.compile_config import load_compile_config

    cfg = load_compile_config(fixes)
    assert [(m.arg, m.dim) for m in cfg.mark_dynamic] == [("0", 0)]

    # rerun with the config
    _torchrun(after, "--compile-config", str(fixes))
    run_b, run_a = workbench.open(before), workbench.open(after)
    assert json.loads((after / "run.json").read_text())["compile_config"]["mark_dynamic"] == {"0": {"dim": 0}}
    assert divergent_compiles(run_b.compiles).height == 1
    assert divergent_compiles(run_a.compiles).height == 0
    assert run_a.compiles.filter(pl.col("frame_compile_id") > 0).height == 0  # no recompile at all
    worst_b, worst_a = _worst_step_ns(run_b), _worst_step_ns(run_a)
    print(f"worst step after step 0: before {worst_b / 1e6:.1f} ms, after {worst_a / 1e6:.1f} ms; "
          f"divergent wait before {ev['wait_ns'] / 1e6:.1f} ms ({ev['cost_method']})")
    assert worst_a < worst_b, (worst_a, worst_b)

    diff = json.loads(_workbench("diff", str(before), str(after), "--json"))
    assert diff["after"] == str(after)
    kinds = {f["kind"]: f["verdict"] for f in diff["findings"]}
    assert kinds["divergent_recompile"] == "fixed", kinds
    job = {m["name"]: m for m in diff["metrics"]}  # the diff's per-step metrics (analyses/diff.py)
    assert (job["recompiles"]["before"], job["recompiles"]["after"], job["recompiles"]["direction"]) == (1, 0, "better")
    assert job["worst step"]["after"] < job["worst step"]["before"], job["worst step"]
