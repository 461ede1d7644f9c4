"""The notebook entry: ``workbench.open(path)`` returns a :class:`Run` — the I/O layer's run (every table as polars
frames, :class:`workbench.run.Run`) that also answers :meth:`Run.findings` from the analyses.

The run itself only reads; the analyses are imported when ``findings()`` is first called, so ``import workbench``
stays light and the I/O layer never imports an analysis.

Example:
    >>> run = workbench.open("sample_traces/h200x2-planted")     # doctest: +SKIP
    >>> for f in run.findings():                                  # doctest: +SKIP
    ...     print(f.kind, f.cost.label())
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

from workbench import run as _io

if TYPE_CHECKING:
    from workbench.analyses.findings import Finding


class Run(_io.Run):
    """:class:`workbench.run.Run` with :meth:`findings`."""

    def findings(self, window: str = "steady") -> list[Finding[Any]]:
        """Typed findings (``workbench.analyses.findings.Finding``): root causes, most costly first, symptoms under
        them. The polars view: ``workbench.analyses.findings_frame(run.findings())``."""
        from workbench.analyses.summary import run_findings

        return run_findings(self, window)  # type: ignore[arg-type]

    def critical_path(self) -> Any:
        """The critical path across ranks (``workbench.analyses.critical_path.CriticalPath``): who waited for whom
        at every collective, what the late rank was doing; ``.matrix()``, ``.lateness()``, and its figures in
        ``workbench.critical_path_view`` (docs/critical-path.md)."""
        from workbench.analyses.critical_path import critical_path_of

        return critical_path_of(self)


def open(path: str | os.PathLike[str], **options: Any) -> Run:  # noqa: A001 - the notebook's ``workbench.open``
    """:func:`workbench.run.open` (same options: ``rank``, ``on_error``, ``cache``, ``progress``, ``workers``,
    ``cluster``), returning a :class:`Run` with :meth:`~Run.findings`."""
    return cast(Run, _io.open(path, run_type=Run, **options))


__all__ = ["Run", "open"]
