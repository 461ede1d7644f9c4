"""Run a fault: one process per rank (gloo on CPU, NCCL with one GPU per rank), then write its ground truth.

:func:`run_fault` starts ``world_size`` worker processes (``python -m workbench.faults.runner``) with the
``torchrun`` environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT``, plus the fault's ``rank_env``),
waits for them (killing the rest at the timeout, so a planted hang ends), and writes ``ground_truth.json``
beside ``run.json`` from the ranks' own measurements (``fault/rank<R>.json``).

On CPU the ranks are forked from one launcher process (``python -m workbench.faults.runner --launch NAME``) that
imports torch once: each rank is still its own process with its own environment, gloo connection and compile
state, but the few seconds of CPU that importing torch costs are paid once per fault, not once per rank. A fault
with a per-rank environment (``rank_env``, read by torch at import) and a CUDA fault start each rank from a fresh
interpreter, as does every fault with ``WORKBENCH_FAULTS_FORK=0``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.faults.registry import GROUND_TRUTH, LOG_FILE, RECORD_FILE, Fault, RankRecord, load_module

REPO = Path(__file__).resolve().parents[2]


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
    module = load_module(name)
    fault: Fault = module.FAULT
    out = Path(out)
    if clean and out.exists():
        shutil.rmtree(out)
    (out / "fault").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    base = {**os.environ, **(env or {})}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [base.get("PYTHONPATH"), str(REPO)]))  # a shim first
    base.setdefault("OMP_NUM_THREADS", "1")
    limit = timeout_s if timeout_s is not None else fault.timeout_s
    if _forks(fault, base):
        t0 = time.monotonic()
        codes = _launch_forked(name, out, base, port, limit, compile_config)
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
        cmd = [sys.executable, "-m", "workbench.faults.runner", name, "--out", str(out)]
        if compile_config:
            cmd += ["--compile-config", str(Path(compile_config).resolve())]
        procs.append(subprocess.Popen(cmd, env=renv, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO),
                                      start_new_session=True))
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


def _forks(fault: Fault, env: dict[str, str]) -> bool:
    """Whether the ranks of ``fault`` are forked from one launcher (see the module docstring)."""
    return (env.get("WORKBENCH_FAULTS_FORK", "1") != "0" and fault.device == "cpu" and not fault.rank_env
            and hasattr(os, "fork"))


def _launch_forked(name: str, out: Path, env: dict[str, str], port: int, limit: float,
                   compile_config: str | Path | None) -> dict[int, int | None]:
    """Start the launcher (which forks the ranks and kills them at ``limit``) and return the ranks' exit codes."""
    fault: Fault = load_module(name).FAULT
    cmd = [sys.executable, "-m", "workbench.faults.runner", "--launch", name, "--out", str(out), "--port", str(port),
           "--timeout-s", str(limit)]
    if compile_config:
        cmd += ["--compile-config", str(Path(compile_config).resolve())]
    codes_file = out / CODES_FILE
    codes_file.unlink(missing_ok=True)
    with open(out / LAUNCHER_LOG, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO),
                                start_new_session=True)
        try:
            proc.wait(timeout=limit + 60)          # the launcher kills its ranks at ``limit`` itself
        except subprocess.TimeoutExpired:
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:
        got = {int(r): c for r, c in json.loads(codes_file.read_text()).items()}
    except (OSError, ValueError):
        got = {}
    return {r: got.get(r, -9) for r in range(fault.world_size)}


def write_ground_truth(name: str, out: str | Path, *, codes: dict[int, int | None] | None = None,
                       wall_s: float | None = None, compile_config: str | Path | None = None) -> dict[str, Any]:
    """(Re)compute ``ground_truth.json`` of run ``out`` from its ranks' saved measurements (``fault/rank<R>.json``);
    without ``codes``/``wall_s`` the values of the existing file are kept."""
    module = load_module(name)
    fault: Fault = module.FAULT
    out = Path(out)
    old = json.loads((out / GROUND_TRUTH).read_text()) if (out / GROUND_TRUTH).is_file() else {}
    records = {}
    for rank in range(fault.world_size):
        path = out / RECORD_FILE.format(rank=rank)
        if path.is_file():
            records[rank] = RankRecord.from_dict(json.loads(path.read_text()))
    from workbench.faults.truth import default_ground_truth

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
#: Where the launcher writes the ranks' exit codes and its own output (outside the rank directories).
CODES_FILE = "fault/returncodes.json"
LAUNCHER_LOG = "fault/launcher.log"


def _launcher(argv: list[str]) -> None:
    """Import torch once, fork one process per rank (each with the torchrun environment of its rank, its output in
    ``fault/rank<R>.log``), kill the ranks still running at the timeout, write their exit codes."""
    p = argparse.ArgumentParser(description="fork the ranks of one fault run (started by run_fault)")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.add_argument("--port", required=True)
    p.add_argument("--timeout-s", type=float, required=True)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    fault: Fault = load_module(args.name).FAULT
    _preimport()
    out = Path(args.out)
    world = fault.world_size
    worker_argv = [args.name, "--out", args.out] + (["--compile-config", args.compile_config]
                                                    if args.compile_config else [])
    pids: dict[int, int] = {}
    for rank in range(world):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _forked_rank(rank, world, args.port, out, worker_argv)     # never returns
        pids[pid] = rank
    codes: dict[int, int | None] = {}
    while pids:
        left = args.timeout_s - (time.monotonic() - t0)
        if left <= 0:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        pid, status = os.waitpid(-1, 0 if left <= 0 else os.WNOHANG)
        if pid == 0:
            time.sleep(min(0.05, max(left, 0.0)))
            continue
        if pid in pids:
            codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
    path = out / CODES_FILE
    path.with_suffix(".tmp").write_text(json.dumps({str(r): codes[r] for r in sorted(codes)}))
    path.with_suffix(".tmp").replace(path)


#: What a rank imports while it compiles (aot_eager) and profiles, imported once in the launcher (imports only:
#: nothing is compiled or initialised before the fork, so every rank starts from the state a fresh process has).
PREIMPORT = ("torch", "torch.distributed", "torch._dynamo", "torch._dynamo.convert_frame",
             "torch._dynamo.backends.common", "torch._dynamo.backends.debugging", "torch._functorch.aot_autograd",
             "torch._functorch.partitioners", "torch._inductor.compile_fx", "torch.export._trace", "torch.profiler",
             "torch.nn.parallel", "workbench.collectors")


def _preimport() -> None:
    import importlib

    for module in PREIMPORT:
        importlib.import_module(module)
    from torch._dynamo.backends.registry import _lazy_import

    _lazy_import()                                     # the backend modules a backend lookup imports


def _forked_rank(rank: int, world: int, port: str, out: Path, worker_argv: list[str]) -> None:
    """The forked child: become rank ``rank`` (environment, output file, fresh random state), run the worker, exit
    as an interpreter would (atexit handlers, the exception's traceback and exit code 1)."""
    code = 1
    try:
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                           "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
        fd = os.open(out / LOG_FILE.format(rank=rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        import random

        random.seed()
        sys.argv = [str(Path(__file__)), *worker_argv]
        try:
            _worker(worker_argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:                              # noqa: BLE001 - what the interpreter would print
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _worker(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="one rank of a fault run (started by run_fault)")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args(argv)
    import torch
    import torch.distributed as dist

    from workbench.faults.registry import FaultContext

    module = load_module(args.name)
    fault: Fault = module.FAULT
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
    if sys.argv[1:2] == ["--launch"]:
        _launcher(sys.argv[2:])
    else:
        _worker()
