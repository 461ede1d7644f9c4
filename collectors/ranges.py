"""Named ranges for Nsight Systems (NVTX) and for Kineto traces (``record_function``).

Cost model: NVTX push/pop is used only when CUDA is available and an NVTX tool (Nsight Systems, Nsight Compute)
is attached, which they announce through ``NVTX_INJECTION64_PATH`` (``WORKBENCH_NVTX=1`` forces NVTX on);
``record_function`` (about 10 µs a pair on CPU even with no profiler) is only entered while a profiler is
recording (``torch.autograd._profiler_enabled()``). Inside a region that torch.compile is tracing
(``torch.compiler.is_compiling()``) nothing is emitted.

Example:
    >>> r = Ranges(enabled=True)
    >>> with r.range("data"):
    ...     pass
"""

from __future__ import annotations

import os
from typing import Any


def nvtx_tool_attached() -> bool:
    """True when an NVTX tool is injected into this process (or ``WORKBENCH_NVTX=1`` asks for NVTX anyway)."""
    return bool(os.environ.get("NVTX_INJECTION64_PATH") or os.environ.get("NVTX_INJECTION32_PATH")
                or os.environ.get("WORKBENCH_NVTX") == "1")


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
        if enabled and nvtx_tool_attached():
            try:
                if torch.cuda.is_available():
                    self._nvtx = torch.cuda.nvtx
            except Exception:
                self._nvtx = None

    @property
    def nvtx_on(self) -> bool:
        """NVTX ranges are emitted (a tool is attached): ranges cost something on every step."""
        return self._nvtx is not None

    def push(self, name: str, *, kineto: bool = True) -> tuple[Any, bool]:
        """Open ``name`` (on NVTX, and on Kineto while profiling unless ``kineto=False``); returns a token for
        :meth:`pop`."""
        if not self.enabled:
            return None, False
        torch = self._torch
        try:
            if torch.compiler.is_compiling():
                return None, False
            if self._nvtx is None and not (kineto and torch.autograd._profiler_enabled()):
                return None, False  # nothing would record it
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
