"""``workbench report``: the batch HTML/JSON report, built from the same figure builders as the app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import workbench
from workbench.cli import app as cli

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "cpu-gloo-4rank"


@pytest.fixture(scope="module")
def sample() -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent (recorded by examples/cpu_gloo_4rank.py)")
    return SAMPLE


def test_json_report_equals_the_analyses(sample, tmp_path):
    from workbench.analyses.summary import analyze

    out = tmp_path / "r.json"
    res = CliRunner().invoke(cli, ["report", str(sample), "--json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    expected = json.loads(json.dumps(analyze(workbench.open(sample)), default=str))
    assert rep["summary"]["ranks"] == expected["ranks"]
    assert [f["kind"] for f in rep["summary"]["findings"]] == [f["kind"] for f in expected["findings"]]
    assert rep["compile_config"] and "[" in rep["compile_config"]
    assert rep["problems"] == []


@pytest.mark.browser
def test_html_report_renders_in_the_browser(sample, tmp_path, page, artifacts):
    out = tmp_path / "report.html"
    res = CliRunner().invoke(cli, ["report", str(sample), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page.goto(out.as_uri())
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4", timeout=120_000)
    headings = page.eval_on_selector_all("h2", "els => els.map(e => e.textContent)")
    assert "Recompiles" in headings and "Recommendations" in headings and "Drift and stragglers" in headings
    assert page.js_errors == []
    page.screenshot(path=str(artifacts / "report.png"), full_page=True)


def test_report_on_a_real_trace(data_dir, tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(data_dir / "traces" / "hta" / "trace_filter"), "-o", str(out),
                                   "--plotlyjs", "cdn"])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "Breakdown &amp; overlap" in text and "plotly" in text
