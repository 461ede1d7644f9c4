"""The :class:`Collector`: one object around a training loop, on every rank, that writes a run directory.

Example:
    >>> import tempfile, torch
    >>> from workbench.collectors import Collector
    >>> model = torch.nn.Linear(4, 2)
    >>> with Collector(tempfile.mkdtemp(), profile_repeat=0) as collector:
    ...     for _ in range(3):
    ...         with collector.step():
    ...             model(torch.randn(8, 4)).sum().backward()
    >>> collector.steps_done
    3
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import math
import os
import signal
import sys
import threading
import time
import uuid
import weakref
from collections import deque
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

from workbench import rundir
from workbench.collectors import compile_capture, gc_pauses, hang_capture, source_sites
from workbench.collectors import step_writer as sw
from workbench.collectors.apply import ConfigApplier
from workbench.collectors.fingerprint import fingerprint
from workbench.collectors.options import CollectorOptions
from workbench.collectors.profiling import ProfilerWindows
from workbench.collectors.ranges import Ranges
from workbench.collectors.step_log import StepLog, StepRecordsLost
from workbench.collectors.step_writer import DEVICE, INTERRUPTED, PROFILED

log = logging.getLogger("workbench.collectors")

F = TypeVar("F", bound=Callable[..., Any])

#: Written into run.json as ``collector_version``.
COLLECTOR_VERSION = "0.1.0"


def _dist_info() -> tuple[int, int, int, str]:
    """(rank, local_rank, world_size, source): torch.distributed when initialised, else the environment."""
    env = os.environ
    local_rank = int(env.get("LOCAL_RANK", "0") or 0)
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), local_rank, dist.get_world_size(), "torch.distributed"
    except Exception:
        pass
    if "RANK" in env:
        return int(env["RANK"]), local_rank, int(env.get("WORLD_SIZE", "1") or 1), "env"
    return 0, local_rank, 1, "default"


_now = time.time_ns

#: Collectors started in this process: a child forked from it must not record into the parent's step ring.
_STARTED: weakref.WeakSet[Collector] = weakref.WeakSet()


def _disarm_in_forked_child() -> None:
    for collector in list(_STARTED):
        collector._disarm_fast_path()
    gc_pauses.stop_in_forked_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disarm_in_forked_child)


class _PyStepState:
    """The step state and the common step's path, in Python: what ``collectors/_fast_step.c`` (``StepState``) does
    where it was not built. Same attributes, same meaning, same calls back (see there).

    A step numbered below ``fast_below`` (armed by :meth:`Collector._arm_fast_path`: a step with nothing to do but its
    timestamps and its record, i.e. most steps) is handled here alone, and its record goes straight into the step
    ring (:func:`step_writer.words`), with no further Python call, module global or object beyond this one and the
    ring. Why: right after a training step the CPU's caches hold the step's data, not the collector's, and every
    call, object and global the collector touches then costs a cache miss (bench/README.md, "Collector overhead").
    Every other step goes through ``_enter_full`` / ``_exit_full`` (``Collector._step_begin`` / ``_step_end``),
    which re-arm the fast path."""

    __slots__ = ("depth", "next_step", "current", "t0", "fast_below", "_words", "_count", "_at", "_ring_end", "_now",
                 "_c")

    def __init__(self) -> None:
        self.depth = 0                           # steps open (nested steps count)
        self.next_step = 0
        self.current: int | None = None          # the step running now
        self.t0 = 0                              # its start (time_ns)
        self.fast_below: int | float = -1        # steps below this are handled here alone; -1: none
        self._words: memoryview | None = None    # the step ring (step_writer.words) while the fast path is armed,
        self._count = 0                          # the records in it (its word 1),
        self._at = self._ring_end = 0            # the next record's first word, and the words' end
        self._now = time.time_ns                 # a slot: a module global is one more cold cache line
        self._c: Any = None

    def __enter__(self) -> Any:
        step = self.next_step
        if self.depth or step >= self.fast_below:
            self._enter_full()       # type: ignore[attr-defined]
            return self
        self.t0 = self._now()
        self.current = step
        self.depth = 1               # last: a close() from a signal handler before this finds no step open
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and self.depth == 1 and self.current < self.fast_below:  # type: ignore[operator]
            self.depth = 0           # first, as in Collector._step_end: a close() from a signal handler from here
            t1 = self._now()         # on finds no step open
            step = self.current
            try:                     # step_writer's layout: the record's five words, then the count (word 1)
                w = self._words
                i = self._at
                w[i] = step          # type: ignore[index]
                w[i + 1] = self.t0   # type: ignore[index]
                w[i + 2] = t1        # type: ignore[index]
                w[i + 3] = t1        # type: ignore[index]
                w[i + 4] = 0         # type: ignore[index]
                self._count = n = self._count + 1
                w[1] = n             # type: ignore[index]
                i += 5
                self._at = i if i < self._ring_end else 6
            except Exception:        # the ring let go of (a close() from a signal handler): as the full path does
                self.fast_below = -1
                self._ring_gone(step, self.t0, t1)  # type: ignore[attr-defined]
            self.next_step = step + 1  # type: ignore[operator]
            self.current = None
            return
        self._exit_full(exc_type, exc, tb)  # type: ignore[attr-defined]


try:
    from workbench.collectors import _fast_step
except ImportError:      # not built (no C compiler at install): the Python path
    _fast_step = None
# A build of another layout than step_writer's (a stale build from an older checkout) is not used.
_CStepState = (_fast_step.StepState if _fast_step is not None and (sw.WRITTEN, sw.FIRST_WORD, sw.RECORD_WORDS)
               == (_fast_step.WRITTEN, _fast_step.FIRST_WORD, _fast_step.RECORD_WORDS) else None)

#: The step context's implementations: "c" (collectors/_fast_step.c, where built) and "python".
STEP_IMPLS: tuple[str, ...] = ("c", "python") if _CStepState is not None else ("python",)
#: Set to "python" to use the Python step context even where the C one is built (read when a Collector is made).
STEP_IMPL_ENV = "WORKBENCH_STEP_IMPL"


class _StepContextCalls:
    """What both step contexts call back into: the full path of a step, and a ring let go of while armed."""

    __slots__ = ()

    def _enter_full(self) -> None:
        self._c._step_begin()    # type: ignore[attr-defined]  # nested, not armed, or a step with work

    def _exit_full(self, exc_type: object, exc: object, tb: object) -> None:
        c = self._c              # type: ignore[attr-defined]
        if exc_type is not None and c._hang is not None:  # hang capture: the step an error left
            c._hang.on_step_error(exc)
        if exc_type is not None and self.depth == 1:  # type: ignore[attr-defined]
            c._cut_step = True   # its steps.jsonl line says "interrupted"
        c._step_end()

    def _ring_gone(self, step: int, t0: int, t1: int) -> None:
        if self._c._steps is not None:  # type: ignore[attr-defined]
            self._c._steps.record(step, t0, t1, t1, 0)  # type: ignore[attr-defined]

    def _decorate(self, fn: Any = None) -> Any:
        return Collector.step(self._c, fn)  # type: ignore[attr-defined]


def _context_classes(base: type) -> tuple[type, type]:
    """The step context on ``base`` (``_CStepState`` or ``_PyStepState``), and its first-step variant: it notes the
    user's call site once (``source_sites``), then is the plain step context (nothing per step after that)."""

    class StepContext(_StepContextCalls, base):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __init__(self, collector: Collector) -> None:
            super().__init__()
            self._c = collector

    class FirstStepContext(StepContext):
        __slots__ = ()

        def __enter__(self) -> Any:
            self.__class__ = StepContext
            self._c._call_site = source_sites.call_site()
            return StepContext.__enter__(self)

    StepContext.__qualname__ = FirstStepContext.__qualname__ = f"_StepContext[{base.__name__}]"
    return StepContext, FirstStepContext


_CONTEXTS: dict[str, tuple[type, type]] = {"python": _context_classes(_PyStepState)}
if _CStepState is not None:
    _CONTEXTS["c"] = _context_classes(_CStepState)

# The ring's layout as the literals in _PyStepState.__exit__ take it (a module global there would be one more cold
# cache line each).
if (sw.WRITTEN, sw.FIRST_WORD, sw.RECORD_WORDS) != (1, 6, 5):
    raise ImportError("collectors.step_writer's ring layout changed: update _PyStepState.__exit__")


def step_impl() -> str:
    """The step context a Collector made now uses: ``$WORKBENCH_STEP_IMPL`` if it names one built, else "c" where
    built, else "python"."""
    wanted = os.environ.get(STEP_IMPL_ENV, "")
    return wanted if wanted in STEP_IMPLS else STEP_IMPLS[0]


#: At close, how long to poll for the device times of the last steps before giving up on them.
CLOSE_DEVICE_WAIT_S = 5.0


class Collector(contextlib.ContextDecorator):
    """Instrument a training loop; every rank writes its part of the run directory at ``path``.

    ``with collector:`` around the loop (or ``@collector`` on the function that runs it) and
    ``with collector.step():`` around each iteration (or ``@collector.step`` on the train-step function).
    Options are the fields of :class:`CollectorOptions` as keywords after ``path`` (``profile_start=5,
    profile_length=3, profile_repeat=1, profile_every=100, profile_ranks=None, activities=None,
    record_shapes=False, with_stack=False, profile_memory=False, with_modules=False, compile_config=None,
    allow_unsafe=False, compile_capture=True, device_timing=True, nvtx=True, run_id=None, extra={}``), or
    ``options=``. A bad option raises ``ValueError``; a compile config that does not validate or sets anything
    outside the allowlist of ``docs/compile-config.md`` raises :class:`workbench.errors.InputError` (both at
    construction) unless this code passes ``allow_unsafe=True``.
    After that the collector never raises into training: its errors are logged once per component, listed in
    ``collector.errors`` and ``fingerprint.json``, and the part that failed is turned off.

    What is written (``docs/run-directory.md``): ``run.json`` (rank 0), ``rank<R>/fingerprint.json``,
    ``rank<R>/steps.jsonl`` (every step), ``rank<R>/trace/*.json.gz`` (profiler windows),
    ``rank<R>/compile/*.log`` (TORCH_TRACE-format compile log, recompiles tagged ``step=<N>``).
    """

    def __init__(self, path: str | os.PathLike[str], *, options: CollectorOptions | None = None,
                 **kwargs: Any) -> None:
        if options is not None and kwargs:
            raise ValueError("pass either options=CollectorOptions(...) or keyword options, not both")
        self.options = options if options is not None else CollectorOptions(**kwargs)
        self.path = Path(path)
        self.errors: list[str] = []
        self._failed: set[str] = set()
        self.compile_config: Any = None
        self._applier: ConfigApplier | None = None
        self._compile_config_error: str | None = None
        if self.options.compile_config is not None:
            from workbench.compile_config import load_compile_config

            self.compile_config = load_compile_config(self.options.compile_config,  # raises InputError
                                                      allow_unsafe=self.options.allow_unsafe)
            self._applier = ConfigApplier(self.compile_config, self._fail)  # records what took effect
            self._applier.apply_env()
            self._applier.install()  # torch.compile gets [compile]/[mark_dynamic] while the collector exists
        self.step_impl = step_impl()           # the step context's implementation: "c" or "python"
        self._state: Any = _CONTEXTS[self.step_impl][1](self)   # the step state and collector.step()'s context
        if self.step_impl == "c":
            self.step = self._state.step       # collector.step() without a Python frame (Collector.step otherwise)
        self._call_site: Any = None   # the user's frames at the first ``with collector.step():`` (source_sites)
        self._started = False
        self._closed = False
        self.rank, self.local_rank, self.world_size = 0, 0, 1
        self.rank_source = "default"
        self._steps: StepLog | None = None     # steps.jsonl: a record per step, written by another process (kept
        #                                        after close: its mode goes into fingerprint.json "steps_writer")
        self._profiled = False                 # the step running now is recorded by a profiler window
        # A step at or past _next_work (or any step while _every_step) runs _step_*_work: the next step of a
        # profiler window's (_windows_at) or of CUDA timing's (_timing_at); every step with NVTX or a compile config.
        self._every_step = False
        self._windows_at: float = math.inf
        self._timing_at: float = math.inf
        self._next_work: float = math.inf
        self._windows: ProfilerWindows | None = None
        self._compile_handler: compile_capture.TraceFileHandler | None = None
        self._hang: hang_capture.HangCapture | None = None
        self._gc: gc_pauses.GcPauses | None = None
        self._ranges = Ranges(enabled=False)
        self._open_ranges: dict[str, tuple[Any, bool]] = {}
        self._hooks: list[Any] = []          # hooks that stay (mark_dynamic)
        self._range_hooks: list[Any] = []    # forward/backward/optimizer range hooks, only while they record
        self._instrumented: list[tuple[Any, Any]] = []
        self._applied_threads: set[int] = set()
        self._cuda = False
        self._event_pool: list[Any] = []
        self._pending: deque[tuple[int, Any, Any]] = deque()
        self._e0: Any = None
        self._stream: Any = None               # the CUDA stream the last timing event was recorded on,
        self._stream_key: tuple[int, int] | None = None   # and its (device, raw handle)
        self._created = ""
        self._run_id = ""
        self._prev_sigterm: Any = None       # the SIGTERM handler before ours (chained to)
        self._sigterm_installed = False
        self._stop_reason: str | None = None  # run.json: None (normal end), "SIGTERM", or the exception's type
        self._cut_step = False                # the step being ended was cut short (close inside a step)
        self._interrupted_step: int | None = None

    # ------------------------------------------------------------------ public
    @property
    def rank_dir(self) -> Path:
        return self.path / rundir.RANK_DIR.format(rank=self.rank)

    @property
    def steps_done(self) -> int:
        """Number of completed steps."""
        return self._state.next_step

    @property
    def step_num(self) -> int:
        """The step running now, or the next one between steps."""
        return self._state.current if self._state.current is not None else self._state.next_step

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """``torch.compile`` keyword arguments from the compile config (``{}`` without one)."""
        return self.compile_config.compile_kwargs if self.compile_config is not None else {}

    @property
    def trace_files(self) -> list[Path]:
        return list(self._windows.files) if self._windows is not None else []

    def compile(self, model: Any, **kwargs: Any) -> Any:
        """``torch.compile(model, **compile_kwargs, **kwargs)``: the compile config's arguments applied."""
        import torch

        return torch.compile(model, **{**self.compile_kwargs, **kwargs})

    def step(self, fn: F | None = None) -> Any:
        """``with collector.step():`` around one iteration, or ``@collector.step`` on a train-step function.

        Where the C step context is built, an instance's ``step`` is its context's C method of the same behaviour
        (no Python frame for ``collector.step()``); this method is what it calls for ``@collector.step``."""
        if fn is None:
            return self._state
        if not callable(fn):
            raise TypeError(f"collector.step takes a function to decorate or nothing, got {fn!r}")
        ctx = self._state

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with ctx:
                return fn(*args, **kwargs)

        return wrapped

    def range(self, name: str) -> Any:
        """A named range (NVTX, and ``record_function`` while profiling): ``with collector.range("data"):``."""
        return self._ranges.range(name)

    def instrument(self, model: Any = None, optimizer: Any = None) -> Collector:
        """Add ``forward``, ``backward`` and ``optimizer`` ranges through hooks.

        ``forward``: the model's forward (pre- and post-forward hooks on ``model``, e.g. the DDP wrapper).
        ``backward``: from the end of forward to the start of ``optimizer.step()`` (or the end of the step):
        loss, backward and gradient clipping, kept on the training thread. ``optimizer``: ``optimizer.step()``
        (step pre/post hooks). The range hooks are attached only while they record something (a profiler window,
        or an NVTX tool such as Nsight Systems attached), since a hooked call costs ~20 µs. With a compile config
        that has ``[mark_dynamic]``, also marks the model's inputs (that hook stays).
        """
        try:
            if model is not None and self.compile_config is not None and self.compile_config.mark_dynamic:
                self._hooks.append(self._applier.hook_module(model))
        except Exception as exc:
            self._fail("compile_config", exc)
        self._instrumented.append((model, optimizer))
        if self._ranges_wanted():
            self._attach_range_hooks()
        return self

    def _ranges_wanted(self) -> bool:
        """Range hooks record something: an NVTX tool is attached, or a profiler window is recording."""
        return self._ranges.nvtx_on or (self._windows is not None and self._windows.recording)

    def _attach_range_hooks(self) -> None:
        """Hook the instrumented models and optimizers (hooks cost ~20 µs each per step, so only while useful)."""
        if self._range_hooks or not self.options.nvtx:
            return
        try:
            for model, optimizer in self._instrumented:
                if model is not None:
                    self._range_hooks.append(model.register_forward_pre_hook(self._fwd_pre))
                    self._range_hooks.append(model.register_forward_hook(self._fwd_post))
                if optimizer is not None:
                    self._range_hooks.append(optimizer.register_step_pre_hook(self._opt_pre))
                    self._range_hooks.append(optimizer.register_step_post_hook(self._opt_post))
        except Exception as exc:
            self._fail("ranges", exc)

    def _detach_range_hooks(self) -> None:
        for handle in self._range_hooks:
            with contextlib.suppress(Exception):
                handle.remove()
        self._range_hooks.clear()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Collector:
        self.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # after an exception the device may never finish (a dead peer in a queued collective): don't wait on it
        if exc_type is not None and self._stop_reason is None:
            self._stop_reason = getattr(exc_type, "__name__", str(exc_type))
        self.close(device_wait_s=0.0 if exc_type is not None else CLOSE_DEVICE_WAIT_S)

    def start(self) -> Collector:
        """Open the run directory for this rank (``with collector:`` calls it; the first step does too)."""
        if self._started:
            return self
        self._started = True
        self._closed = False
        _STARTED.add(self)
        self.rank, self.local_rank, self.world_size, self.rank_source = _dist_info()
        self._created = datetime.now(timezone.utc).isoformat()
        self._run_id = (self.options.run_id or _env_run_id() or uuid.uuid4().hex[:12])
        self._ranges = Ranges(enabled=self.options.nvtx)
        try:
            self.rank_dir.mkdir(parents=True, exist_ok=True)
        except Exception as exc:
            self._fail("run_dir", exc)
        self._apply_in_thread()
        try:
            steps = self.path / rundir.STEPS_JSONL.format(rank=self.rank)
            self._steps = StepLog(steps, self._steps_report)
        except Exception as exc:
            self._fail("steps", exc)
        if self.options.gc_pauses:
            self._gc = gc_pauses.GcPauses(self.path / rundir.GC_PAUSES.format(rank=self.rank),
                                          lambda exc: self._fail("gc_pauses", exc))
            self._gc.start()
        st = self._state
        self._hang = hang_capture.start(self.rank_dir, self.rank, lambda: (st.current, st.next_step),
                                        lambda exc: self._fail("hang_capture", exc))
        if self.options.compile_capture:
            try:
                log_path = (self.path / rundir.COMPILE_DIR.format(rank=self.rank)
                            / f"dedicated_log_torch_trace_rank_{self.rank}_{os.getpid()}.log")
                self._compile_handler = compile_capture.install(
                    log_path, lambda exc: self._fail("compile_capture", exc))
                compile_capture.set_step_source(lambda: self.step_num)
            except Exception as exc:
                self._fail("compile_capture", exc)
        if self.options.profiles_rank(self.rank):
            self._windows = ProfilerWindows(
                self.options, self.path / rundir.TRACE_DIR.format(rank=self.rank), self.rank, self._fail)
        if self._instrumented and self._ranges_wanted():
            self._attach_range_hooks()
        self._schedule_step_work()
        self._write_fingerprint()
        self._write_run_json(final=False)
        atexit.register(self.close)
        self._install_sigterm()
        return self

    def close(self, *, device_wait_s: float = CLOSE_DEVICE_WAIT_S) -> None:
        """Finish: resolve pending CUDA step times (waiting at most ``device_wait_s``, here only), save a window
        in progress, write the final fingerprint and run.json. Idempotent."""
        if not self._started or self._closed:
            return
        self._closed = True
        self._disarm_fast_path()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._state.depth:  # closed inside a step (SIGTERM, or an exception with no step()): its line says so
            self._state.depth = 1
            self._cut_step = True
            self._step_end()
        self._drain_events(wait_s=device_wait_s)
        last = self._state.next_step - 1 if self._state.next_step else None
        if self._windows is not None:
            self._windows.close(last)
        self._detach_range_hooks()
        for handle in self._hooks:
            with contextlib.suppress(Exception):
                handle.remove()
        self._hooks.clear()
        if self._applier is not None:
            self._applier.close(self._state.next_step)
        if self._compile_handler is not None:
            compile_capture.set_step_source(None)
            with contextlib.suppress(Exception):
                compile_capture.uninstall(self._compile_handler)
        if self._steps is not None:
            self._steps.close()       # every step's line is on disk from here
        if self._gc is not None:
            self._gc.close()
            self._gc = None
        if self._hang is not None:  # Flight Recorder dump and exit record (docs/hangs.md)
            self._hang.close()
            self._hang = None
        self._write_fingerprint()
        self._write_run_json(final=True)
        self._restore_sigterm()
        self._started = False

    def _schedule_step_work(self) -> None:
        """Which steps need more than a timestamp and a queued record (see ``_next_work``)."""
        n, every = self._state.next_step, self.options.device_timing_every
        self._every_step = self._ranges.nvtx_on or self._applier is not None
        self._profiled = False
        self._windows_at = self._windows.next_busy_step(n) if self._windows is not None else math.inf
        self._timing_at = -(-n // every) * every if self.options.device_timing else math.inf
        self._next_work = min(self._windows_at, self._timing_at)

    # ------------------------------------------------------------------ steps (hot path)
    def _step_begin(self) -> None:
        st = self._state
        if st.depth:
            st.depth += 1
            return
        t0 = _now()
        if not self._started:
            self.start()
        st.depth = 1
        step = st.next_step
        st.current = step
        st.t0 = t0
        if self._every_step or step >= self._next_work:   # else nothing to do (most steps)
            try:
                self._step_begin_work(step)
            except Exception as exc:
                self._fail("step", exc)

    def _step_begin_work(self, step: int) -> None:
        """The rare part of a step's start: a new thread (compile config), a profiler window, NVTX, CUDA events."""
        if self._applier is not None and threading.get_ident() not in self._applied_threads:
            self._apply_in_thread()
        if self._windows is not None and step >= self._windows_at:
            self._windows.on_step_start(step)
            if self._instrumented and self._windows.recording:
                self._attach_range_hooks()
            self._profiled = self._windows.recording
        if self._ranges.nvtx_on:   # NVTX only: Kineto has ProfilerStep#N
            self._open_ranges["step"] = self._ranges.push(f"step {step}", kineto=False)
        if step >= self._timing_at:
            every = self.options.device_timing_every
            self._timing_at = step - step % every + every
            if self._pending:
                self._drain_events()      # CUDA times of earlier timed steps that completed
            self._record_start_event()

    def _step_end(self) -> None:
        st = self._state
        if st.depth > 1:
            st.depth -= 1
            return
        if not st.depth:
            return
        st.depth = 0
        step = st.current if st.current is not None else st.next_step
        e1 = self._record_end_event() if self._e0 is not None else None
        t1 = ready = _now()
        profiled = self._profiled
        if e1 is not None or self._every_step or step >= self._next_work or self._open_ranges:
            try:
                self._step_end_work(step, e1)
            except Exception as exc:
                self._fail("step", exc)
            ready = _now()     # the collector's own work (a trace stopped) is not the next data wait
        if self._steps is not None:    # a record in shared memory; the step writer process makes the line
            self._steps.record(step, st.t0, t1, ready,
                               (PROFILED if profiled else 0) | (INTERRUPTED if self._cut_step else 0))
        if self._cut_step:          # it ran in part: numbered and counted, marked in steps.jsonl and run.json
            self._cut_step = False
            self._interrupted_step = step
        st.next_step = step + 1
        st.current = None
        self._arm_fast_path()

    def _arm_fast_path(self) -> None:
        """Between steps: let the step context handle the coming steps alone, up to the next one with work or the
        next record the step log must see itself (its writer check); or none (``fast_below`` -1)."""
        st, log = self._state, self._steps
        ring = log.cursor() if log is not None and self._started and not self._closed else None
        if (ring is None or st.depth or self._every_step or self._e0 is not None or self._open_ranges
                or self._cut_step or self._profiled):
            self._disarm_fast_path()
            return
        st._words, st._count, st._at, st._ring_end = ring.words, ring.count, ring.at, ring.end
        st.fast_below = min(self._next_work, st.next_step + ring.before_check)

    def _disarm_fast_path(self) -> None:
        """Every step through the full path until ``_step_end`` re-arms (close, a forked child)."""
        self._state.fast_below = -1
        self._state._words = None

    def _step_end_work(self, step: int, e1: Any) -> None:
        """The rare part of a step's end: ranges, the CUDA end event, a profiler window, the compile config."""
        if self._open_ranges:
            for name in ("optimizer", "backward", "forward", "step"):
                token = self._open_ranges.pop(name, None)
                if token is not None:
                    self._ranges.pop(*token)
        if e1 is not None and self._steps is not None:   # resolved at the next timed step (_drain_events)
            self._pending.append((step, self._e0, e1))
        self._e0 = None
        if self._windows is not None and step >= self._windows_at:
            self._windows.on_step_end(step)
            if self._range_hooks and not self._ranges_wanted():
                self._detach_range_hooks()
            self._profiled = self._windows.recording
            self._windows_at = self._windows.next_busy_step(step + 1)
        if self.compile_config is not None:
            self._compile_config_step_end(step)
        self._next_work = min(self._windows_at, self._timing_at)

    # ------------------------------------------------------------------ CUDA step time
    def _record_start_event(self) -> None:
        import torch

        if not self._cuda:
            if not torch.cuda.is_available():
                self._timing_at = math.inf   # no GPU in this process: no step is ever timed (nor checked again)
                return
            if not torch.cuda.is_initialized():
                return
            self._cuda = True
        self._e0 = self._recorded_event()

    def _record_end_event(self) -> Any:
        try:
            return self._recorded_event()
        except Exception as exc:
            self._fail("device_timing", exc)
            self._e0 = None
            return None

    def _recorded_event(self) -> Any:
        """A timing event recorded on the current CUDA stream. ``Event.record()`` builds a Python ``Stream`` for the
        current stream at every call (~12 µs of a launch-bound step on the H200, bench/README.md); here one is built
        only when the current stream is another than last time (compared by device and raw handle: two C calls)."""
        import torch

        e = self._event_pool.pop() if self._event_pool else torch.cuda.Event(enable_timing=True)
        raw_of = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw_of is None:        # a torch without it: the plain call
            e.record()
            return e
        device = torch._C._cuda_getDevice()
        key = (device, raw_of(device))      # the default stream's handle is 0 on every device
        if key != self._stream_key:
            self._stream, self._stream_key = torch.cuda.current_stream(), key
        torch._C._CudaEventBase.record(e, self._stream)
        return e

    def _drain_events(self, *, wait_s: float = 0.0) -> None:
        """Records of the CUDA step times whose end event completed (at a timed step; at close, polling up to
        ``wait_s`` seconds for the rest: never a blocking synchronize, so a hung collective cannot hang the exit)."""
        deadline = time.monotonic() + wait_s
        try:
            while self._pending:
                step, e0, e1 = self._pending[0]
                while not e1.query():
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(0.001)
                self._pending.popleft()
                if self._steps is not None:
                    self._steps.record(step, int(e0.elapsed_time(e1) * 1e6), 0, 0, DEVICE)
                if len(self._event_pool) < 64:
                    self._event_pool.extend((e0, e1))
        except Exception as exc:
            self._pending.clear()
            self._fail("device_timing", exc)

    # ------------------------------------------------------------------ forward / backward / optimizer hooks
    def _fwd_pre(self, module: Any, args: Any) -> None:
        if not self._state.depth:
            return
        for name in ("backward", "optimizer"):
            token = self._open_ranges.pop(name, None)
            if token is not None:
                self._ranges.pop(*token)
        self._open_ranges["forward"] = self._ranges.push("forward")

    def _fwd_post(self, module: Any, args: Any, output: Any) -> None:
        token = self._open_ranges.pop("forward", None)
        if token is not None:
            self._ranges.pop(*token)
        if self._state.depth:
            self._open_ranges["backward"] = self._ranges.push("backward")

    def _opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        token = self._open_ranges.pop("backward", None)
        if token is not None:
            self._ranges.pop(*token)
        if self._state.depth:
            self._open_ranges["optimizer"] = self._ranges.push("optimizer")

    def _opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        token = self._open_ranges.pop("optimizer", None)
        if token is not None:
            self._ranges.pop(*token)

    # ------------------------------------------------------------------ compile config
    def _apply_in_thread(self) -> None:
        self._applied_threads.add(threading.get_ident())
        if self.compile_config is None:
            return
        try:
            self._applier.apply_in_thread()
        except Exception as exc:
            self._compile_config_error = f"{type(exc).__name__}: {exc}"
            self._fail("compile_config", exc)

    def _compile_config_step_end(self, step: int) -> None:
        try:
            for done in self._applier.on_step_end(step):
                log.info("workbench: compile config at step %d: %s", step, done)
        except Exception as exc:
            self._fail("compile_config", exc)

    # ------------------------------------------------------------------ files
    def _write_fingerprint(self) -> None:
        try:
            fp = fingerprint(rank=self.rank, local_rank=self.local_rank, world_size=self.world_size)
            fp["rank_source"] = self.rank_source
            fp["run_id"] = self._run_id
            fp["steps"] = self._state.next_step
            fp["trace_files"] = [p.name for p in self.trace_files]
            fp["compile_log_records"] = self._compile_handler.records if self._compile_handler else 0
            fp["errors"] = list(self.errors)
            fp["steps_writer"] = self._steps.mode if self._steps is not None else None
            fp["step_context"] = self.step_impl
            fp["compile_config_applied"] = self._applier.report() if self._applier is not None else None
            rundir.write_json(self.path / rundir.FINGERPRINT.format(rank=self.rank), fp)
        except Exception as exc:
            self._fail("fingerprint", exc)

    def _write_run_json(self, *, final: bool) -> None:
        if self.rank != 0:
            return
        try:
            opts = asdict(self.options)
            opts["compile_config"] = str(opts["compile_config"]) if opts["compile_config"] else None
            extra = opts.pop("extra")
            meta: dict[str, Any] = {
                "run_id": self._run_id,
                "created": self._created,
                "world_size": self.world_size,
                "argv": list(sys.argv),
                "collector_version": COLLECTOR_VERSION,
                "profile": opts,
                "profile_windows": self.options.windows(),
                "compile_config": self.compile_config.to_dict() if self.compile_config is not None else None,
                "compile_config_path": (str(Path(self.options.compile_config).resolve())
                                        if self.options.compile_config else None),
                "compile_config_error": self._compile_config_error,
                "compile_config_applied": self._applier.report() if self._applier is not None else None,
                "extra": extra,
            }
            if final:
                meta["source_sites"] = source_sites.scan_safely(self._call_site)  # read, never run
                meta["finished"] = datetime.now(timezone.utc).isoformat()
                meta["steps"] = self._state.next_step
                meta["stop_reason"] = self._stop_reason
                meta["interrupted_step"] = self._interrupted_step
            rundir.write_json(self.path / rundir.RUN_JSON, meta)
        except Exception as exc:
            self._fail("run_json", exc)

    # ------------------------------------------------------------------ SIGTERM
    def _install_sigterm(self) -> None:
        """On SIGTERM (how torchrun stops its workers) finish like ``close()``, then let the signal do what it did
        before: call the previous handler, or, where that was the default action, die of the signal."""
        if self._sigterm_installed or threading.current_thread() is not threading.main_thread():
            return
        try:
            self._prev_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
            self._sigterm_installed = True
        except (ValueError, OSError) as exc:   # not the main interpreter, or signals unavailable
            self._fail("sigterm", exc)

    def _restore_sigterm(self) -> None:
        if not self._sigterm_installed:
            return
        self._sigterm_installed = False
        with contextlib.suppress(Exception):
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:   # only if nobody replaced ours since
                prev = self._prev_sigterm
                signal.signal(signal.SIGTERM, prev if prev is not None else signal.SIG_DFL)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        prev = self._prev_sigterm
        try:
            if self._stop_reason is None:
                self._stop_reason = "SIGTERM"
            self.close(device_wait_s=0.0)
        except Exception:  # never keep the signal from acting
            pass
        finally:
            self._restore_sigterm()
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:       # the default action (or a handler set outside Python): terminate
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    # ------------------------------------------------------------------ errors
    def _steps_report(self, exc: BaseException) -> None:
        """The step log's reports: lost records (steps go on being written) apart from its failures."""
        if isinstance(exc, StepRecordsLost):
            self._fail("steps_lost", exc, consequence="steps.jsonl marks the gap")
        else:
            self._fail("steps", exc)

    def _fail(self, component: str, exc: BaseException, *,
              consequence: str = "training continues without it") -> None:
        """Log a collector error once per component and remember it; never raises."""
        message = f"{component}: {type(exc).__name__}: {exc}"
        if component not in self._failed:
            self._failed.add(component)
            self.errors.append(message)
            try:
                log.warning("workbench collector (rank %s): %s; %s", self.rank, message, consequence)
            except Exception:
                pass


def _env_run_id() -> str | None:
    value = os.environ.get("WORKBENCH_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID")
    return value if value and value != "none" else None
