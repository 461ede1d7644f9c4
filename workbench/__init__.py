"""workbench: collect, analyse and fix multi-rank PyTorch / torch.compile performance.

Example:
    >>> import workbench
    >>> run = workbench.open("sample_traces/cpu-gloo-4rank")   # doctest: +SKIP
    >>> run.kernels.group_by("rank", "kernel_class").len()     # doctest: +SKIP
"""

from __future__ import annotations

from workbench.errors import InputError, TraceError
from workbench.notebook import Run, open

__version__ = "0.1.0"
__all__ = ["InputError", "Run", "TraceError", "open", "__version__"]
