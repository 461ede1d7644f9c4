"""The web UI in a real browser (Debian's chromium via Playwright), on the bundled sample runs.

Every page opens without an error panel and is screenshotted under ``test-artifacts/``; the numbers the pages show
are compared with what the analyses return for the same run; Apply writes a valid compile config inside the run
directory; Compare shows the diff; a broken run gets an error panel while the rest of the app keeps working; the
timeline redraws exact kernels after a zoom on 1M synthetic kernels.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import polars as pl
import pytest

import workbench
from app_synthetic import synthetic_run
from browser_util import goto_ready, graph_layout_meta, grid_rows, pick, stat
from workbench import rundir
from workbench.app import page_compare, page_drift, page_overview, page_recompiles
from workbench.app.main import PAGES, create_app
from workbench.app.store import RunStore

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "cpu-gloo-4rank"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    """A copy of the sample runs (Apply writes into it) plus a second copy of cpu-gloo-4rank to compare against."""
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent (recorded by examples/cpu_gloo_4rank.py)")
    root = tmp_path_factory.mktemp("runs")
    ignore = shutil.ignore_patterns(rundir.CACHE_DIR, rundir.COMPILE_CONFIG_FILE)
    for d in sorted((REPO / "sample_traces").iterdir()):
        if d.is_dir():
            shutil.copytree(d, root / d.name, ignore=ignore)
    shutil.copytree(SAMPLE, root / "cpu-gloo-4rank-copy", ignore=ignore)
    return root


@pytest.fixture(scope="module")
def sample_app(runs_root):
    return create_app([runs_root])


@pytest.fixture()
def served(sample_app, served_factory):
    return served_factory(sample_app)


@pytest.fixture(scope="module")
def tables(runs_root):
    """What the analyses return for the sample run, computed here independently of the app."""
    from workbench.analyses.summary import analysis_tables

    run = workbench.open(runs_root / "cpu-gloo-4rank")
    return run, analysis_tables(run)


def _no_error_panels(page) -> None:
    errs = page.eval_on_selector_all(".panel-error", "els => els.map(e => e.innerText)")
    assert errs == [], errs
    assert page.js_errors == [], page.js_errors


@pytest.mark.parametrize("pg", PAGES, ids=[p.KEY for p in PAGES])
def test_every_page_opens_on_every_sample_run(page, served, sample_app, artifacts, pg):
    for rid in sample_app.workbench_store.ids():
        secs = goto_ready(page, served.url(f"{pg.PATH}?run={rid}"), pg.KEY)
        _no_error_panels(page)
        assert page.text_content(f"#page-{pg.KEY} h2") == pg.NAME
        page.screenshot(path=str(artifacts / f"app-{pg.KEY}-{rid}.png"), full_page=True)
        assert secs < 20, f"{pg.NAME} on {rid} took {secs:.1f}s"


def test_overview_numbers_equal_analyses(page, served, tables):
    run, t = tables
    goto_ready(page, served.url("/?run=cpu-gloo-4rank"), "overview")
    info = run.info()
    assert stat(page, "steps") == str(info["steps"])
    assert stat(page, "world_size") == str(info["world_size"])
    assert stat(page, "compiles") == f"{info['compiles']:,}"
    expected = page_overview.findings_table(t["findings"])
    shown = grid_rows(page, "findings-grid")
    assert len(shown) == expected.height
    for row, exp in zip(shown, expected.iter_rows(named=True)):
        assert row["kind"] == exp["kind"]
        assert row["cost_ms"] == exp["cost_ms"]
        assert row["ranks"] == exp["ranks"]
        assert row["severity"] == exp["severity"]


def test_drift_names_the_straggler(page, served, tables, artifacts):
    _, t = tables
    goto_ready(page, served.url("/drift?run=cpu-gloo-4rank"), "drift")
    expected = page_drift.straggler_table(t["stragglers"])
    shown = grid_rows(page, "stragglers-grid")
    assert [(r["rank"], r["signal"], r["held_back_ms"]) for r in shown] == [
        (str(e["rank"]), e["signal"], e["held_back_ms"]) for e in expected.iter_rows(named=True)]
    stragglers = t["findings"].filter(pl.col("kind").str.contains("straggler"))
    assert stragglers.height >= 1, "the sample run has a planted straggler"
    texts = page.eval_on_selector_all(".straggler-finding", "els => els.map(e => e.textContent)")
    assert texts == stragglers["message"].to_list()
    page.screenshot(path=str(artifacts / "app-drift-straggler.png"), full_page=True)


def test_recompiles_shows_the_divergent_recompile_and_links_to_its_step(page, served, tables, artifacts):
    from workbench.analyses.recompiles import classify_compiles, divergence_cost, divergent_compiles

    run, _ = tables
    c = classify_compiles(run.compiles)
    div = divergence_cost(divergent_compiles(c), c, run.steps, run.collectives)
    assert div.height >= 1, "the sample run has a planted divergent recompile"
    goto_ready(page, served.url("/recompiles?run=cpu-gloo-4rank"), "recompiles")
    expected = page_recompiles.divergent_table(div)
    shown = grid_rows(page, "divergent-grid")
    assert [(r["compile_id"], r["ranks"], r["step"], r["wait_ms"]) for r in shown] == [
        (e["compile_id"], e["ranks"], str(e["step"]), e["wait_ms"]) for e in expected.iter_rows(named=True)]
    page.screenshot(path=str(artifacts / "app-recompiles-divergent.png"), full_page=True)
    # the link goes to the timeline around that step
    page.click(".divergent-link >> nth=0")
    page.wait_for_function("() => document.getElementById('page-timeline') && "
                           "document.querySelector('#timeline-graph .main-svg')", timeout=20_000)
    assert f"step={div['step'][0]}" in page.url
    ticks = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout.yaxis.ticktext")
    assert any("compile" in t for t in ticks), ticks
    page.screenshot(path=str(artifacts / "app-timeline-divergent-step.png"), full_page=True)
    # a cell of the rank × compile-id matrix links to the timeline too
    goto_ready(page, served.url("/recompiles?run=cpu-gloo-4rank"), "recompiles")
    cid = div["compile_id"][0]
    page.evaluate("""(cid) => { const g = document.querySelector('#divergence-matrix .js-plotly-plot');
        g.emit('plotly_click', {points: [{x: cid + '*', y: '1', curveNumber: 0}]}); }""", cid)
    page.wait_for_function("() => location.pathname === '/timeline' && document.getElementById('page-timeline')",
                           timeout=15_000)
    assert f"step={div['step'][0]}" in page.url


def test_apply_writes_the_recommended_config(page, served, tables, runs_root, artifacts):
    from workbench.analyses.recommendations import recommend, to_compile_config
    from workbench.app.page_recommendations import config_header
    from workbench.commands.recommend import run_findings
    from workbench.compile_config import load_compile_config

    run, _ = tables
    target = runs_root / "cpu-gloo-4rank" / rundir.COMPILE_CONFIG_FILE
    target.unlink(missing_ok=True)
    recs = recommend(run_findings(run), run.compiles)
    expected_text = to_compile_config(recs, header=config_header(target))
    assert recs.filter(pl.col("apply")).height >= 1, "the sample run has a config fix to apply"
    goto_ready(page, served.url("/recommendations?run=cpu-gloo-4rank"), "recommendations")
    assert page.text_content("#toml-preview").strip() == expected_text.strip()
    page.click("#apply-config")
    page.wait_for_selector("#apply-ok", timeout=15_000)
    assert page.text_content("#applied-path") == str(target)
    assert target.read_text() == expected_text
    cfg = load_compile_config(target)
    assert cfg.to_dict(), "the written config has settings"
    # every applied fix is on the page, first the one the config carries
    titles = page.eval_on_selector_all(".rec-item", "els => els.map(e => e.textContent)")
    assert len(titles) == recs.height
    assert recs.sort("rank")["title"][0] in titles[0]
    assert "compile_config=" in page.text_content("#apply-ok")
    assert "WORKBENCH_COMPILE_CONFIG=" in page.text_content("#apply-ok")
    page.screenshot(path=str(artifacts / "app-recommendations-applied.png"), full_page=True)


def test_compare_shows_the_diff(page, served, runs_root, artifacts):
    from workbench.analyses.diff import RunData, diff_runs
    from workbench.analyses.summary import analysis_tables

    a, b = (workbench.open(runs_root / n) for n in ("cpu-gloo-4rank", "cpu-gloo-4rank-copy"))
    expected = page_compare.metrics_table(diff_runs(RunData.from_run(a, analysis_tables(a)),
                                                    RunData.from_run(b, analysis_tables(b))))
    goto_ready(page, served.url("/compare?run=cpu-gloo-4rank&other=cpu-gloo-4rank-copy"), "compare")
    _no_error_panels(page)
    shown = {r["metric"]: (r["before"], r["after"], r["direction"]) for r in grid_rows(page, "diff-grid")}
    assert shown, "the diff grid is empty"
    exp = {e["metric"]: (e["before"], e["after"], e["direction"]) for e in expected.iter_rows(named=True)}
    for key, val in shown.items():
        assert exp[key] == val, key
    # choosing another "after" run in the page redraws the diff
    pick(page, "compare-after", "cpu-gloo-4rank")
    page.wait_for_function("() => document.querySelector('#diff-headline')", timeout=15_000)
    page.screenshot(path=str(artifacts / "app-compare.png"), full_page=True)


def test_picking_a_run_in_the_header_switches_pages(page, served):
    goto_ready(page, served.url("/drift?run=cpu-gloo-4rank"), "drift")
    pick(page, "run-select", "cpu-gloo-4rank-copy")
    page.wait_for_function("() => location.search.includes('run=cpu-gloo-4rank-copy')", timeout=10_000)
    page.wait_for_function("(k) => document.getElementById('page-' + k)", arg="drift", timeout=10_000)
    href = page.get_attribute("#nav-timeline", "href")
    assert "run=cpu-gloo-4rank-copy" in href


def test_broken_run_shows_an_error_panel_and_the_rest_works(page, served_factory, runs_root, tmp_path, artifacts):
    broken = tmp_path / "broken-run"
    (broken / "rank0" / "trace").mkdir(parents=True)
    (broken / "rank0" / "trace" / "t.json.gz").write_bytes(b"\x1f\x8b\x08 truncated")
    (broken / "rank1" / "trace").mkdir(parents=True)
    (broken / "rank1" / "trace" / "t.json").write_text('{"traceEvents": [')
    app = create_app([runs_root / "cpu-gloo-4rank", broken])
    served = served_factory(app)
    goto_ready(page, served.url("/?run=broken-run"), "overview")
    problems = page.query_selector("#run-error") or page.query_selector("#run-problems")
    assert problems is not None
    assert "t.json" in problems.text_content()
    page.screenshot(path=str(artifacts / "app-broken-run.png"), full_page=True)
    goto_ready(page, served.url("/timeline?run=broken-run"), "timeline")
    goto_ready(page, served.url("/?run=cpu-gloo-4rank"), "overview")
    _no_error_panels(page)
    # unknown ids are refused, never resolved as paths
    goto_ready(page, served.url("/?run=..%2F..%2Fetc"), "overview")
    assert "no run" in page.text_content("#run-error")


def test_timeline_zoom_redraws_exact_kernels_on_1m_events(page, served_factory, artifacts):
    run = synthetic_run(1_000_000)
    app = create_app(store=RunStore.preloaded({"synthetic-1M": run}))
    served = served_factory(app)
    goto_ready(page, served.url("/timeline?run=synthetic-1M"), "timeline", timeout_ms=60_000)
    meta = graph_layout_meta(page, "timeline-graph")
    assert meta["exact"] is False and meta["visible_kernels"] == 1_000_000
    page.screenshot(path=str(artifacts / "app-timeline-1M.png"), full_page=True)
    x0 = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout.xaxis.range[0]")
    t = time.perf_counter()
    page.evaluate("(x0) => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'), "
                  "{'xaxis.range[0]': x0, 'xaxis.range[1]': x0 + 0.5})", x0)
    page.wait_for_function("() => { const m = document.querySelector('#timeline-graph .js-plotly-plot').layout.meta;"
                           " return m && m.exact === true; }", timeout=20_000)
    secs = time.perf_counter() - t
    meta = graph_layout_meta(page, "timeline-graph")
    lo = int(run.kernels["start"].min())
    expect = run.kernels.filter((pl.col("end") >= lo + int(x0 * 1e6))
                                & (pl.col("start") <= lo + int((x0 + 0.5) * 1e6))).height
    assert abs(meta["visible_kernels"] - expect) <= 16  # ms ↔ ns rounding at the two window edges
    assert "shown exactly" in page.text_content("#timeline-info")
    page.screenshot(path=str(artifacts / "app-timeline-1M-zoomed.png"), full_page=True)
    assert secs < 5, f"zoom round trip {secs:.2f}s"


def test_cli_defaults_to_localhost():
    from typer.testing import CliRunner

    from workbench.cli import app

    out = CliRunner().invoke(app, ["app", "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "127.0.0.1" in out.output and "8050" in out.output


def test_shared_hta_trace_breakdown_equals_analysis(page, served_factory, shared_dir, artifacts):
    from workbench.analyses.summary import analysis_tables
    from workbench.app.page_breakdown import rank_table

    path = shared_dir / "traces" / "hta" / "trace_filter"
    app = create_app([path])
    served = served_factory(app)
    goto_ready(page, served.url("/breakdown?run=trace_filter"), "breakdown")
    _no_error_panels(page)
    expected = rank_table(analysis_tables(workbench.open(path))["breakdown_by_rank"])
    shown = grid_rows(page, "breakdown-grid")
    assert [(r["rank"], r["compute_pct"], r["idle_pct"], r["comm_overlap_pct"]) for r in shown] == [
        (str(e["rank"]), e["compute_pct"], e["idle_pct"], e["comm_overlap_pct"]) for e in expected.iter_rows(named=True)]
    page.screenshot(path=str(artifacts / "app-breakdown-hta.png"), full_page=True)


def test_new_user_journey(page, served, runs_root, tables, artifacts):
    """The issue's "done when": see the sample runs, find the straggler and the divergent recompile, apply the fix,
    compare two runs — by clicking through the app like a user."""
    run, t = tables
    target = runs_root / "cpu-gloo-4rank" / rundir.COMPILE_CONFIG_FILE
    target.unlink(missing_ok=True)
    goto_ready(page, served.url("/"), "overview")
    links = page.eval_on_selector_all(".run-link", "els => els.map(e => e.textContent)")
    assert "cpu-gloo-4rank" in links and "cpu-gloo-4rank-copy" in links
    page.click("#run-link-cpu-gloo-4rank")
    page.wait_for_function("() => location.search.includes('run=cpu-gloo-4rank')")
    # the straggler
    page.click("#nav-drift")
    page.wait_for_selector(".straggler-finding", timeout=20_000)
    straggler = t["findings"].filter(pl.col("kind").str.contains("straggler")).row(0, named=True)
    assert f"Rank {straggler['ranks'][0]}" in page.text_content(".straggler-finding")
    # the divergent recompile, and its step on the timeline
    page.click("#nav-recompiles")
    page.wait_for_selector(".divergent-item", timeout=20_000)
    assert "only" in page.text_content(".divergent-item")
    page.click(".divergent-link >> nth=0")
    page.wait_for_function("() => document.querySelector('#page-timeline #timeline-graph .main-svg')", timeout=20_000)
    # apply the fix
    page.click("#nav-recommendations")
    page.wait_for_selector("#apply-config", timeout=20_000)
    page.click("#apply-config")
    page.wait_for_selector("#apply-ok", timeout=20_000)
    assert target.is_file()
    page.screenshot(path=str(artifacts / "app-journey-applied.png"), full_page=True)
    # compare with another run
    page.click("#nav-compare")
    page.wait_for_selector("#compare-after", timeout=20_000)
    pick(page, "compare-after", "cpu-gloo-4rank-copy")
    page.wait_for_selector("#diff-grid .ag-row", timeout=20_000)
    assert page.js_errors == []
    page.screenshot(path=str(artifacts / "app-journey-compare.png"), full_page=True)


def test_no_path_serves_the_bundled_sample_runs():
    from workbench.app.main import default_roots

    app = create_app()
    assert default_roots() == [REPO / "sample_traces"]
    if SAMPLE.is_dir():
        assert "cpu-gloo-4rank" in app.workbench_store.ids()
