"""Findings: the FINDINGS rows analyses emit, and their ranking by the step time they cost.

Every analysis that sees a problem returns a FINDINGS frame (``kind``, ``severity``, ``ranks``, ``steps``,
``cost_ns``, ``evidence`` JSON, ``message``, ``source``); :func:`rank_findings` stacks them and orders them by
``cost_ns`` (descending), then severity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import polars as pl

from workbench.schema import FINDINGS, conform, empty

SEVERITIES: tuple[str, ...] = ("high", "medium", "low", "info")


def finding(
    kind: str,
    severity: str,
    message: str,
    source: str,
    *,
    ranks: Sequence[int] = (),
    steps: Sequence[int] = (),
    cost_ns: int | float | None = 0,
    evidence: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One finding as a dict of FINDINGS columns (``evidence`` is serialised to a JSON object)."""
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, not {severity!r}")
    return {
        "kind": kind,
        "severity": severity,
        "ranks": [int(r) for r in ranks if r is not None],
        "steps": [int(s) for s in steps if s is not None],
        "cost_ns": int(cost_ns or 0),
        "evidence": orjson.dumps(evidence or {}, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode(),
        "message": message,
        "source": source,
    }


def findings_frame(rows: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """A FINDINGS frame from :func:`finding` dicts (an empty FINDINGS frame when there are none)."""
    rows = list(rows)
    if not rows:
        return empty(FINDINGS)
    return conform(pl.DataFrame(rows, schema_overrides={"ranks": pl.List(pl.Int32), "steps": pl.List(pl.Int32)}),
                   FINDINGS)


def rank_findings(frames: Iterable[pl.DataFrame | None]) -> pl.DataFrame:
    """All findings of ``frames`` in one FINDINGS frame, most costly first (ties: higher severity, then kind)."""
    parts = [conform(f, FINDINGS) for f in frames if f is not None and not f.is_empty()]
    if not parts:
        return empty(FINDINGS)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    out = pl.concat(parts, how="vertical")
    return (
        out.with_columns(_sev=pl.col("severity").replace_strict(order, default=len(order), return_dtype=pl.Int32))
        .sort(["cost_ns", "_sev", "kind"], descending=[True, False, False], nulls_last=True, maintain_order=True)
        .drop("_sev")
    )


def findings_to_dicts(findings: pl.DataFrame) -> list[dict[str, Any]]:
    """FINDINGS rows as plain dicts with ``evidence`` parsed back into a dict (for JSON output)."""
    out = []
    for row in findings.iter_rows(named=True):
        row = dict(row)
        try:
            row["evidence"] = orjson.loads(row["evidence"]) if row["evidence"] else {}
        except orjson.JSONDecodeError:
            pass
        out.append(row)
    return out


def severity_for(value: float, high: float, medium: float) -> str:
    """``"high"`` when ``value >= high``, ``"medium"`` when ``>= medium``, else ``"low"``."""
    return "high" if value >= high else "medium" if value >= medium else "low"
