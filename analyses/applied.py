"""``config_not_applied`` / ``config_no_effect``: settings of the run's compile config that the collector could not
apply, or applied without effect, and why.

The collector records every setting of the config it was given (``compile_config_applied`` in ``run.json`` and
each rank's ``fingerprint.json``: ``setting``, ``value``, ``applied``, ``how``, ``reason``;
``collectors/apply.py``). :func:`config_findings` turns the settings not applied into one finding per setting,
naming the ranks and the reason, so a rerun whose fix never took effect says so instead of looking unchanged.
A setting recorded ``applied: true`` and ``took_effect: false`` (set, but it did not act on that torch: checked
after the first compile, ``collectors/apply.py``) is its own finding, ``config_no_effect``, with the collector's
``effect`` text.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, make_finding, ranks_text
from workbench.analyses.kinds import ConfigNotAppliedEvidence, Kind

__all__ = ["ConfigNotAppliedEvidence", "config_findings"]


def _records(meta: dict[str, Any], fingerprints: pl.DataFrame | None) -> dict[int, list[dict[str, Any]]]:
    """Per rank, the collector's ``compile_config_applied`` list (fingerprints first, run.json for rank 0)."""
    out: dict[int, list[dict[str, Any]]] = {}
    if fingerprints is not None and not fingerprints.is_empty() and "raw" in fingerprints.columns:
        for rank, raw in fingerprints.select("rank", "raw").iter_rows():
            try:
                recs = json.loads(raw or "{}").get("compile_config_applied")
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(recs, list):
                out[int(rank)] = [r for r in recs if isinstance(r, dict)]
    recs = (meta or {}).get("compile_config_applied")
    if 0 not in out and isinstance(recs, list):
        out[0] = [r for r in recs if isinstance(r, dict)]
    return out


def config_findings(meta: dict[str, Any], fingerprints: pl.DataFrame | None = None
                    ) -> list[Finding[ConfigNotAppliedEvidence]]:
    """One ``config_not_applied`` finding per setting some rank did not apply, and one ``config_no_effect`` per
    setting some rank applied without effect (ranks and reason in each)."""
    by_setting: dict[tuple[Kind, str], dict[str, Any]] = {}
    for rank, recs in sorted(_records(meta, fingerprints).items()):
        for r in recs:
            if not isinstance(r.get("setting"), str):
                continue
            if r.get("applied") is False:
                kind, reason = Kind.CONFIG_NOT_APPLIED, r.get("reason") or "no reason recorded"
            elif r.get("applied") is True and r.get("took_effect") is False:
                kind, reason = Kind.CONFIG_NO_EFFECT, r.get("effect") or "no effect recorded"
            else:
                continue
            entry = by_setting.setdefault((kind, r["setting"]), {"value": r.get("value"), "ranks": [], "reasons": []})
            entry["ranks"].append(rank)
            if str(reason) not in entry["reasons"]:
                entry["reasons"].append(str(reason))
    path = (meta or {}).get("compile_config_path")
    out = []
    for (kind, setting), e in by_setting.items():
        reason = "; ".join(e["reasons"])[:400]
        ranks = tuple(e["ranks"])
        what = "not applied" if kind == Kind.CONFIG_NOT_APPLIED else "applied but took no effect"
        out.append(make_finding(
            kind, f"config {setting} {what} on {ranks_text(ranks)}: {reason}",
            ConfigNotAppliedEvidence(setting, e["value"], reason, ranks, path),
            Cost.none("none: the setting did not take effect"), ranks=ranks, source="applied", key=setting))
    return out


@register_detector(Kind.CONFIG_NOT_APPLIED, Kind.CONFIG_NO_EFFECT, needs=("meta", "fingerprints"), order=60)
def _not_applied(x: Inputs) -> list[Finding[ConfigNotAppliedEvidence]]:
    return config_findings(dict(x.meta), x.fingerprints)
