"""One step time everywhere (issue 29 req 3, issue 33 req 1): on every bundled run, the Overview's "Steps per rank"
table, the Pipeline page's stage table and ``workbench analyze`` (its JSON and its printed table) give each rank
the same median step time, to the last digit shown. No browser: the pages' layouts are built and their tables read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from workbench.analyses import metrics
from workbench.analyses.summary import summarize_tables
from workbench.app import compute, page_overview, page_pipeline
from workbench.app.main import PageContext
from workbench.app.store import RunStore
from workbench.commands.analyze import print_summary
from workbench.format import duration

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
RUNS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()) if SAMPLES.is_dir() else []


@pytest.fixture(scope="module")
def store() -> RunStore:
    if not RUNS:
        pytest.skip(f"{SAMPLES} is absent")
    return RunStore([SAMPLES])


def _find(component: Any, id_: str) -> Any:
    if getattr(component, "id", None) == id_:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children] if children is not None else []:
        got = _find(child, id_)
        if got is not None:
            return got
    return None


def _grid(component: Any, id_: str) -> list[dict[str, str]]:
    """The rows of a :func:`workbench.app.components.grid` as shown (cell text by column field)."""
    box = _find(component, id_)
    assert box is not None, f"no table {id_}"
    spec = json.loads(getattr(box, "data-table"))
    fields = [c["field"] for c in spec["columns"]]
    return [dict(zip(fields, row)) for row in spec["rows"]]


def _run_id(store: RunStore, name: str) -> str:
    return next(e.id for e in store.entries if e.path.name == name)


@pytest.mark.parametrize("name", RUNS)
def test_overview_pipeline_and_analyze_agree_on_the_median_step(store, name, capsys):
    rid = _run_id(store, name)
    run = store.run(rid)
    summary = summarize_tables(compute.tables(store, rid), run.ranks["rank"].to_list(), "steady")
    expected = {int(r): e["step_time_ns"] for r, e in summary["ranks"].items() if e["step_time_ns"] is not None}
    assert expected == metrics.typical_step_ns(run.steps)   # analyze --json's number is the metrics module's

    overview = page_overview.layout(PageContext(store, rid))
    shown = {int(r["rank"]): r["median_ns"] for r in _grid(overview, "steps-grid")}
    assert shown == {r: duration(v) for r, v in expected.items()}

    print_summary(summary, Path(name))
    printed = capsys.readouterr().out
    for rank, ns in expected.items():
        assert re.search(rf"^\s*{rank}\s+{re.escape(duration(ns))}\s", printed, re.M), (rank, duration(ns), printed)

    if metrics.is_pipeline(compute.table(store, rid, "bubbles")):
        stages = {int(r["rank"]): r["median_ns"] for r in _grid(page_pipeline.layout(PageContext(store, rid)),
                                                                 "stages-grid")}
        assert stages == {r: duration(v) for r, v in expected.items()}


def test_the_pipeline_runs_are_checked(store):
    """The bundled pipeline runs take the Pipeline page's branch above (the old 20.1 / 85.9 / 87.0 ms run too)."""
    piped = [n for n in RUNS if metrics.is_pipeline(compute.table(store, _run_id(store, n), "bubbles"))]
    assert {"h200x2-pipeline", "cpu-gloo-pipeline"} <= set(piped)
