"""Starting a CPU fault's ranks cheaply: fork them from a process that has imported torch once.

Importing torch and what a first ``aot_eager`` compile imports lazily costs a rank several seconds of CPU, far more
than a tiny fault's training. So :func:`run_forked` starts one *launcher* per fault run, which imports all that once
(:data:`PREIMPORT`: imports only — nothing is compiled or initialised) and forks one process per rank. Each rank is
still its own process with the ``torchrun`` environment of its rank, its own gloo connection, compile state and
output file (``fault/rank<R>.log``); the launcher kills the ranks still running at the timeout and writes their exit
codes (``fault/returncodes.json``).

Within ``with shared_launcher():`` (the test sessions, ``bench/faults.py``) the launchers themselves are forked from
one long-lived process that imported torch once for all the runs, as long as the run's environment is the one that
process was started with (torch reads some settings from the environment at import; the launcher then runs in the
run's own environment).

:func:`can_fork` says which faults run this way: CPU faults without a per-rank environment (``rank_env`` may set
what torch reads at import), unless ``WORKBENCH_FAULTS_FORK=0``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Iterator

from workbench_zoo.registry import LOG_FILE, Fault, get_fault

#: The ranks' exit codes and the launcher's own output (outside the rank directories).
CODES_FILE = "fault/returncodes.json"
LAUNCHER_LOG = "fault/launcher.log"
#: What a rank imports while it compiles (aot_eager) and profiles.
PREIMPORT = ("torch", "torch.distributed", "torch._dynamo", "torch._dynamo.convert_frame",
             "torch._dynamo.backends.common", "torch._dynamo.backends.debugging", "torch._functorch.aot_autograd",
             "torch._functorch.partitioners", "torch._inductor.compile_fx", "torch.export._trace", "torch.profiler",
             "torch.nn.parallel", "workbench.collectors")


def can_fork(fault: Fault, env: dict[str, str]) -> bool:
    return (env.get("WORKBENCH_FAULTS_FORK", "1") != "0" and fault.device == "cpu" and not fault.rank_env
            and hasattr(os, "fork"))


def preimport() -> None:
    import importlib

    for module in PREIMPORT:
        importlib.import_module(module)
    with contextlib.suppress(ImportError, AttributeError):  # a private torch API: without it, a slower start only
        from torch._dynamo.backends.registry import _lazy_import

        _lazy_import()                                 # the backend modules a backend lookup imports


def run_forked(name: str, out: Path, env: dict[str, str], port: int, limit: float,
               compile_config: str | Path | None) -> dict[int, int | None]:
    """Run fault ``name``'s ranks (forked, see the module docstring) into ``out``; the ranks' exit codes (-9: killed
    at the timeout or never started)."""
    fault = get_fault(name, out)
    argv = [name, "--out", str(out), "--port", str(port), "--timeout-s", str(limit)]
    if compile_config:
        argv += ["--compile-config", str(Path(compile_config).resolve())]
    codes_file = out / CODES_FILE
    codes_file.unlink(missing_ok=True)
    pool = _POOL
    if pool is None or not pool.matches(env) or not pool.run(argv, env, out / LAUNCHER_LOG, limit + 60):
        with open(out / LAUNCHER_LOG, "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "workbench_zoo._launch", "--launch", *argv], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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


# ---------------------------------------------------------------------- the launcher (one fault run)
def launch(argv: list[str]) -> None:
    """Fork one process per rank, kill those still running at the timeout, write their exit codes."""
    p = argparse.ArgumentParser(description="fork the ranks of one fault run (started by run_fault)")
    p.add_argument("name")
    p.add_argument("--out", required=True)
    p.add_argument("--port", required=True)
    p.add_argument("--timeout-s", type=float, required=True)
    p.add_argument("--compile-config", default=None)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out)
    fault = get_fault(args.name, out)
    worker_argv = [args.name, "--out", args.out] + (["--compile-config", args.compile_config]
                                                    if args.compile_config else [])
    pids: dict[int, int] = {}
    for rank in range(fault.world_size):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _rank(rank, fault.world_size, args.port, out, worker_argv)     # never returns
        pids[pid] = rank
    codes: dict[int, int] = {}
    while pids:
        left = args.timeout_s - (time.monotonic() - t0)
        if left <= 0:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        pid, status = os.waitpid(-1, 0 if left <= 0 else os.WNOHANG)
        if pid == 0:
            time.sleep(min(0.05, left))
        elif pid in pids:
            codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
    tmp = out / (CODES_FILE + ".tmp")
    tmp.write_text(json.dumps({str(r): codes[r] for r in sorted(codes)}))
    tmp.replace(out / CODES_FILE)


def _rank(rank: int, world: int, port: str, out: Path, worker_argv: list[str]) -> None:
    """The forked rank: its environment, output file and a fresh random state; runs the worker and exits as an
    interpreter would (atexit handlers; an exception's traceback and exit code 1)."""
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    _exit_after(lambda: _worker_main(worker_argv), out / LOG_FILE.format(rank=rank))


def _worker_main(worker_argv: list[str]) -> None:
    import random

    from workbench_zoo.runner import _worker

    random.seed()
    sys.argv = [str(Path(__file__).with_name("runner.py")), *worker_argv]
    _worker(worker_argv)


def _exit_after(body, log: Path) -> None:
    """In a forked child: output to ``log``, run ``body``, exit with its status (never returns)."""
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        try:
            body()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:                              # noqa: BLE001 - what the interpreter would print
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


# ---------------------------------------------------------------------- one importer for many runs
class _Pool:
    """A process that imported torch once and forks a launcher per request (a JSON line on its stdin); it answers
    ``<id> started <pid>`` and ``<id> done <code>`` on its stdout."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-m", "workbench_zoo._launch", "--pool"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._said: dict[tuple[str, str], str] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._read, name="fault-launcher-pool", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            rid, what, value = line.decode().split()
            with self._cond:
                self._said[(rid, what)] = value
                self._cond.notify_all()
        with self._cond:
            self._said[("*", "gone")] = ""
            self._cond.notify_all()

    def _wait(self, rid: str, what: str, timeout: float) -> str | None:
        with self._cond:
            self._cond.wait_for(lambda: (rid, what) in self._said or ("*", "gone") in self._said, timeout)
            return self._said.pop((rid, what), None)

    def matches(self, env: dict[str, str]) -> bool:
        """``env`` is the pool's own environment (but for what changes without bearing on imports)."""
        def same(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k not in VOLATILE_ENV}

        return same(env) == same(self.env)

    def run(self, argv: list[str], env: dict[str, str], log: Path, timeout: float) -> bool:
        """Run one launcher in ``env`` (killed after ``timeout`` s); False when the pool could not start it."""
        rid = str(next(self._ids))
        req = {"id": rid, "argv": argv, "env": env, "log": str(log)}
        try:
            with self._lock:
                self.proc.stdin.write((json.dumps(req) + "\n").encode())
                self.proc.stdin.flush()
        except OSError:
            return False
        pid = self._wait(rid, "started", 60)
        if pid is None:
            return False
        if self._wait(rid, "done", timeout) is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid), signal.SIGKILL)
            self._wait(rid, "done", 30)
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


_POOL: _Pool | None = None
#: Variables that change under a pool without bearing on what torch imports (pytest's name of the running test).
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST"})


@contextlib.contextmanager
def shared_launcher() -> Iterator[None]:
    """Within it, fault runs in this environment fork their launcher from one process that imported torch once."""
    global _POOL
    from workbench_zoo.runner import run_env

    env = run_env()
    if (_POOL is not None and _POOL.matches(env)) or env.get("WORKBENCH_FAULTS_FORK", "1") == "0" \
            or not hasattr(os, "fork"):
        yield
        return
    outer, _POOL = _POOL, _Pool(env)
    try:
        yield
    finally:
        pool, _POOL = _POOL, outer
        pool.close()


def _pool_main() -> None:
    preimport()
    children: dict[int, str] = {}
    buf = b""
    stdin_open = True
    while stdin_open or children:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            rid = children.pop(pid, None)
            if rid is not None:
                os.write(1, f"{rid} done {os.waitstatus_to_exitcode(status)}\n".encode())
        if not stdin_open:
            time.sleep(0.05)
            continue
        if not select.select([0], [], [], 0.05)[0]:
            continue
        data = os.read(0, 65536)
        stdin_open = bool(data)
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                os.setsid()
                os.environ.clear()
                os.environ.update(req["env"])
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                _exit_after(lambda: launch(req["argv"]), Path(req["log"]))    # never returns
            children[pid] = req["id"]
            os.write(1, f"{req['id']} started {pid}\n".encode())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pool"]:
        _pool_main()
    else:
        preimport()
        launch(sys.argv[2:])
