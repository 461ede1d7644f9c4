"""workbench: collect, analyse and fix multi-rank PyTorch / torch.compile performance.

Example:
    >>> import workbench
    >>> run = workbench.open("sample_traces/cpu-gloo-4rank")   # doctest: +SKIP
    >>> run.kernels.group_by("rank", "kernel_class").len()     # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.errors import InputError, TraceError

if TYPE_CHECKING:
    from workbench.notebook import Run, open

__version__ = "0.1.0"
__all__ = ["InputError", "Run", "TraceError", "open", "__version__"]


def __getattr__(name: str) -> Any:
    """``Run`` and ``open`` load polars and the readers on first use, so ``workbench --help`` starts fast."""
    if name in ("Run", "open"):
        from workbench import notebook

        globals().update(Run=notebook.Run, open=notebook.open)
        return globals()[name]
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
