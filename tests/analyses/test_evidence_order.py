"""Evidence is written in rank order, whatever order polars groups in: ``analyze --json`` of a run is the same text
every time (``wait_by_rank`` keys and ``per_rank`` rows used to come in the order of a parallel group-by)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import workbench
from workbench.analyses.summary import analyze

REPO = Path(__file__).resolve().parents[2]
RUNS = ("cpu-gloo-4rank", "h200x2-pipeline", "cpu-gloo-pipeline")


def _rank_orders(f: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """Every rank-keyed mapping and rank-carrying row list of a finding's evidence (and its symptoms'), as written."""
    out = []
    for key, v in f["evidence"].items():
        if isinstance(v, dict) and v and all(str(k).isdigit() for k in v):
            out.append((f["kind"], key, [int(k) for k in v]))
        elif isinstance(v, list) and v and all(isinstance(x, dict) and "rank" in x for x in v):
            out.append((f["kind"], key, [int(x["rank"]) for x in v]))
    for s in f["symptoms"]:
        out += _rank_orders(s)
    return out


@pytest.mark.parametrize("name", RUNS)
def test_evidence_is_in_rank_order(name):
    path = REPO / "sample_traces" / name
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    summary = analyze(workbench.open(path))
    orders = [o for f in summary["findings"] for o in _rank_orders(f)]
    assert orders, "the run's findings carry per-rank evidence"
    assert [o for o in orders if o[2] != sorted(o[2])] == []
    again = analyze(workbench.open(path))
    assert orjson.dumps(again["findings"]) == orjson.dumps(summary["findings"])
