"""Collectors: the only workbench code that runs inside training.

Example:
    >>> from workbench.collectors import Collector, CollectorOptions
    >>> CollectorOptions().windows()
    [(5, 7)]
"""

from __future__ import annotations

from workbench.collectors.collector import Collector
from workbench.collectors.options import ACTIVITIES, COMPILE_CONFIG_ENV, Activity, CollectorOptions

__all__ = ["ACTIVITIES", "COMPILE_CONFIG_ENV", "Activity", "Collector", "CollectorOptions"]
