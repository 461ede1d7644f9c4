"""Compare in a real browser (chromium via Playwright): the bundled before/after pair shows the fix proven.

The page must show what :func:`workbench.analyses.diff.diff_runs` returns (one definition): comparability first,
the divergent recompile ``fixed``, the per-step grid equal to the diff computed here; the default AFTER is the run
of the same job; a run with no same-job partner gets no default; a different job is "not comparable" before
anything else; 0 → 1 recompile is "worse".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workbench
from browser_util import shot, goto_ready, grid_rows, pick
from workbench import rundir
from workbench.analyses.diff import RunData, diff_runs
from workbench.analyses.summary import analysis_tables
from workbench.app import page_compare
from workbench.app.main import create_app
from workbench.format import duration as fmt_time
from workbench.format import kind_title

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
RUNS = ("cpu-recompile-before", "cpu-recompile-after", "cpu-gloo-4rank", "h200x2-ddp-nccl")


@pytest.fixture(scope="module")
def compare_root(tmp_path_factory) -> Path:
    missing = [n for n in RUNS if not (REPO / "sample_traces" / n).is_dir()]
    if missing:
        pytest.skip(f"sample_traces/{missing[0]} is absent")
    root = tmp_path_factory.mktemp("compare-runs")
    for n in RUNS:
        shutil.copytree(REPO / "sample_traces" / n, root / n, ignore=shutil.ignore_patterns(rundir.CACHE_DIR))
    return root


@pytest.fixture(scope="module")
def compare_app(compare_root):
    return create_app([compare_root], background=False)


@pytest.fixture()
def served(compare_app, served_factory):
    return served_factory(compare_app)


def _diff(root: Path, before: str, after: str):
    sides = []
    for n in (before, after):
        run = workbench.open(root / n)
        sides.append(RunData.from_run(run, analysis_tables(run), name=n))
    return diff_runs(*sides)


def _order(page, *selectors: str) -> list[int]:
    """Document positions of the first element of each selector."""
    return page.evaluate("""(sels) => { const all = [...document.querySelectorAll('*')];
        return sels.map(s => all.indexOf(document.querySelector(s))); }""", list(selectors))


def test_bundled_pair_shows_the_fix_proven(page, served, compare_root, artifacts):
    expected = _diff(compare_root, "cpu-recompile-before", "cpu-recompile-after")
    goto_ready(page, served.url("/compare?run=cpu-recompile-before"), "compare")
    # the default AFTER is the other run of the same job
    assert "cpu-recompile-after" in page.text_content("#compare-after")
    page.wait_for_selector("#compare-comparability", timeout=120_000)
    assert page.get_attribute("#compare-comparability", "data-level") == "comparable"
    assert "compile config" in page.text_content("#compare-comparability")
    rows = grid_rows(page, "diff-findings-grid")
    verdicts = {r["kind"]: r["verdict"] for r in rows}
    assert verdicts["Divergent recompile"] == "fixed", rows      # the kind as a title, as on the Overview
    assert verdicts == ({kind_title(f.kind): f.verdict for f in expected.findings}
                        | {kind_title(f.kind): "new" for f in expected.new_findings})
    costs = {r["kind"]: (r["before_cost_ns"], r["after_cost_ns"]) for r in rows}   # the duration columns' format
    assert costs == {kind_title(r["kind"]): (fmt_time(r["before_cost_ns"]), fmt_time(r["after_cost_ns"]))
                     for r in expected.findings_frame().iter_rows(named=True)}, costs
    first = _order(page, "#compare-comparability", "#diff-headline", "#diff-findings-grid", "#diff-grid")
    assert first == sorted(first) and min(first) >= 0, first  # comparability comes first
    assert page.text_content("#diff-headline") == expected.headline()
    assert page.get_attribute("#diff-step-time", "data-verdict") == expected.step_time.verdict
    shown = {r["metric"]: (r["before"], r["after"], r["direction"]) for r in grid_rows(page, "diff-grid")}
    want = {r["metric"]: (r["before"], r["after"], r["direction"])
            for r in page_compare.metrics_table(expected).iter_rows(named=True)}
    assert shown == want
    assert shown["recompiles"][2] == "better"
    shot(page, path=str(artifacts / "app-compare-fix-proven.png"), full_page=True)


def test_zero_to_one_recompile_is_worse(page, served):
    goto_ready(page, served.url("/compare?run=cpu-recompile-after&other=cpu-recompile-before"), "compare")
    shown = {r["metric"]: r["direction"] for r in grid_rows(page, "diff-grid")}
    assert shown["recompiles"] == "worse"
    verdicts = {r["kind"]: r["verdict"] for r in grid_rows(page, "diff-findings-grid")}
    assert verdicts.get("Divergent recompile") == "new"


def test_no_same_job_run_means_no_default_and_other_jobs_are_not_comparable(page, served, artifacts):
    goto_ready(page, served.url("/compare?run=cpu-gloo-4rank"), "compare")
    page.wait_for_selector("#compare-no-default", timeout=120_000)
    pick(page, "compare-after", "h200x2-ddp-nccl")
    page.wait_for_selector("#compare-comparability", timeout=120_000)
    assert page.get_attribute("#compare-comparability", "data-level") == "not comparable"
    text = page.text_content("#compare-comparability")
    assert "Not comparable" in text and "script" in text and "world size" in text
    verdicts = {r["verdict"] for r in grid_rows(page, "diff-findings-grid") if r["verdict"] != "new"}
    assert verdicts == {"not comparable"}
    first = _order(page, "#compare-comparability", "#diff-findings-grid")
    assert first == sorted(first)
    shot(page, path=str(artifacts / "app-compare-not-comparable.png"), full_page=True)
