"""Pure analyses: functions from workbench tables (polars) to tables. They never plot, print or read files.

Typed findings: :class:`Finding` and :class:`Cost` (:mod:`workbench.analyses.findings`); their polars view:
:func:`findings_frame`.
"""

from workbench.analyses.findings import Cost, Finding, findings_frame, findings_to_dicts

__all__ = ["Cost", "Finding", "findings_frame", "findings_to_dicts"]
