"""Run a fault: one process per rank (gloo on CPU, NCCL with one GPU per rank), then write its ground truth.

:func:`run_fault` starts ``world_size`` worker processes (``python -m workbench_zoo.runner``) with the
``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``, plus the fault's ``rank_env``),
waits for them (killing the rest at the timeout, so a planted hang ends), and writes ``ground_truth.json``
beside ``run.json`` from the ranks' own measurements (``fault/rank<R>.json``).

On CPU the ranks are forked from one launcher that imported torch once (:mod:`workbench_zoo._launch`): each
rank is still its own process with its own environment, gloo connection and compile state.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workbench_zoo._launch import LAUNCHER_LOG, can_fork, run_forked
from workbench_zoo.registry import (
    GENERATED, GROUND_TRUTH, LOG_FILE, PLAN_FILE, RECORD_FILE, RankRecord, get_fault, load_module,
)

#: The folder that holds this package: on the ranks' ``PYTHONPATH``, so that they run this same zoo.
ZOO_ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_fault(name: str, out: str | Path, *, compile_config: str | Path | None = None,
              timeout_s: float | None = None, env: dict[str, str] | None = None,
              clean: bool = True) -> dict[str, Any]:
    """Record fault ``name`` into run directory ``out`` (emptied first when ``clean``); returns the ground truth.

    ``compile_config``: a compile-config TOML the ranks' collectors apply (the rerun with a fix).
    """
    out = Path(out).resolve()                  # the ranks write into it too
    plan = out / PLAN_FILE
    keep = plan.read_bytes() if name == GENERATED and plan.is_file() else None   # a generated case's spec
    if clean and out.exists():
        shutil.rmtree(out)
    (out / "fault").mkdir(parents=True, exist_ok=True)
    if keep is not None:
        plan.write_bytes(keep)
    fault = get_fault(name, out)
    port = _free_port()
    base = run_env(env)
    limit = timeout_s if timeout_s is not None else fault.timeout_s
    if can_fork(fault, base):
        t0 = time.monotonic()
        codes = run_forked(name, out, base, port, limit, compile_config)
        return write_ground_truth(name, out, codes=codes, wall_s=time.monotonic() - t0,
                                  compile_config=compile_config)
    procs: list[subprocess.Popen] = []
    logs = []
    t0 = time.monotonic()
    for rank in range(fault.world_size):
        renv = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(fault.world_size),
                "LOCAL_WORLD_SIZE": str(fault.world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                **fault.rank_env.get(rank, {})}
        log = open(out / LOG_FILE.format(rank=rank), "w")  # noqa: SIM115 - closed below
        logs.append(log)
        cmd = [sys.executable, "-m", "workbench_zoo.runner", name, "--out", str(out)]
        if compile_config:
            cmd += ["--compile-config", str(Path(compile_config).resolve())]
        procs.append(subprocess.Popen(cmd, env=renv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    codes: dict[int, int | None] = {}
    for rank, p in enumerate(procs):
        left = max(0.1, limit - (time.monotonic() - t0))
        try:
            codes[rank] = p.wait(timeout=left)
        except subprocess.TimeoutExpired:
            codes[rank] = None
    for rank, p in enumerate(procs):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            codes[rank] = codes.get(rank) if codes.get(rank) is not None else -9
    for log in logs:
        log.close()
    wall = time.monotonic() - t0
    return write_ground_truth(name, out, codes=codes, wall_s=wall, compile_config=compile_config)


DUMP_LOCATIONS = frozenset({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})


def run_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a fault's ranks (before the per-rank variables): this process's, ``env``, this zoo on
    ``PYTHONPATH`` and one OpenMP thread. Flight Recorder dump locations this process has (a collector of its own
    sets them) are left out: each rank's collector points them into the run."""
    base = {k: v for k, v in os.environ.items() if k not in DUMP_LOCATIONS}
    base.update(env or {})
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [base.get("PYTHONPATH"), str(ZOO_ROOT)]))  # a shim first
    base.setdefault("OMP_NUM_THREADS", "1")
    return base


def write_ground_truth(name: str, out: str | Path, *, codes: dict[int, int | None] | None = None,
                       wall_s: float | None = None, compile_config: str | Path | None = None) -> dict[str, Any]:
    """(Re)compute ``ground_truth.json`` of run ``out`` from its ranks' saved measurements (``fault/rank<R>.json``);
    without ``codes``/``wall_s`` the values of the existing file are kept."""
    module = load_module(name)
    out = Path(out)
    fault = get_fault(name, out)
    old = json.loads((out / GROUND_TRUTH).read_text()) if (out / GROUND_TRUTH).is_file() else {}
    records = {}
    for rank in range(fault.world_size):
        path = out / RECORD_FILE.format(rank=rank)
        if path.is_file():
            records[rank] = RankRecord.from_dict(json.loads(path.read_text()))
    from workbench_zoo.truth import default_ground_truth

    make = getattr(module, "ground_truth", None) or default_ground_truth
    truth = make(records, fault)
    truth.update({"description": fault.description, "fix": fault.fix, "device": fault.device,
                  "world_size": fault.world_size,
                  "returncodes": {str(k): v for k, v in codes.items()} if codes is not None else old.get("returncodes"),
                  "wall_s": round(wall_s, 3) if wall_s is not None else old.get("wall_s"),
                  "compile_config": str(compile_config) if compile_config else old.get("compile_config"),
                  "fault_spec": fault.to_dict()})
    (out / GROUND_TRUTH).write_text(json.dumps(truth, indent=1, default=str) + "\n")
    return truth


def failed_ranks(truth: dict[str, Any]) -> list[int]:
    """Ranks whose process did not exit 0."""
    return [int(r) for r, c in truth.get("returncodes", {}).items() if c != 0]


def tail_log(out: str | Path, rank: int, n: int = 3000) -> str:
    """The end of rank ``rank``'s output (the launcher's, when the rank left none: it never started)."""
    for name in (LOG_FILE.format(rank=rank), LAUNCHER_LOG):
        path = Path(out) / name
        if path.is_file() and path.stat().st_size:
            return path.read_text(errors="replace")[-n:]
    return ""


# ---------------------------------------------------------------------- worker (one rank)
def _worker(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="one rank of a fault run (started by run_fault)")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args(argv)
    import torch
    import torch.distributed as dist

    from workbench_zoo.registry import FaultContext

    module = load_module(args.name)
    fault = get_fault(args.name, args.out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    device = "cpu"
    if fault.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        device = f"cuda:{torch.cuda.current_device()}"
    if world > 1:
        import datetime

        dist.init_process_group("nccl" if fault.device == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=getattr(module, "PG_TIMEOUT_S", 120)))
    ctx = FaultContext(fault, rank, world, Path(args.out), args.compile_config, device)
    try:
        module.main(ctx)
    finally:
        ctx.save()
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
