"""Collector overhead measured the way users run it (not a test): one process per arm, ratios with intervals.

Every arm is its own process (forked from this driver, which has imported torch but never touched CUDA or
compiled anything), running the same loop a user writes::

    model = torch.compile(build(...))                  # plain torch.compile in user code
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    with collector:                                    # the README surface, default options
        for step in range(steps):
            with collector.step():
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = loss_fn(model(x), y)
                loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
                loss.item()                            # logged every step, as most loops do

Arms: ``bare`` (no collector), ``bare2`` (the same again: the A/A control), ``collector`` (defaults: window at
steps 5-7, its warm-up step 4), ``profiler`` (a bare ``torch.profiler`` with ``schedule(wait=4, warmup=1, active=3)``,
the same window), and ablation arms that turn one collector part off (or one fix on). A warm-up process first fills
the inductor and Triton caches, so every measured process compiles from the cache. Measured processes compile with
``compile_threads=1`` (no compile worker pool starting up under the timed steps; the pool is the same for every
arm and only adds noise); the warm-up process uses the default pool.

Rounds (lockstep): a round starts one process per arm together (``--copies`` per arm), each pinned to its own
block of CPUs of the GPU's NUMA node (``--pin own``; the blocks rotate over the arms every round, the driver on a
CPU of its own), or (``--pin same``) compiling spread over the node and then all moved onto one shared block, so
a drift of those CPUs hits every arm alike; ``--mps`` runs the rounds under an MPS daemon (one GPU context).
Once each has run its step 0 (the compile), the driver hands a token to one process at a time, in a new random
order every turn, never twice in a row to the same one; arm/bare ratios are paired within a round. A turn is one
step (``--block 1``) or, by default, steps 1-8 and then ``--block`` (50) steps: a handover adds 1-3 ms to the step
after it (on the H200 with or without MPS: the host's cost of waking on CPUs other processes just used), so the
first step of each turn is left out of ``after`` in turns. Per process the median
step time (from the token to the end of the iteration, the collector's own work inside) is taken per segment:
``before`` (steps 1-3), ``prep`` (step 4: profiler preparation), ``window`` (5-7) and ``after`` (8 to the end,
``--steps``). Printed: each pair, the median ratio over rounds and a percentile-bootstrap 95% interval of that
median, and ``after_paired``: steps 8+ in blocks of 25 paired in time across the processes (:func:`paired_ratio`).
``--probe`` also records per step the thread's CPU time, the device span (CUDA events) and involuntary
context switches, in every arm alike. ``--shapes small_pg`` adds a one-rank process group and one all-reduce
per step (for the Flight Recorder arms). Method and H200 figures: bench/README.md, "Collector overhead".

    python bench/overhead.py --shapes issue --arms bare2,collector --block 1 --pin same --cores-per-proc 4 --mps \
        --steps 400 --probe --rounds 12 --json out.json                                 # on the H200 (f1 method)
    python bench/overhead.py --in-process 400                     # bare/collector steps alternated in one process
    python bench/overhead.py --toggle 40 --shapes small --arms bare2,collector,no_window   # on/off in one process
    python bench/overhead.py --summarize out.json                 # the summary of a saved run again
    python bench/overhead.py --shapes small --arms bare2,collector,no_window,no_capture --rounds 6
    python bench/overhead.py --smoke --json out.json                                # CPU; no claims
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]

#: d_model, layers, seq, batch, steps per process
SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "issue": (1024, 4, 512, 8, 400),   # issue 17's model: 4 x TransformerEncoderLayer(1024), batch 8 x 512
    "small": (256, 2, 128, 8, 400),    # launch-bound: host work shows the most
    "tiny": (32, 1, 16, 2, 10),        # the CPU smoke test
}

#: Segments of a process's steps, as (first, last) inclusive; ``None``: to the end.
SEGMENTS: dict[str, tuple[int, int | None]] = {"before": (1, 3), "prep": (4, 4), "window": (5, 7), "after": (8, None)}


@dataclass(frozen=True)
class Arm:
    kind: str                                            # bare | collector | late_start | residue | profiler
    options: dict[str, Any] = field(default_factory=dict)  # Collector keywords (kind collector)
    env: dict[str, str] = field(default_factory=dict)      # set in the process before anything runs
    what: str = ""
    patch: str = ""                                        # an ablation of a part that has no option: PATCHES


_OFF = {"profile_repeat": 0, "compile_capture": False, "device_timing": False, "nvtx": False}
ARMS: dict[str, Arm] = {
    "bare": Arm("bare", what="no collector (the baseline)"),
    "bare2": Arm("bare", what="no collector again: the A/A control"),
    "collector": Arm("collector", what="Collector(path), default options"),
    "profiler": Arm("profiler", what="bare torch.profiler, schedule(wait=4, warmup=1, active=3), .json.gz export"),
    "late_start": Arm("late_start", what="Collector(path) made after the model is built, started by `with collector:`"),
    "residue": Arm("residue", what="a collector started and closed before the model is built; the loop runs bare"),
    "no_window": Arm("collector", {"profile_repeat": 0}, what="collector, profiler off"),
    "no_capture": Arm("collector", {"compile_capture": False}, what="collector, compile capture off"),
    "no_device_timing": Arm("collector", {"device_timing": False}, what="collector, CUDA events off"),
    "no_nvtx": Arm("collector", {"nvtx": False}, what="collector, ranges off"),
    "steps_only": Arm("collector", _OFF, what="collector, only steps.jsonl"),
    "teardown": Arm("collector", env={"TEARDOWN_CUPTI": "1"}, what="collector, TEARDOWN_CUPTI=1 (forced)"),
    "keep_cupti": Arm("collector", env={"TEARDOWN_CUPTI": "0"}, what="collector, TEARDOWN_CUPTI=0 (forced)"),
    "profiler_teardown": Arm("profiler", env={"TEARDOWN_CUPTI": "1"}, what="bare torch.profiler, TEARDOWN_CUPTI=1"),
    "no_hang": Arm("collector", patch="no_hang", what="collector, hang capture off (watchdog, faulthandler, FR env)"),
    "py_step": Arm("collector", env={"WORKBENCH_STEP_IMPL": "python"},
                   what="collector, its step context in Python (not collectors/_fast_step.c)"),
    "no_write": Arm("collector", patch="no_write", what="collector, no step records (steps.jsonl stays empty)"),
    "no_step_hooks": Arm("collector", patch="no_step_hooks", what="collector started, step() a no-op"),
    "sync_write": Arm("collector", patch="sync_write",
                      what="collector, steps.jsonl written on the training thread every step (no writer process)"),
    "fr_on": Arm("bare", env={"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
                              "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}, what="no collector, Flight Recorder on (2000 entries)"),
}


def _patch(name: str) -> Callable[[], None]:
    """Ablations of collector parts that have no option (bench only; applied in the arm's process). Returns what
    undoes it (``--toggle`` switches arms inside one process)."""
    from workbench.collectors import collector as cmod
    from workbench.collectors import hang_capture, step_log

    saved: list[tuple[Any, str, Any]] = []

    def put(owner: Any, attr: str, value: Any) -> None:
        saved.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, value)

    if name == "no_hang":
        put(hang_capture, "start", lambda *a, **k: None)
    elif name == "no_write":
        put(step_log.StepLog, "record", lambda self, *record: None)
        put(step_log.StepLog, "cursor", lambda self: None)   # nor does the step context store into the ring
    elif name == "sync_write":
        start = cmod.Collector.start

        def start_writing_every_step(self: Any) -> Any:
            start(self)
            write_every_step(self)
            return self

        put(cmod.Collector, "start", start_writing_every_step)
    elif name == "no_step_hooks":
        put(cmod.Collector, "_step_begin", lambda self: None)
        put(cmod.Collector, "_step_end", lambda self: None)
    elif name:
        raise ValueError(f"unknown patch {name!r}")

    def undo() -> None:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)

    return undo


def write_every_step(collector: Any) -> None:
    """Make a started ``collector`` format and write ``steps.jsonl`` on the training thread at every step, as it did
    before the step writer process (the ``sync_write`` ablation)."""
    if collector._steps is not None:
        collector._steps.write_inline()


# ---------------------------------------------------------------------------------------------------- placement
def gpu_cpus() -> list[int]:
    """The CPUs of the GPU's NUMA node that this process may use (all of them where sysfs says nothing)."""
    allowed = sorted(os.sched_getaffinity(0))
    try:
        for dev in Path("/sys/bus/pci/devices").iterdir():
            if (dev / "vendor").read_text().strip() != "0x10de" or \
                    not (dev / "class").read_text().strip().startswith("0x03"):
                continue
            node = int((dev / "numa_node").read_text())
            if node < 0:
                break
            spec = Path(f"/sys/devices/system/node/node{node}/cpulist").read_text().strip()
            cpus = {c for part in spec.split(",") for c in _cpu_range(part)}
            local = [c for c in allowed if c in cpus]
            return local or allowed
    except (OSError, ValueError):
        pass
    return allowed


def _cpu_range(part: str) -> range:
    lo, _, hi = part.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def placements(n: int, mode: str, per_proc: int, rnd: int) -> tuple[list[set[int] | None], set[int] | None]:
    """CPU sets for ``n`` processes of round ``rnd`` and one for the driver. ``own``: disjoint blocks of
    ``per_proc`` CPUs of the GPU's node (the driver on the last CPU), rotated every round so a slower CPU is not
    one arm's; ``same``: every process on the same block (they run one at a time); ``none``: the scheduler's."""
    if mode == "none":
        return [None] * n, None
    cpus = gpu_cpus()
    driver, cpus = ({cpus[-1]}, cpus[:-1]) if len(cpus) > 1 else (None, cpus)
    blocks = [set(cpus[i:i + per_proc]) for i in range(0, len(cpus) - per_proc + 1, per_proc)] or [set(cpus)]
    if mode == "same":
        return [blocks[0]] * n, driver
    return [blocks[(i + rnd) % len(blocks)] for i in range(n)], driver


# ---------------------------------------------------------------------------------------------------- MPS
def _mps_control(command: str | None, timeout: float = 30.0) -> str:
    """Run ``nvidia-cuda-mps-control`` (``-d`` when ``command`` is None, else ``command`` on its stdin)."""
    argv = ["nvidia-cuda-mps-control"] + (["-d"] if command is None else [])
    done = subprocess.run(argv, input=None if command is None else command + "\n", capture_output=True,
                          text=True, timeout=timeout, check=False)
    if done.returncode:
        raise RuntimeError(f"nvidia-cuda-mps-control {command or '-d'}: rc {done.returncode} {done.stderr.strip()}")
    return done.stdout.strip()


@contextlib.contextmanager
def mps_daemon(enabled: bool):
    """Run the rounds under an MPS daemon of this user (``--mps``): every process shares one GPU context, so a
    token handover is no context switch. Started here and always quit here; nothing on the card is changed.
    Its folders: ``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY`` where set, else under /tmp/wb-mps.
    Yields what was seen (the server's pid once a CUDA process ran through it), or None when not enabled."""
    if not enabled:
        yield None
        return
    for var, sub in (("CUDA_MPS_PIPE_DIRECTORY", "pipe"), ("CUDA_MPS_LOG_DIRECTORY", "log")):
        os.environ.setdefault(var, f"/tmp/wb-mps/{sub}")
        Path(os.environ[var]).mkdir(parents=True, exist_ok=True)
    _mps_control(None)
    info: dict[str, Any] = {"pipe": os.environ["CUDA_MPS_PIPE_DIRECTORY"]}
    try:
        probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.ones(8, device='cuda').sum().item())"],
                               capture_output=True, text=True, timeout=120, check=False)
        info["servers"] = _mps_control("get_server_list").split()
        if probe.returncode or not info["servers"]:
            log = Path(os.environ["CUDA_MPS_LOG_DIRECTORY"]) / "control.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            raise RuntimeError(f"MPS: a CUDA process did not run through the daemon: {probe.stderr[-1500:]} {tail}")
        yield info
    finally:
        with contextlib.suppress(Exception):
            _mps_control("quit")


# ---------------------------------------------------------------------------------------------------- imports
def _import_workbench() -> None:
    """Import ``workbench.collectors``; where the analysis stack (polars) is missing, e.g. on the device machine,
    through a minimal ``workbench`` package whose submodules come from this checkout."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import workbench.collectors  # noqa: F401
        return
    except ImportError:
        for name in [m for m in sys.modules if m == "workbench" or m.startswith("workbench.")]:
            del sys.modules[name]
    shim = Path(tempfile.mkdtemp(prefix="wb-shim-")) / "workbench"
    shim.mkdir()
    (shim / "__init__.py").write_text(
        f'"""minimal workbench: no analysis stack"""\n__version__ = "0.1.0"\n__path__.append({str(ROOT / "workbench")!r})\n')
    (shim / "collectors").symlink_to(ROOT / "collectors")
    sys.path.insert(0, str(shim.parent))
    import workbench.collectors  # noqa: F401,F811


# ---------------------------------------------------------------------------------------------------- one process
def turn_starts(steps: int, block: int) -> list[int]:
    """The steps at which a process gets the token: step 1, then (``block`` > 1) step 9 and every ``block`` steps
    after it, so that steps 1-8 (before, prep, window, the first after) run in one turn; ``block`` 1: every step."""
    if block <= 1:
        return list(range(1, steps))
    return [1, *range(9, steps, block)] if steps > 9 else [1]


class Gate:
    """The child's side of the lockstep: wait for the token before a turn of steps, hand it back after."""

    def __init__(self, token_fd: int, done_fd: int) -> None:
        self.token_fd, self.done_fd = token_fd, done_fd

    def wait(self) -> None:
        if not os.read(self.token_fd, 1):
            raise SystemExit("driver went away")

    def done(self) -> None:
        os.write(self.done_fd, b"d")


def run_arm(arm: Arm, shape: str, device_name: str, backend: str | None, run_dir: Path, warmup: bool,
            gate: Gate | None, steps: int, probe: bool = False, threads: int | None = None,
            block: int = 1, lock: set[int] | None = None) -> dict:
    """The training loop of one arm (runs in its own process). Step 0 (the compile) runs freely; every later
    step waits for the driver's token, so the processes of a round take turns step by step. Returns per-step
    times in ms: from the token to the end of the iteration (the collector's own work is inside ``step()``).
    ``lock``: after step 0, every thread of the process moves to these CPUs (``--pin same``: the compile ran spread
    over the node; the timed steps of all processes run on one block, so a drift of those CPUs is shared)."""
    import torch

    from h200_transformer import batch, build, loss_fn

    if not warmup:
        import torch._inductor.config as icfg

        icfg.compile_threads = 1
    d_model, layers, seq, n, _ = SHAPES[shape.removesuffix("_pg")]
    if threads:
        torch.set_num_threads(threads)
    if arm.patch:
        _patch(arm.patch)
    device = torch.device(device_name)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    out: dict[str, Any] = {"pid": os.getpid()}
    collector = None
    if arm.kind in ("collector", "residue"):
        from workbench.collectors import Collector

        collector = Collector(run_dir, **arm.options)
        collector.start()                      # before the process group, as docs/hangs.md asks
        if arm.kind == "residue":              # what a started collector leaves behind, without it
            collector.close()
            collector = None
    comm = None
    if shape.endswith("_pg"):                  # one-rank NCCL group, one all-reduce per step (Flight Recorder arms)
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1,
                                init_method=f"file://{run_dir.parent / ('pg-' + run_dir.name)}")
        comm = torch.ones(4 << 20, device=device)
    model = build(d_model, layers, device)
    compiled = torch.compile(model) if backend is None else torch.compile(model, backend=backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x, y = batch(n, seq, device)
    dtype = torch.bfloat16
    if arm.kind == "late_start":
        from workbench.collectors import Collector

        collector = Collector(run_dir, **arm.options)   # started by ``with collector:`` below

    def body() -> float:
        with torch.autocast(device.type, dtype=dtype):
            loss = loss_fn(compiled(x), y)
        loss.backward()
        if comm is not None:
            torch.distributed.all_reduce(comm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    prof = None
    if arm.kind == "profiler":
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        trace = run_dir / "bare-profiler.pt.trace.json.gz"
        run_dir.mkdir(parents=True, exist_ok=True)
        prof = profile(activities=acts, schedule=schedule(wait=4, warmup=1, active=3, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(str(trace)))
    times: list[float] = []
    cpu_ms: list[float] = []
    ivcsw: list[int] = []
    events: list[tuple[Any, Any]] = []
    cuda_probe = probe and device.type == "cuda"
    if probe:
        import resource
    ctx = collector if collector is not None else (prof if prof is not None else contextlib.nullcontext())
    t_start = time.perf_counter()
    starts = set(turn_starts(steps, block))
    ends = {s - 1 for s in starts} | {steps - 1}
    out["turn_starts"] = sorted(starts) if block > 1 else []   # steps after a context switch (block mode)
    with ctx:
        for i in range(steps):
            if i in starts and gate is not None:
                gate.wait()
            if probe:
                c0, r0 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
                if cuda_probe:
                    e0 = torch.cuda.Event(enable_timing=True)
                    e0.record()
            t0 = time.perf_counter()
            if collector is not None:
                with collector.step():
                    body()
            else:
                body()        # no context manager around a bare step: a user's loop has none
            if prof is not None:
                prof.step()
            times.append(time.perf_counter() - t0)
            if probe:
                cpu_ms.append(round((time.thread_time() - c0) * 1e3, 4))
                ivcsw.append(resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw - r0)
                if cuda_probe:
                    e1 = torch.cuda.Event(enable_timing=True)
                    e1.record()
                    events.append((e0, e1))
            if i == 0 and lock:
                lock_threads(lock)
            if gate is not None and i in ends:
                gate.done()
    out["loop_s"] = time.perf_counter() - t_start
    if collector is not None:
        out["errors"] = list(collector.errors)
        out["trace_files"] = [p.name for p in collector.trace_files]
        out["step_impl"] = collector.step_impl
    if prof is not None:
        out["trace_files"] = [trace.name] if trace.exists() else []
    if comm is not None:
        torch.distributed.destroy_process_group()
    out["step_ms"] = [round(v * 1e3, 4) for v in times]
    if probe:
        out["cpu_ms"], out["ivcsw"] = cpu_ms, ivcsw
        if cuda_probe:
            torch.cuda.synchronize()
            out["gpu_ms"] = [round(a.elapsed_time(b), 4) for a, b in events]
    with contextlib.suppress(OSError):
        out["cpus"] = sorted(os.sched_getaffinity(0))
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    out["torch"] = torch.__version__
    return out


def lock_threads(cpus: set[int]) -> None:
    """Move every thread of this process (the ones CUDA and torch started too) onto ``cpus``."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)


def _fork(arm_name: str, shape: str, args: argparse.Namespace, run_dir: Path, result: Path, warmup: bool,
          gate: tuple[int, int] | None, close_in_child: list[int], cpus: set[int] | None = None,
          lock: set[int] | None = None) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:  # child
        for fd in close_in_child:
            os.close(fd)
        if cpus:
            os.sched_setaffinity(0, cpus)       # before CUDA: every thread the process starts inherits it
        os.environ.update(dict(kv.split("=", 1) for kv in args.env))
        os.environ.update(ARMS[arm_name].env)
        res = run_arm(ARMS[arm_name], shape, args.device, args.backend, run_dir, warmup,
                      Gate(*gate) if gate else None, min(20, steps_of(shape, args)) if warmup else steps_of(shape, args),
                      args.probe and not warmup, args.threads, args.block, lock)
    except BaseException:
        res, code = {"error": traceback.format_exc()[-4000:]}, 1
    try:
        result.write_text(json.dumps(res))
    finally:
        os._exit(code)


def no_result(wait_status: int, timed_out: bool = False) -> str:
    """Why a measured process left no readable result file: how it ended (a signal, or an exit code)."""
    if timed_out:
        return "no result (killed by the driver: no step finished within --timeout)"
    code = os.waitstatus_to_exitcode(wait_status)
    if code == 0:
        return "no result (the process ended normally but its result file is missing or unreadable)"
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit code {code}"
    return f"no result (the process died: {how})"


def steps_of(shape: str, args: argparse.Namespace) -> int:
    """Steps per process: ``--steps``, else the shape's."""
    return args.steps or SHAPES[shape.removesuffix("_pg")][4]


def warmup_process(shape: str, args: argparse.Namespace, tmp: Path) -> dict:
    """One free-running bare process with the default compile workers: fills the inductor and Triton caches."""
    t0 = time.perf_counter()
    result = tmp / f"warmup-{shape}.json"
    pid = _fork("bare", shape, args, tmp / f"warmup-{shape}", result, True, None, [],
                placements(1, args.pin, 4 * args.cores_per_proc, 0)[0][0])
    _, status = os.waitpid(pid, 0)
    res = json.loads(result.read_text()) if result.exists() else {"error": no_result(status)}
    res["process_s"] = round(time.perf_counter() - t0, 2)
    return res


def process_labels(arm_names: list[str], copies: int, rnd: int) -> list[tuple[str, str]]:
    """(label, arm) of every process of round ``rnd``: ``copies`` per arm (labels ``arm``, ``arm#2``, ...), in an
    order rotated every round, so neither the start order nor a CPU block belongs to one arm."""
    procs = [(arm if c == 0 else f"{arm}#{c + 1}", arm) for c in range(copies) for arm in arm_names]
    k = rnd % len(procs)
    return procs[k:] + procs[:k]


def run_round(arm_names: list[str], shape: str, args: argparse.Namespace, tmp: Path, rnd: int) -> dict[str, dict]:
    """One process per arm (``--copies`` per arm), all started together; after their step 0 the driver hands a
    token to one process at a time, turn by turn (:func:`turn_starts`), in a new random order every turn (so a
    drift of the machine hits every arm alike, and no process always follows the same one)."""
    t0 = time.perf_counter()
    labels = process_labels(arm_names, args.copies, rnd)
    canonical = process_labels(arm_names, args.copies, 0)
    blocks, driver_cpus = placements(len(labels), args.pin, args.cores_per_proc, rnd)
    cpu_sets = [blocks[canonical.index(lab)] for lab in labels]   # a process's CPUs: by arm, rotated per round
    lock = None
    if args.pin == "same":   # compile spread over the node, then every timed step on the one shared block
        lock = cpu_sets[0]
        cpu_sets = [set(gpu_cpus()) - (driver_cpus or set())] * len(labels)
    driver_before = os.sched_getaffinity(0)
    if driver_cpus:
        os.sched_setaffinity(0, driver_cpus)
    procs: dict[str, dict[str, Any]] = {}
    for (label, arm), cpus in zip(labels, cpu_sets):
        tok_r, tok_w = os.pipe()
        done_r, done_w = os.pipe()
        run_dir = tmp / f"{shape}-r{rnd}-{label.replace('#', '-')}"
        result = tmp / f"{shape}-r{rnd}-{label.replace('#', '-')}.json"
        others = [fd for p in procs.values() for fd in (p["tok"], p["done"])]
        pid = _fork(arm, shape, args, run_dir, result, False, (tok_r, done_w), [tok_w, done_r, *others], cpus, lock)
        os.close(tok_r)
        os.close(done_w)
        procs[label] = {"pid": pid, "tok": tok_w, "done": done_r, "result": result, "run_dir": run_dir,
                        "alive": True, "arm": arm}

    def await_done(label: str) -> None:
        p = procs[label]
        ready, _, _ = select.select([p["done"]], [], [], args.timeout)
        if not ready or not os.read(p["done"], 1):
            p["alive"] = False
            if not ready:
                p["timed_out"] = True
                os.kill(p["pid"], signal.SIGKILL)

    order = list(procs)
    for label in order:      # step 0: compile, concurrently
        await_done(label)
    rng = random.Random(rnd)
    last = None
    for _ in turn_starts(steps_of(shape, args), args.block):
        turn = order[:]
        rng.shuffle(turn)    # a new order every turn: no process always follows the same one
        if len(turn) > 1 and turn[0] == last:   # nor runs two turns in a row (every turn follows another's)
            k = rng.randrange(1, len(turn))
            turn[0], turn[k] = turn[k], turn[0]
        last = turn[-1]
        for label in turn:
            if procs[label]["alive"]:
                try:
                    os.write(procs[label]["tok"], b"t")
                except OSError:
                    procs[label]["alive"] = False
                    continue
                await_done(label)
    out = {}
    for label, p in procs.items():
        os.close(p["tok"])
        _, status = os.waitpid(p["pid"], 0)
        os.close(p["done"])
        try:
            res = json.loads(p["result"].read_text())
        except (OSError, ValueError):
            res = {"error": no_result(status, p.get("timed_out", False))}
        res.update(arm=p["arm"], shape=shape)
        out[label] = res
        if not args.keep:
            shutil.rmtree(p["run_dir"], ignore_errors=True)
    if driver_cpus:
        os.sched_setaffinity(0, driver_before)
    out["_round_s"] = {"s": round(time.perf_counter() - t0, 1)}
    return out


# ---------------------------------------------------------------------------------------------------- statistics
#: The per-process statistic of a segment's step times (``--stat``).
STAT = "median"


def segment_ms(step_ms: list[float], seg: str, stat: str | None = None, skip: Any = ()) -> float | None:
    """The median (or the 10-90 % trimmed mean, ``stat="trimmed"``, or the plain mean, ``"mean"``) of one process's
    step times in ``seg``; ``skip``: steps left out (in ``after``: the first step of each turn, which pays the GPU's context switch)."""
    first, last = SEGMENTS[seg]
    end = len(step_ms) if last is None else last + 1
    skip = set(skip) if seg == "after" else set()
    values = [step_ms[i] for i in range(first, min(end, len(step_ms))) if i not in skip]
    if not values:
        return None
    if (stat or STAT) == "mean":
        return statistics.fmean(values)
    if (stat or STAT) == "trimmed" and len(values) >= 10:
        v = sorted(values)
        cut = len(v) // 10
        return statistics.fmean(v[cut:len(v) - cut])
    return statistics.median(values)


def members(rnd: dict[str, dict], arm: str) -> list[dict]:
    """The processes of ``arm`` in one round: its copies (``arm``, ``arm#2``, ...); ``a+b``: those of both arms."""
    names = arm.split("+")
    return [v for k, v in rnd.items() if isinstance(v, dict) and "step_ms" in v
            and any(k == n or k.startswith(n + "#") for n in names)]


def arm_level(rnd: dict[str, dict], arm: str, seg: str, key: str = "step_ms", stat: str | None = None) -> float | None:
    """An arm's segment time in one round: the geometric mean over its processes (:func:`members`); ``key``
    ``cpu_ms``: the training thread's CPU time per step (``--probe``); ``stat``: as :func:`segment_ms`."""
    vals = [segment_ms(v[key], seg, stat, skip=v.get("turn_starts", ())) for v in members(rnd, arm) if key in v]
    vals = [v for v in vals if v]
    return statistics.geometric_mean(vals) if vals else None


#: Steps per block of the paired statistic (``after_paired``).
PAIR_BLOCK = 25


def paired_ratio(rnd: dict[str, dict], arm: str, base: str, k: int = PAIR_BLOCK) -> float | None:
    """The ``after`` ratio of ``arm`` to ``base`` in one round, paired in time: steps 8+ cut into blocks of ``k``
    (with the token every step, step i of every process runs within one turn, so a block of all processes spans
    the same ~k turns), per block the log ratio of the block medians (geometric mean over copies), and the median
    over blocks. A drift that every process sees in the same turns cancels; a turn's first step is left out."""
    pa, pb = members(rnd, arm), members(rnd, base)
    if not pa or not pb:
        return None
    n = min(len(v["step_ms"]) for v in pa + pb)
    logs = []
    for lo in range(SEGMENTS["after"][0], n - k + 1, k):
        def level(ps: list[dict]) -> float:
            meds = []
            for v in ps:
                skip = set(v.get("turn_starts", ()))
                vals = [v["step_ms"][i] for i in range(lo, lo + k) if i not in skip]
                meds.append(statistics.median(vals) if vals else v["step_ms"][lo])
            return statistics.fmean(math.log(m) for m in meds)
        logs.append(level(pa) - level(pb))
    return math.exp(statistics.median(logs)) if logs else None


def bootstrap_median(values: list[float], n: int = 10000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values`` (one value: that value, twice)."""
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def comparisons(arms: list[str]) -> dict[str, tuple[str, str]]:
    """Label -> (arm, baseline arm): every arm against bare (and, with the A/A arm, against both bare arms
    together), profiler-type arms against each other, and nested ablations against each other."""
    out = {a: (a, "bare") for a in arms}
    if "bare2" in arms:
        out.update({f"{a} vs bare+bare2": (a, "bare+bare2") for a in arms if a != "bare2"})
    for a, b in (("collector", "no_window"), ("no_window", "steps_only"), ("collector", "no_hang"),
                 ("py_step", "collector")):
        if a in arms and b in arms:
            out[f"{a}/{b}"] = (a, b)
    if "profiler" in arms:
        for a in ("collector", "teardown", "keep_cupti", "profiler_teardown"):
            if a in arms:
                out[f"{a}/profiler"] = (a, "profiler")
    return out


def ratio_summary(pairs: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Of (baseline, arm, ratio) per round: the median ratio, its 95 % interval, and the median times (ms)."""
    ratios = [p[2] for p in pairs]
    lo, hi = bootstrap_median(ratios)
    return {"median_ratio": round(statistics.median(ratios), 4), "ci95": [round(lo, 4), round(hi, 4)],
            "baseline_ms": round(statistics.median(p[0] for p in pairs), 4),
            "arm_ms": round(statistics.median(p[1] for p in pairs), 4)}


def summarize(rounds: list[dict[str, dict]], comps: dict[str, tuple[str, str]]) -> dict:
    """Per comparison and segment: the ratio arm/baseline in each round, the median and its 95% interval."""
    out: dict[str, Any] = {}
    for label, (arm, base) in comps.items():
        segs = {}
        for seg in SEGMENTS:
            pairs = []
            for rnd in rounds:
                va, vb = arm_level(rnd, arm, seg), arm_level(rnd, base, seg)
                if va is not None and vb:
                    pairs.append((vb, va, va / vb))
            if not pairs:
                continue
            segs[seg] = {"baseline": base, "pairs": [[round(b, 4), round(a, 4), round(r, 4)] for b, a, r in pairs],
                         **ratio_summary(pairs)}
        means = [(b, a, a / b) for a, b in ((arm_level(rnd, arm, "after", stat="mean"),
                                             arm_level(rnd, base, "after", stat="mean")) for rnd in rounds)
                 if a is not None and b]
        if means:   # what a user pays on average: every step counts, the rarer slower ones (CUDA-timed) too
            segs["after_mean"] = {"baseline": base, **ratio_summary(means)}
        levels = ((arm_level(rnd, arm, "after", "cpu_ms"), arm_level(rnd, base, "after", "cpu_ms")) for rnd in rounds)
        cpu = [(a - b) * 1e3 for a, b in levels if a is not None and b is not None]
        if len(cpu) > 1:   # --probe: the training thread's extra CPU time per step, arm minus baseline
            lo, hi = bootstrap_median(cpu)
            segs["after_cpu_us"] = {"baseline": base, "median_us": round(statistics.median(cpu), 1),
                                    "ci95": [round(lo, 1), round(hi, 1)]}
        paired = [r for r in (paired_ratio(rnd, arm, base) for rnd in rounds) if r]
        if paired:
            lo, hi = bootstrap_median(paired)
            segs["after_paired"] = {"baseline": base, "block": PAIR_BLOCK, "ratios": [round(r, 4) for r in paired],
                                    "median_ratio": round(statistics.median(paired), 4),
                                    "ci95": [round(lo, 4), round(hi, 4)]}
        out[label] = segs
    return out


#: How the bare arms run a step (kept in the saved JSON as ``bare_step``): with nothing around it, as a user's loop.
BARE_STEP = "plain"
#: Series saved before ``bare_step`` was kept ran it inside ``with contextlib.nullcontext():``.
BARE_STEP_BEFORE = "inside with nullcontext()"


def pooled_rounds(files: list[Path]) -> tuple[list[str], dict[str, list[dict]]]:
    """The arms every file measured and, per shape, the rounds of saved ``--json`` files taken together (raises
    ValueError, naming the file, where the files share no arm besides ``bare`` or the bare arms' step differs: rounds
    are pooled only where the files measured the same arms the same way; an arm only some files have is left out)."""
    arms: list[str] | None = None
    bare_step: str | None = None
    pooled: dict[str, list[dict]] = {}
    for f in files:
        saved = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_text())
        these = list(saved["arms"])
        bare = saved.get("bare_step", BARE_STEP_BEFORE)
        shared = these if arms is None else [a for a in arms if a in these]
        if not [a for a in shared if a != "bare"] or "bare" not in shared:
            raise ValueError(f"{f}: arms {these} share none but bare with {arms} in the files before it; not pooled")
        if bare_step is not None and bare != bare_step:
            raise ValueError(f"{f}: its bare arms ran the step {bare}, those before it {bare_step}; not pooled")
        arms, bare_step = shared, bare
        for shape, entry in saved["shapes"].items():
            pooled.setdefault(shape, []).extend(entry["rounds"])
    return arms or [], pooled


def print_summary(shape: str, summary: dict, *, show_pairs: bool = True) -> None:
    print(f"\n== {shape}: ratio to baseline per segment, median over rounds [bootstrap 95% interval]", flush=True)
    for arm, segs in summary.items():
        if show_pairs and "after" in segs:
            for i, (b, a, r) in enumerate(segs["after"]["pairs"]):
                print(f"  {arm:18} pair {i + 1}: after-window {segs['after']['baseline']} {b:.3f} ms, "
                      f"{arm} {a:.3f} ms, ratio {r:.4f}")
        cells = []
        for seg, s in segs.items():
            if seg == "after_cpu_us":
                cells.append(f"after CPU time {s['median_us']:+.1f} us [{s['ci95'][0]:+.1f}, {s['ci95'][1]:+.1f}]")
                continue
            if seg == "after_mean":
                cells.append(f"after, per-process mean {s['median_ratio']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]")
                continue
            if seg == "after_paired":
                cells.append(f"after paired in {s['block']}-step blocks {s['median_ratio']:.4f} "
                             f"[{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]")
                continue
            cells.append(f"{seg} {s['median_ratio']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]"
                         f" ({s['arm_ms']:.2f}/{s['baseline_ms']:.2f} ms vs {s['baseline']})")
        print(f"  {arm:18} " + "; ".join(cells), flush=True)


# ---------------------------------------------------------------------------------------------------- in process
def training_step(shape: str, device_name: str, compile_backend: str | None = "eager") -> Any:
    """One training step of ``shape`` as a function (bf16 autocast, fused AdamW on CUDA, ``loss.item()``), for the
    one-process methods. ``compile_backend``: ``"eager"`` (no ``torch.compile``), None (torch's default) or a
    backend name."""
    import torch

    from h200_transformer import batch, build, loss_fn

    d_model, layers, seq, batch_n, _ = SHAPES[shape]
    device = torch.device(device_name)
    model = build(d_model, layers, device)
    if compile_backend == "eager":
        fn = model
    else:
        fn = torch.compile(model) if compile_backend is None else torch.compile(model, backend=compile_backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    x, y = batch(batch_n, seq, device)

    def body() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(fn(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()

    return body


def cache_evictor(mb: int) -> Callable[[], None]:
    """A call that reads and writes ``mb`` MB, evicting the CPU caches as a training step's own work does."""
    junk = bytearray(os.urandom(1 << 16)) * (mb * 16)
    table = bytes(range(1, 256)) + b"\0"
    return lambda: junk.translate(table)   # type: ignore[return-value]


def in_process(n: int, device_name: str, shape: str = "small", clobber_mb: int = 64) -> dict:
    """The collector's per-step cost inside one process (``--in-process N``): N times, in a shuffled order, a bare
    step and a collector step, each either right after another step (``warm``) or after a pass over ``clobber_mb``
    MB that evicts the CPU caches (``cold``, as when other processes ran on the CPUs in between). The model runs
    eagerly (the collector's hooks do not depend on compiling); the collector has no profiler window. Returns the
    median step time per condition and the collector's extra time, warm and cold (us)."""
    from workbench.collectors import Collector

    body = training_step(shape, device_name)
    collector = Collector(Path(tempfile.mkdtemp(prefix="wb-inproc-")), profile_repeat=0)
    ctxs = {"bare": None, "collector": collector.step}      # bare: nothing around the step
    evict = cache_evictor(clobber_mb)
    times: dict[str, list[float]] = {f"{t}/{a}": [] for t in ("warm", "cold") for a in ctxs}
    rng = random.Random(0)
    with collector:
        for _ in range(10):
            body()
        for _ in range(n):
            order = list(times)
            rng.shuffle(order)
            for cond in order:
                temp, arm = cond.split("/")
                if temp == "cold":
                    evict()
                step = ctxs[arm]
                t0 = time.perf_counter()
                if step is None:
                    body()
                else:
                    with step():
                        body()
                times[cond].append((time.perf_counter() - t0) * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {"steps_per_condition": n, "clobber_mb": clobber_mb, "shape": shape, "eager": True,
           "median_us": {k: round(v, 1) for k, v in med.items()},
           "collector_extra_us": {t: round(med[f"{t}/collector"] - med[f"{t}/bare"], 1) for t in ("warm", "cold")},
           "errors": list(collector.errors)}
    for t in ("warm", "cold"):
        b, c = times[f"{t}/bare"], times[f"{t}/collector"]
        diffs = sorted(statistics.median(rng.choices(c, k=len(c))) - statistics.median(rng.choices(b, k=len(b)))
                       for _ in range(2000))
        out.setdefault("collector_extra_ci95_us", {})[t] = [round(diffs[50], 1), round(diffs[1949], 1)]
    return out


#: ``--toggle``: the first step of a block's ``late`` segment (after the window's background export).
TOGGLE_LATE = 30


def toggleable(arm: Arm) -> bool:
    """Whether ``--toggle`` can switch ``arm`` on and off inside one process: a bare or collector arm whose
    environment settings (read by torch once, at its start or at a process group's) it does not need."""
    return arm.kind in ("bare", "collector") and not arm.env


@contextlib.contextmanager
def arm_switched_on(arm: Arm, run_dir: Path):
    """Inside one process: ``arm``'s environment and patch applied and, for a collector arm, a fresh ``Collector``
    started; yields the step context (``collector.step`` or a no-op) and the collector; all undone on exit."""
    if not toggleable(arm):
        raise ValueError(f"--toggle takes bare and collector arms without environment settings, not {arm.what!r}")
    saved_env = {k: os.environ.get(k) for k in arm.env}
    undo: Callable[[], None] = lambda: None  # noqa: E731
    try:
        os.environ.update(arm.env)
        undo = _patch(arm.patch) if arm.patch else undo
        if arm.kind == "collector":
            from workbench.collectors import Collector

            with Collector(run_dir, **arm.options) as collector:
                yield collector.step, collector
        else:
            yield None, None          # bare: nothing around the step
    finally:
        undo()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def toggled(rounds: int, device_name: str, shape: str, backend: str | None, arms: list[str] | None = None,
            block: int = 60, skip: int = 10, run_root: Path | None = None, budget_s: float | None = None) -> dict:
    """Collector arms switched on and off inside one process (``--toggle ROUNDS``): the compiled model of ``shape``
    runs blocks of ``block`` steps; every round runs one block bare and one per arm of ``arms`` (default:
    ``collector``; ``bare2`` is the A/A control), in a new random order, each collector arm inside a fresh
    ``Collector`` (started before its block, closed after it: threads, writer process, handlers, profiler window
    come and go with it) with its patch and environment applied. Per round and arm, the ratio of the block's median
    step to the bare block's, over steps ``skip``+ (``after``: the window is at steps 5-7) and over steps 30+
    (``late``: after its background export); the median over rounds and its bootstrap interval. What stays after a
    collector is closed (imports, loaded libraries, environment variables) is in every arm alike and not measured
    here: the lockstep rounds measure it. ``budget_s``: no new round after that many seconds from the end of the
    compile (at least two rounds run)."""
    arms = arms or ["collector"]
    body = training_step(shape, device_name, backend)
    for _ in range(3):
        body()                                       # the compile
    root = run_root or Path(tempfile.mkdtemp(prefix="wb-toggle-"))
    rng = random.Random(0)
    names = ["bare", *arms]
    step_ms: list[dict[str, list[float]]] = []
    errors: dict[str, list[str]] = {}
    t_begin = time.monotonic()
    for k in range(rounds):
        if budget_s is not None and k >= 2 and time.monotonic() - t_begin > budget_s:
            break
        order = names[:]
        rng.shuffle(order)
        rnd: dict[str, list[float]] = {}
        for name in order:
            with arm_switched_on(ARMS[name], root / f"r{k}-{name}") as (step_ctx, collector):
                times = []
                for _ in range(block):
                    t0 = time.perf_counter()
                    if step_ctx is None:
                        body()
                    else:
                        with step_ctx():
                            body()
                    times.append(round((time.perf_counter() - t0) * 1e3, 4))
            if collector is not None and collector.errors:
                errors.setdefault(name, []).extend(collector.errors)
            rnd[name] = times
        step_ms.append(rnd)
    import torch

    out: dict[str, Any] = {"argv": sys.argv[1:], "torch": torch.__version__, "python": sys.version.split()[0],
                           "device": (torch.cuda.get_device_name() if device_name.startswith("cuda") else "cpu"),
                           "shape": shape, "compiled": True, "rounds": len(step_ms), "block": block, "skip": skip,
                           "late": TOGGLE_LATE, "arms": {}, "errors": errors}
    out["bare_ms"] = round(statistics.median(statistics.median(r["bare"][skip:]) for r in step_ms), 4)
    for name in arms:
        entry: dict[str, Any] = {"what": ARMS[name].what}
        for seg, first in (("after", skip), ("late", TOGGLE_LATE)):
            if first >= block:
                continue
            ratios = [statistics.median(r[name][first:]) / statistics.median(r["bare"][first:]) for r in step_ms]
            lo, hi = bootstrap_median(ratios)
            entry[seg] = {"median_ratio": round(statistics.median(ratios), 4), "ci95": [round(lo, 4), round(hi, 4)],
                          "ratios": [round(x, 4) for x in ratios]}
        out["arms"][name] = entry
    out["step_ms"] = step_ms
    if run_root is None:
        shutil.rmtree(root, ignore_errors=True)
    return out


def print_toggled(res: dict) -> None:
    print(f"toggle {res['shape']}: {res['rounds']} rounds of {res['block']}-step blocks, bare "
          f"{res['bare_ms']:.3f} ms (median of block medians); arm/bare, median over rounds [95% interval]:",
          flush=True)
    for name, entry in res["arms"].items():
        cells = [f"{seg} (steps {res['skip' if seg == 'after' else 'late']}+) {entry[seg]['median_ratio']:.4f} "
                 f"[{entry[seg]['ci95'][0]:.4f}, {entry[seg]['ci95'][1]:.4f}]" for seg in ("after", "late")
                 if seg in entry]
        print(f"  {name:16} " + "; ".join(cells) + f"   ({entry['what']})", flush=True)
    for name, errs in res["errors"].items():
        print(f"  {name}: {len(errs)} collector errors, first: {errs[0]}", flush=True)


# ---------------------------------------------------------------------------------------------------- driver
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="issue,small")
    p.add_argument("--arms", default=None,
                   help=f"arms besides bare, comma-separated (default bare2,collector,profiler; --toggle: collector);"
                        f" known: {', '.join(ARMS)}")
    p.add_argument("--rounds", type=int, default=6, help="rounds (pairs per arm) per shape, at least")
    p.add_argument("--max-rounds", type=int, default=None, help="keep going up to this many while time is left")
    p.add_argument("--budget-s", type=float, default=None, help="stop starting rounds after this many seconds")
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default=None, help="torch.compile backend; default: torch's (inductor)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per process before it is killed")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny model, aot_eager, one round: checks it runs")
    p.add_argument("--json", default=None, help="write all results here (rewritten after every round)")
    p.add_argument("--keep", default=None, help="keep the run directories under this folder")
    p.add_argument("--steps", type=int, default=None, help="steps per measured process (default: the shape's)")
    p.add_argument("--copies", type=int, default=1, help="processes per arm in each round")
    p.add_argument("--pin", choices=("own", "same", "none"), default="own",
                   help="CPU placement: own block of the GPU's node per process (rotated per round), one shared "
                        "block, or none")
    p.add_argument("--cores-per-proc", type=int, default=2)
    p.add_argument("--block", type=int, default=50,
                   help="steps per turn after step 8 (1: the token moves every step)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads in every measured process")
    p.add_argument("--env", action="append", default=[], help="K=V set in every process (repeatable)")
    p.add_argument("--probe", action="store_true",
                   help="also record per step CPU time, device span (CUDA events) and context switches")
    p.add_argument("--skip-warmup", action="store_true",
                   help="no warm-up process (the caches are warm from an earlier run: diagnostics only)")
    p.add_argument("--mps", action="store_true",
                   help="start an MPS daemon (this user's, quit at the end) so that the processes share one GPU "
                        "context: no context switch at a token handover")
    p.add_argument("--in-process", type=int, default=None, metavar="N",
                   help="instead of rounds: N bare and N collector steps alternated inside one process, warm and "
                        "after a cache-evicting pass (the collector's own per-step cost)")
    p.add_argument("--toggle", type=int, default=None, metavar="ROUNDS",
                   help="instead of rounds: in one process, ROUNDS rounds of blocks of --steps steps (default 60): one "
                        "bare, one per --arms arm (default collector; bare and collector arms), in a random order, "
                        "each collector arm inside a fresh Collector (--shapes: the first one)")
    p.add_argument("--summarize", default=None, metavar="JSON[,JSON...]",
                   help="print the summary of saved --json files again (with this version's comparisons); several "
                        "files: the rounds of each shape pooled, for the arms all of them measured")
    p.add_argument("--stat", choices=("median", "trimmed"), default="median",
                   help="per-process statistic of a segment: median or 10-90 %% trimmed mean")
    args = p.parse_args(argv)
    global STAT
    STAT = args.stat
    if args.summarize:
        try:
            arms, pooled = pooled_rounds([Path(f) for f in args.summarize.split(",") if f])
        except ValueError as exc:
            p.error(str(exc))
        for shape, rounds in pooled.items():
            print_summary(shape, summarize(rounds, comparisons([a for a in arms if a != "bare"])), show_pairs=False)
        return 0
    if args.in_process is not None:
        _import_workbench()
        res = in_process(args.in_process, "cpu" if args.smoke else args.device, "tiny" if args.smoke else "small")
        print(json.dumps(res, indent=1), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=1))
        return 0
    if args.toggle is not None:
        _import_workbench()
        smoke = args.smoke
        arms = [a for a in (args.arms or "collector").split(",") if a and a != "bare"]
        bad = [a for a in arms if a not in ARMS or not toggleable(ARMS[a])]
        if bad:
            p.error(f"--toggle takes bare and collector arms without environment settings; not {bad}")
        res = toggled(args.toggle, "cpu" if smoke else args.device, "tiny" if smoke else args.shapes.split(",")[0],
                      args.backend or ("aot_eager" if smoke else None), arms, block=args.steps or (12 if smoke else 60),
                      skip=2 if smoke else 10, run_root=Path(args.keep) if args.keep else None,
                      budget_s=args.budget_s)
        print_toggled(res)
        if args.json:
            Path(args.json).write_text(json.dumps(res))
        return 0
    if args.smoke:
        args.device, args.backend, args.shapes = "cpu", args.backend or "aot_eager", "tiny"
        args.rounds = min(args.rounds, 1)
        args.pin = "none"
    arms = [a for a in (args.arms or "bare2,collector,profiler").split(",") if a and a != "bare"]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arms {unknown}; known: {', '.join(ARMS)}")
    order = ["bare", *arms]
    comps = comparisons(arms)
    _import_workbench()
    import torch  # noqa: F401  (in the parent, so every forked process starts with it imported; no CUDA here)

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wb-overhead-"))
    tmp.mkdir(parents=True, exist_ok=True)   # the warm-up process writes its result here before any run directory
    t_begin = time.monotonic()
    results: dict[str, Any] = {"method": __doc__.split("\n\n")[1].strip(), "argv": sys.argv[1:], "arms": {
        a: ARMS[a].what for a in order}, "segments": SEGMENTS, "stat": STAT, "gpu_cpus": gpu_cpus(), "bare_step": BARE_STEP, "shapes": {}}

    def save() -> None:
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))

    with mps_daemon(args.mps) as mps:
        results["mps"] = mps
        run_shapes(args, comps, order, tmp, results, save)
    results["total_s"] = round(time.monotonic() - t_begin, 1)
    save()
    print(f"\ntotal {results['total_s']} s; targets: outside windows <= 1.01x bare (interval), "
          f"window <= 1.05x bare torch.profiler", flush=True)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    errors = [res for s in results["shapes"].values() for rnd in s["rounds"] for res in rnd.values() if "error" in res]
    return 1 if errors else 0


def run_shapes(args: argparse.Namespace, comps: dict[str, tuple[str, str]], order: list[str], tmp: Path,
               results: dict[str, Any], save: Any) -> None:
    """Per shape: the warm-up process, then rounds until ``--rounds`` (or ``--max-rounds`` within ``--budget-s``)."""
    for shape in args.shapes.split(","):
        d_model, layers, seq, n, _ = SHAPES[shape.removesuffix("_pg")]
        steps = steps_of(shape, args)
        entry: dict[str, Any] = {"d_model": d_model, "layers": layers, "seq": seq, "batch": n, "steps": steps,
                                 "process_group": shape.endswith("_pg"), "rounds": [], "warmup": None}
        results["shapes"][shape] = entry
        shape_begin = time.monotonic()
        warm = (warmup_process(shape, args, tmp) if not (args.smoke or args.skip_warmup)
                else {"process_s": 0.0, "skipped": "smoke" if args.smoke else "--skip-warmup"})
        entry["warmup"] = {k: warm.get(k) for k in ("process_s", "loop_s", "error", "gpu", "torch")}
        print(f"[{shape}] warm-up process {warm.get('process_s')} s {warm.get('error', '')}", flush=True)
        max_rounds = max(args.rounds, args.max_rounds or args.rounds)
        for r in range(max_rounds):
            elapsed = time.monotonic() - shape_begin
            if args.budget_s is not None and r:
                per_round = (elapsed - warm["process_s"]) / r
                if (r >= args.rounds and elapsed + per_round > args.budget_s) or elapsed > args.budget_s:
                    print(f"[{shape}] time budget reached after {r} rounds", flush=True)
                    break
            rnd = run_round(order, shape, args, tmp, r)
            round_s = rnd.pop("_round_s")["s"]
            for arm, res in rnd.items():
                if "error" in res:
                    print(f"[{shape}] round {r + 1} {arm}: ERROR {res['error'][-1500:]}", flush=True)
            entry["rounds"].append(rnd)
            line = ", ".join(f"{a} {segment_ms(v['step_ms'], 'after') or 0:.3f}" for a, v in rnd.items()
                             if "step_ms" in v)
            print(f"[{shape}] round {r + 1} ({round_s} s) after-window ms: {line}", flush=True)
            entry["summary"] = summarize(entry["rounds"], comps)
            save()
        print_summary(shape, entry.get("summary", {}))


if __name__ == "__main__":
    sys.exit(main())
