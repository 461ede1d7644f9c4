"""Profiler windows driven by the collector's step counter (``torch.profiler`` in manual mode).

A window ``(first, last)`` is recorded like ``torch.profiler.schedule`` would: the profiler is prepared
(CUPTI/Kineto set-up, the expensive part) during the warm-up step ``first - 1``, tracing starts at the end of
that step, and ``ProfilerStep#N`` user annotations span from the end of step ``N-1`` to the end of step ``N``
(so the data loading between steps belongs to the step, as with ``profile.step()``). Step numbers in the trace
are the collector's own. At the end of ``last`` the trace is stopped on the training thread (Kineto's stop, CUPTI
detached) and exported by a background thread: Kineto's JSON to a temp folder, gzip-compressed there (zlib releases
the GIL) and renamed into ``rank<R>/trace/``; ``close()`` waits for it. (Only ``export_chrome_trace``; never
together with ``tensorboard_trace_handler``. Kineto's JSON writer holds the GIL, so that part still delays the
training thread wherever it runs: bench/README.md, "Collector overhead".)

No profiler object exists outside windows, so the always-on path costs nothing here; and CUPTI is detached after
each window (``TEARDOWN_CUPTI=1`` unless set otherwise), so the steps after a window cost what they did before it.
"""

from __future__ import annotations

import gzip
import math
import os
import shutil
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from workbench.collectors.options import CollectorOptions

#: gzip level of exported traces (torch's own ``.gz`` export uses 9, line by line: several times slower).
EXPORT_GZIP_LEVEL = 6
#: When each trace export ran (``rank<R>/trace/exports.jsonl``; not a trace: no ``.json`` suffix).
EXPORTS_FILE = "exports.jsonl"
#: At close, how long to wait for each background trace export.
EXPORT_WAIT_S = 300.0


class ProfilerWindows:
    """Starts, steps and exports ``torch.profiler`` windows. Every error goes to ``on_error`` and skips the
    window; training goes on."""

    def __init__(self, options: CollectorOptions, trace_dir: Path, rank: int,
                 on_error: Callable[[str, BaseException], None]) -> None:
        self.options = options
        self.trace_dir = trace_dir
        self.rank = rank
        self._on_error = on_error
        self._prof: Any = None
        self._window: tuple[int, int] | None = None
        self._recording = False
        self._step_rf: Any = None
        self._step_rf_step: int | None = None   # the step the open ProfilerStep#N span is for
        self.files: list[Path] = []
        self.windows_skipped = 0
        self._exports: list[threading.Thread] = []

    @property
    def recording(self) -> bool:
        return self._recording

    def next_busy_step(self, step: int) -> float:
        """The first step from ``step`` on at whose start or end :meth:`on_step_start` / :meth:`on_step_end` can
        act (a window's warm-up step, or ``step`` itself while a window is prepared or recording); ``inf``: none.
        The collector calls them only from that step on."""
        if self._recording or self._prof is not None:
            return step
        o = self.options
        every = o.profile_every if o.profile_repeat > 1 else 0
        k = max(0, -(-(step + 1 - o.profile_start) // every) - 1) if every else 0
        while k < o.profile_repeat:
            first = o.profile_start + k * every
            busy = max(first - 1, 0)                     # the warm-up step (step 0 for a window at 0)
            if busy >= step:
                return busy
            if first >= step:                            # its warm-up is past (failed, or started at first):
                return step                              # on_step_start(first) prepares and starts it there
            k += 1
        return math.inf

    # ------------------------------------------------------------------ profiler object
    def _activities(self) -> list[Any]:
        import torch
        from torch.profiler import ProfilerActivity

        names = self.options.activities
        if names is None:
            names = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
        return [ProfilerActivity.CPU if n == "cpu" else ProfilerActivity.CUDA for n in names]

    def _prepare(self, window: tuple[int, int]) -> None:
        import torch.profiler

        # Kineto leaves CUPTI attached after a trace unless TEARDOWN_CUPTI=1: every later kernel launch then pays
        # for it (measured: 10-25 % of a launch-bound step, for the rest of the run). A user's own value wins, and
        # torch itself sets "0" where CUDA graphs need CUPTI kept (bench/README.md, "Collector overhead").
        os.environ.setdefault("TEARDOWN_CUPTI", "1")
        o = self.options
        with warnings.catch_warnings():   # "Profiler clears events at the end of each cycle": one cycle here
            warnings.simplefilter("ignore", UserWarning)
            prof = torch.profiler.profile(
                activities=self._activities(), record_shapes=o.record_shapes, with_stack=o.with_stack,
                profile_memory=o.profile_memory, with_modules=o.with_modules,
            )
        prof.prepare_trace()
        self._prof, self._window = prof, window

    def _enter_step(self, step: int) -> None:
        import torch.autograd.profiler as ap

        rf = ap.record_function(f"ProfilerStep#{step}")
        self._step_rf_step = step   # first: a close() from a signal handler while the span opens still removes it
        rf.__enter__()
        self._step_rf = rf

    def _exit_step(self) -> None:
        rf, self._step_rf, self._step_rf_step = self._step_rf, None, None
        if rf is not None:
            rf.__exit__(None, None, None)

    # ------------------------------------------------------------------ step hooks
    def on_step_start(self, step: int) -> None:
        if self._recording:
            if self._step_rf is None:
                self._guard(self._enter_step, step)
            return
        window = self.options.window_of(step + 1)
        if window is not None and window[0] == step + 1 and self._prof is None:
            self._guard(self._prepare, window)          # warm-up step
            return
        window = self.options.window_of(step)
        if window is not None and window[0] == step:    # no warm-up step happened (first window at step 0)
            if self._prof is None:
                self._guard(self._prepare, window)
            if self._prof is not None:
                self._guard(self._start, step)

    def _start(self, step: int) -> None:
        self._prof.start_trace()
        self._recording = True
        self._enter_step(step)

    def on_step_end(self, step: int) -> None:
        if self._recording:
            try:
                self._exit_step()
                if self._window is not None and step >= self._window[1]:
                    self._finish(step)
                else:
                    self._enter_step(step + 1)
            except Exception as exc:
                self._fail(exc)
        elif self._prof is not None and self._window is not None and step == self._window[0] - 1:
            self._guard(self._start, step + 1)

    def close(self, last_step: int | None) -> None:
        """End of the loop: a window in progress is saved as it is, up to ``last_step`` (the last step that ran,
        an interrupted one included); a prepared one is dropped. The ``ProfilerStep#N`` span already opened for
        the step after ``last_step`` (opened at the end of the step before, as ``profile.step()`` does) never ran:
        it is removed from the saved trace, and a window none of whose steps ran is not saved."""
        if self._recording:
            try:
                unran = self._step_rf_step if (self._step_rf_step is not None and last_step is not None
                                               and self._step_rf_step > last_step) else None
                self._exit_step()
                first = self._window[0] if self._window else None
                if last_step is None or (first is not None and last_step < first):
                    self._drop()           # no step of it ran; earlier windows' exports are still waited for
                else:
                    self._finish(last_step, unran_step=unran)
            except Exception as exc:
                self._fail(exc)
        elif self._prof is not None:
            self._drop()
        self.wait_exports()

    def wait_exports(self, timeout_s: float = EXPORT_WAIT_S) -> None:
        """Wait (at most ``timeout_s`` for each) for the background exports started so far."""
        for thread in self._exports:
            thread.join(timeout_s)
        self._exports = [t for t in self._exports if t.is_alive()]

    # ------------------------------------------------------------------ export
    def _finish(self, last: int, unran_step: int | None = None) -> None:
        prof, window = self._prof, self._window
        self._recording = False
        self._prof = None
        self._window = None
        prof.stop_trace()                      # training thread: Kineto's stop (CUPTI detached here)
        first = window[0] if window else last
        name = f"rank{self.rank}.steps{first}-{last}.{os.getpid()}.pt.trace.json.gz"
        thread = threading.Thread(target=self._export, args=(prof, name, unran_step),
                                  name="workbench-trace-export", daemon=True)
        self._exports.append(thread)
        thread.start()

    def _export(self, prof: Any, name: str, unran_step: int | None) -> None:
        """Background thread: Kineto's JSON to ``.tmp-<name>/``, gzip it there, rename it into the trace dir."""
        tmp_dir = self.trace_dir / f".tmp-{name}"
        t0 = time.time_ns()
        try:
            tmp_dir.mkdir(parents=True, exist_ok=True)
            raw, gz = tmp_dir / name.removesuffix(".gz"), tmp_dir / name
            cpu0 = time.thread_time_ns()
            prof.export_chrome_trace(str(raw))      # Kineto's JSON writer: holds the GIL
            gil_cpu = time.thread_time_ns() - cpu0
            with open(raw, "rb") as src, open(gz, "wb") as dst, \
                    gzip.GzipFile(fileobj=dst, mode="wb", compresslevel=EXPORT_GZIP_LEVEL) as out:
                shutil.copyfileobj(src, out, 4 << 20)
            if unran_step is not None:
                _remove_step_span(gz, unran_step)
            os.replace(gz, self.trace_dir / name)
            self.files.append(self.trace_dir / name)
            _note_export(self.trace_dir, name, t0, time.time_ns(), gil_cpu, time.thread_time_ns() - cpu0)
        except Exception as exc:
            self.windows_skipped += 1
            self._on_error("profiler", exc)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)

    def _drop(self) -> None:
        prof, self._prof, self._window, self._recording = self._prof, None, None, False
        self._step_rf = None
        try:
            if prof is not None and getattr(prof, "profiler", None) is not None:
                prof.stop_trace()
        except Exception:
            pass

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.windows_skipped += 1
        try:
            self._exit_step()
        except Exception:
            pass
        self._drop()
        self._on_error("profiler", exc)


def _note_export(trace_dir: Path, name: str, start_ns: int, end_ns: int, gil_cpu_ns: int, cpu_ns: int) -> None:
    """One line in ``trace/exports.jsonl``: when this export ran, the CPU time of its part that holds the GIL
    (Kineto's JSON writer) and its whole CPU time (with the gzip, which competes for the CPU where cores are few):
    how much it can have slowed the training thread meanwhile. The critical path names that time the profiler's,
    not the user's."""
    import orjson

    with open(trace_dir / EXPORTS_FILE, "ab") as fh:
        fh.write(orjson.dumps({"file": name, "start_ns": start_ns, "end_ns": end_ns, "gil_cpu_ns": gil_cpu_ns,
                               "cpu_ns": cpu_ns}) + b"\n")


def _remove_step_span(path: Path, step: int) -> None:
    """Rewrite the gzipped Kineto trace at ``path`` without the ``ProfilerStep#<step>`` spans (CPU and GPU user
    annotations): a step that never ran. Only at close, only for a window the end of the loop cut."""
    import gzip

    import orjson

    name = f"ProfilerStep#{step}"
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return
    doc["traceEvents"] = [e for e in events if not (isinstance(e, dict) and e.get("name") == name)]
    path.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=6))
