"""Compile capture: torch.compile's structured log written in TORCH_TRACE format, without the env var.

``torch._logging._internal.trace_log`` is the logger that ``TORCH_TRACE=<dir>`` feeds; every structured event
reaches its handlers with ``record.metadata`` and ``record.payload``. We add a file handler formatted by torch's
own ``TorchLogsFormatter(trace=True)``, so the lines are byte-for-byte what ``TORCH_TRACE`` writes
(``V<MMDD hh:mm:ss.us> <pid> <file>:<line>] {json}`` + tab-prefixed payload lines) and tlparse reads them.

The step number is attached to each recompile through
``torch._dynamo.utils.register_hook_for_recompile_user_context`` (it lands in
``compilation_metrics.recompile_user_contexts`` as ``"step=<N>"``). That registry has no "unregister", so one
process-wide hook reads the step of the collector that is active now.

Everything here touches private torch APIs: each use is guarded and a failure turns compile capture off.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("workbench.collectors")

_STEP_SOURCE: Callable[[], int | None] | None = None
_HOOK_REGISTERED = False
_HOOK_LOCK = threading.Lock()


def _recompile_context() -> str:
    source = _STEP_SOURCE
    if source is None:
        return ""
    try:
        step = source()
    except Exception:  # never let a hook break a compile
        return ""
    return "" if step is None else f"step={step}"


def set_step_source(source: Callable[[], int | None] | None) -> None:
    """Make ``source()`` the step that recompiles report (None: report nothing); registers the hook once."""
    global _STEP_SOURCE, _HOOK_REGISTERED
    _STEP_SOURCE = source
    if source is None:
        return
    with _HOOK_LOCK:
        if not _HOOK_REGISTERED:
            from torch._dynamo.utils import register_hook_for_recompile_user_context

            register_hook_for_recompile_user_context(_recompile_context)
            _HOOK_REGISTERED = True


class TraceFileHandler(logging.Handler):
    """Writes torch's structured trace records to one file, TORCH_TRACE format, flushed per record.

    The file is opened lazily on the first record (no empty logs when nothing compiles). On a write error
    ``on_error(exc)`` is called once and the handler stops writing.
    """

    def __init__(self, path: Path, on_error: Callable[[BaseException], None]) -> None:
        super().__init__(level=logging.DEBUG)
        from torch._logging._internal import TorchLogsFormatter

        self.path = path
        self.setFormatter(TorchLogsFormatter(trace=True))
        self._fd: int | None = None
        self._on_error = on_error
        self._failed = False
        self.records = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self._failed:
            return
        try:
            text = self.format(record)
            if not text:
                return
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            data = (text + "\n").encode("utf-8", "replace")
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.records += 1
        except Exception as exc:  # full disk, formatting problem, ...
            self._failed = True
            self._on_error(exc)

    def close(self) -> None:
        try:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        except OSError:
            pass
        super().close()


def install(path: Path, on_error: Callable[[BaseException], None]) -> TraceFileHandler:
    """Attach a :class:`TraceFileHandler` writing to ``path`` to torch's trace logger and enable that logger
    the way ``torch._logging._internal._init_logs`` does for ``TORCH_TRACE`` (level DEBUG, no propagation,
    immune to ``logging.disable``). Logs the ``torch_version`` artifact first, as TORCH_TRACE does."""
    from torch._logging import _internal

    trace_log = _internal.trace_log
    handler = TraceFileHandler(path, on_error)
    if not _saved_logger_state:  # the first install remembers the logger as torch left it
        _saved_logger_state.update(level=trace_log.level, propagate=trace_log.propagate,
                                   patched="isEnabledFor" in vars(trace_log),
                                   is_enabled_for=vars(trace_log).get("isEnabledFor"))
    trace_log.setLevel(logging.DEBUG)
    trace_log.propagate = False
    trace_log.isEnabledFor = lambda level: level >= trace_log.level  # type: ignore[method-assign]
    trace_log.addHandler(handler)
    try:
        _internal._log_torch_version()
    except Exception:  # only a header; not worth failing over
        pass
    return handler


#: torch's trace logger settings before the first :func:`install`, restored by :func:`uninstall`.
_saved_logger_state: dict[str, Any] = {}


def uninstall(handler: TraceFileHandler | None) -> None:
    """Detach ``handler``; when no handler is left, give torch's trace logger back its own settings."""
    if handler is None:
        return
    try:
        from torch._logging import _internal

        trace_log = _internal.trace_log
        trace_log.removeHandler(handler)
        if not trace_log.handlers and _saved_logger_state:
            trace_log.setLevel(_saved_logger_state["level"])
            trace_log.propagate = _saved_logger_state["propagate"]
            if _saved_logger_state["patched"]:
                trace_log.isEnabledFor = _saved_logger_state["is_enabled_for"]  # type: ignore[method-assign]
            else:
                vars(trace_log).pop("isEnabledFor", None)
            _saved_logger_state.clear()
    finally:
        handler.close()
