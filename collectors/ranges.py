"""Named ranges for Nsight Systems (NVTX) and for Kineto traces (``record_function``).

Cost model: NVTX push/pop is used only when CUDA is available (with no tool attached it is a no-op call);
``record_function`` (about 10 µs a pair on CPU even with no profiler) is only entered while a profiler is
recording (``torch.autograd._profiler_enabled()``). Inside a region that torch.compile is tracing
(``torch.compiler.is_compiling()``) nothing is emitted.

Example:
    >>> r = Ranges(enabled=True)
    >>> with r.range("data"):
    ...     pass
"""

from __future__ import annotations

from typing import Any


class _Range:
    __slots__ = ("_owner", "_name", "_rf", "_pushed")

    def __init__(self, owner: Ranges, name: str) -> None:
        self._owner = owner
        self._name = name
        self._rf: Any = None
        self._pushed = False

    def __enter__(self) -> _Range:
        self._rf, self._pushed = self._owner.push(self._name)
        return self

    def __exit__(self, *exc: object) -> None:
        self._owner.pop(self._rf, self._pushed)
        self._rf, self._pushed = None, False


class Ranges:
    """Push/pop of a named range on NVTX and, while profiling, on Kineto. Never raises."""

    def __init__(self, *, enabled: bool) -> None:
        import torch

        self.enabled = enabled
        self._torch = torch
        self._nvtx = None
        if enabled:
            try:
                if torch.cuda.is_available():
                    self._nvtx = torch.cuda.nvtx
            except Exception:
                self._nvtx = None

    def push(self, name: str, *, kineto: bool = True) -> tuple[Any, bool]:
        """Open ``name`` (on NVTX, and on Kineto while profiling unless ``kineto=False``); returns a token for
        :meth:`pop`."""
        if not self.enabled:
            return None, False
        torch = self._torch
        try:
            if torch.compiler.is_compiling():
                return None, False
            pushed = False
            if self._nvtx is not None:
                self._nvtx.range_push(name)
                pushed = True
            rf = None
            if kineto and torch.autograd._profiler_enabled():
                rf = torch.autograd.profiler.record_function(name)
                rf.__enter__()
            return rf, pushed
        except Exception:
            return None, False

    def pop(self, rf: Any, pushed: bool) -> None:
        try:
            if rf is not None:
                rf.__exit__(None, None, None)
            if pushed and self._nvtx is not None:
                self._nvtx.range_pop()
        except Exception:
            pass

    def range(self, name: str) -> _Range:
        """A context manager for the range ``name``."""
        return _Range(self, name)
