"""How every number is shown, in one place: durations, counts with their noun, percents, table cells, column names.

The CLI, the app, the HTML report, the figures' labels and the analyses' messages all format through here, so one
value reads the same everywhere ("560 ms" on every page, never "0.56 s" on another).

* :func:`duration` — ns → ``"2.57 s"``, ``"560 ms"``, ``"4.1 ms"``, ``"85 µs"``, ``"12 ns"`` (three significant
  digits at most; the unit changes at 1 µs, 1 ms and 1 s); :func:`axis_ms` — an axis tick given in ms;
* :func:`count` — ``"1 rank"``, ``"3 ranks"``; :func:`percent` — ``"12.3 %"`` (``signed``: ``"+3.1 %"``);
* :func:`cell` — any table cell: durations (a column named ``*_ns``) as :func:`duration`, percents (``*_pct``) as
  :func:`percent`, lists joined, booleans yes/no, floats to a few digits; :func:`column_name` — a frame's column
  as a person reads it (``"cost_ns"`` → ``"cost"``, ``"is_root"`` → ``"root cause"``);
* :func:`cost` — a finding's cost: a duration, or :data:`NO_TIME_COST` when it is zero (a hazard's, a note's);
* :data:`MISSING` — what a missing value shows.

Standard library only: this module sits below everything else.

Example:
    >>> duration(560_000_000), duration(2_571_000_000), duration(85_300), duration(-4_100_000, signed=True)
    ('560 ms', '2.57 s', '85 µs', '-4.1 ms')
    >>> count(1, "rank"), count(3, "rank"), percent(12.345), percent(3.14, signed=True)
    ('1 rank', '3 ranks', '12.3 %', '+3.1 %')
"""

from __future__ import annotations

import math
from typing import Any

#: A missing value (None, NaN).
MISSING = "–"

#: What a finding's cost of zero reads as (a hazard, a configuration fact, a trend): never a measured "0 ns".
NO_TIME_COST = "no time cost"


def missing(v: Any) -> bool:
    """None, NaN or an infinity: nothing to show."""
    return v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))


def duration(ns: float | int | None, *, signed: bool = False) -> str:
    """A duration in ns with its unit: ``"2.57 s"``, ``"560 ms"``, ``"4.1 ms"``, ``"85 µs"``, ``"12 ns"``;
    negative values keep their sign (``signed``: positive ones get a ``+``); :data:`MISSING` when missing."""
    if missing(ns):
        return MISSING
    v = float(ns)  # type: ignore[arg-type]
    sign = "-" if v < 0 else ("+" if signed and v > 0 else "")
    v = abs(v)
    # each unit from the value that rounds to its first digit (999.7 ms is "1.00 s", not "1000 ms")
    if v >= 999.5e6:
        text = f"{v / 1e9:.2f} s"
    elif v >= 99.95e6:
        text = f"{v / 1e6:.0f} ms"
    elif v >= 999.5e3:
        text = f"{v / 1e6:.1f} ms"
    elif v >= 999.5:
        text = f"{v / 1e3:.0f} µs"
    else:
        text = f"{v:.0f} ns"
    return sign + text


def cost(ns: float | int | None) -> str:
    """A finding's cost: :data:`NO_TIME_COST` when zero, else :func:`duration` (:data:`MISSING` when unknown)."""
    return NO_TIME_COST if not missing(ns) and ns == 0 else duration(ns)


def axis_ms(ms: float) -> str:
    """An axis tick at ``ms`` milliseconds (a round value): ``"500 ms"``, ``"2 s"``, ``"0.2 ms"``."""
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def count(n: int, one: str, many: str | None = None) -> str:
    """``"1 rank"``, ``"3 ranks"``, ``"1,024 compiles"`` (``many``: an irregular plural)."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def percent(v: float | None, digits: int = 1, *, signed: bool = False) -> str:
    """A percentage (0–100): ``"12.3 %"`` (``signed``: ``"+3.1 %"``); :data:`MISSING` when missing."""
    if missing(v):
        return MISSING
    return f"{v:{'+' if signed else ''},.{digits}f} %"


def number(v: float | int | None) -> str:
    """A plain number: integers with thousands separators, floats to 2 decimals (3 significant digits below 1)."""
    if missing(v):
        return MISSING
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.2f}".rstrip("0").rstrip(".") if abs(v) >= 1 or v == 0 else f"{v:.3g}"  # type: ignore[arg-type]


def cell(v: Any, column: str = "") -> str:
    """One table cell as a person reads it: by the column's name a finding's :func:`cost` (``cost_ns``), a
    duration (``*_ns``) or a percent (``*_pct``),
    else lists comma-joined, booleans yes/no, integers as they are (ranks, steps, ids), floats by :func:`number`;
    missing values empty."""
    if missing(v):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        return ", ".join(cell(x) for x in v)
    if isinstance(v, (int, float)):
        if column == "cost_ns":
            return cost(v)
        if column.endswith("_ns"):
            return duration(v)
        if column.endswith("_pct"):
            return percent(v)
        return str(v) if isinstance(v, int) else number(v)
    return str(v)


def kind_title(kind: str | None) -> str:
    """A finding's kind as a title: ``"divergent_recompile"`` → ``"Divergent recompile"``."""
    return (kind or "finding").replace("_", " ").capitalize()


#: Column names that read better said differently (the rest: units dropped, underscores as spaces).
COLUMN_NAMES: dict[str, str] = {
    "is_root": "root cause", "cause_id": "explained by", "cost_basis": "cost basis", "cost_method": "how measured",
    "kind": "finding", "pg_name": "process group", "held_count": "times last", "held_pct": "last in",
    "held_share_pct": "share of step time", "held_back_ns": "held the others back", "first_step": "since step",
    "finding_kind": "answers", "code_advice": "code change", "apply": "written to the config",
    "comm_exposed_pct": "exposed communication", "memory_exposed_pct": "exposed memory copies",
    "comm_overlap_pct": "communication under compute", "comm_overlap_of_max_pct": "overlap of the longer",
    "duration_ns": "compile time", "wait_ns": "others waited", "missing_ranks": "ranks without it",
    "span_ns": "span", "world_size": "world size", "change_pct": "change", "delta_ns": "change",
}


def column_name(column: str) -> str:
    """``"cost_ns"`` → ``"cost"``, ``"idle_pct"`` → ``"idle"``, ``"is_root"`` → ``"root cause"``."""
    if column in COLUMN_NAMES:
        return COLUMN_NAMES[column]
    for unit in ("_ns", "_pct", "_ms"):
        if column.endswith(unit):
            column = column[: -len(unit)]
            break
    return column.replace("_", " ")


__all__ = ["COLUMN_NAMES", "MISSING", "NO_TIME_COST", "axis_ms", "cell", "column_name", "cost", "count", "duration", "kind_title", "missing",
           "number", "percent"]
