"""The web UI in a real browser (Debian's chromium via Playwright), on the bundled sample runs.

What a user sees is asserted: every page of every bundled run opens without an error panel, with no element
spilling out of its card and no truncated header, and is screenshotted under ``test-artifacts/``; the overview
leads with the root cause (not its symptoms) and the run list names each run's top root cause; numbers carry units;
the timeline keeps its lanes across zooms, clips a collective that started before the window, numbers its steps and
says which rank waits for whose compile; the pipeline and drift pages draw their figures; the recompiles page shows
the user's line; recommendations are numbered 1..n, best fix first; Apply never overwrites a config, shows the exact
next command and never recreates a deleted run folder; a broken run gets an error panel; the timeline redraws
exact kernels after a zoom on 1M synthetic kernels.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polars as pl
import pytest

import workbench
from app_synthetic import synthetic_run
from browser_util import draw_lazy, shot, OVERFLOW_JS, goto_ready, graph_layout_meta, grid_rows, navigate_ready, pick, stat
from workbench import rundir
from workbench.app import page_drift, page_recompiles
from workbench.analyses.summary import findings_table
from workbench.app.main import PAGES, create_app
from workbench.app.store import RunStore
from workbench.format import duration as fmt_time
from workbench.format import kind_title

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
SAMPLE = SAMPLES / "cpu-gloo-4rank"
PLANTED = "h200x2-planted"
PIPELINE = "h200x2-pipeline"


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    """A copy of the sample runs (Apply writes into it)."""
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent (recorded by examples/cpu_gloo_4rank.py)")
    root = tmp_path_factory.mktemp("runs")
    ignore = shutil.ignore_patterns(rundir.CACHE_DIR, "compile_config*.toml")
    for d in sorted(SAMPLES.iterdir()):
        if d.is_dir():
            shutil.copytree(d, root / d.name, ignore=ignore)
    return root


@pytest.fixture(scope="module")
def sample_app(runs_root):
    return create_app([runs_root])


@pytest.fixture()
def served(sample_app, served_factory):
    return served_factory(sample_app)


def _tables(path: Path):
    from workbench.analyses.summary import analysis_tables

    run = workbench.open(path)
    return run, analysis_tables(run)


@pytest.fixture(scope="module")
def cpu_tables(runs_root):
    """What the analyses return for the 4-rank CPU sample run, computed here independently of the app."""
    return _tables(runs_root / "cpu-gloo-4rank")


def _no_error_panels(page) -> None:
    errs = page.eval_on_selector_all(".panel-error", "els => els.map(e => e.innerText)")
    assert errs == [], errs
    assert page.js_errors == [], page.js_errors


def _no_overflow(page, where: str) -> None:
    bad = page.evaluate(OVERFLOW_JS)
    assert bad == [], f"{where}: elements outside their card or cut: {bad[:8]}"


def test_every_page_on_every_sample_run(page, served, sample_app, artifacts):
    """One load of every page of every run: the first by URL, the rest as the header links go (no reload)."""
    problems: list[str] = []
    goto_ready(page, served.url("/hangs"), "hangs", timeout_ms=90_000)
    for rid in sample_app.workbench_store.ids():
        for pg in PAGES:
            navigate_ready(page, f"{pg.PATH}?run={rid}", pg.KEY, rid, timeout_ms=90_000)
            errs = page.eval_on_selector_all(".panel-error", "els => els.map(e => e.innerText)")
            problems += [f"{pg.NAME} on {rid}: error panel {e[:200]!r}" for e in errs]
            if page.text_content(f"#page-{pg.KEY} h2") != pg.NAME:
                problems.append(f"{pg.NAME} on {rid}: heading {page.text_content(f'#page-{pg.KEY} h2')!r}")
            draw_lazy(page)
            problems += [f"{pg.NAME} on {rid}: {b}" for b in page.evaluate(OVERFLOW_JS)[:4]]
            shot(page, path=str(artifacts / f"app-{pg.KEY}-{rid}.png"), full_page=True)
    assert page.js_errors == [], page.js_errors
    assert problems == [], "\n".join(problems[:20])


def test_overview_leads_with_the_root_cause(page, served, runs_root, sample_app):
    run, t = _tables(runs_root / PLANTED)
    f = t.findings
    roots = f.filter(pl.col("is_root"))
    assert roots["kind"][0] == "divergent_recompile", "the planted run's root cause is the divergent recompile"
    goto_ready(page, served.url(f"/?run={PLANTED}"), "overview")
    first = page.text_content("#root-1 .root-kind")
    assert first == kind_title("divergent_recompile")
    kinds = page.eval_on_selector_all(".root-cause .root-kind", "els => els.map(e => e.textContent)")
    costly = [r["kind"] for r in roots.iter_rows(named=True) if r["cost_ns"] or r["severity"] != "info"]
    assert kinds == [kind_title(k) for k in costly], "numbered: the root causes that cost time (notes apart)"
    symptoms = page.text_content("#root-1 .symptoms")
    assert "Host bound" in symptoms, "the recompile's step-8 host_bound is folded under it"
    for k in f.filter(pl.col("cause_id") == roots["id"][0])["kind"].to_list():
        assert kind_title(k) in symptoms
    cost = page.text_content("#root-1 .root-cost")
    assert re.match(r"^\d[\d,.]* (s|ms|µs) (measured|estimated)", cost), cost
    # every grid row, as the cards tell it (root causes numbered, symptoms within them, notes last)
    expected = findings_table(f)
    shown = grid_rows(page, "findings-grid")
    assert [(r["n"], r["kind"], r["role"], r["cost_ns"]) for r in shown] == [
        (e["n"], e["kind"], e["role"], "no time cost" if e["cost_ns"] == 0 else fmt_time(e["cost_ns"]))
        for e in expected.iter_rows(named=True)]
    assert all(re.fullmatch(r"\d+(\.\d{1,2})? (s|ms|µs|ns)|no time cost", r["cost_ns"]) for r in shown), shown


def test_run_list_names_each_runs_top_root_cause(page, served, sample_app, runs_root):
    store = sample_app.workbench_store
    goto_ready(page, served.url("/"), "overview")
    from workbench.app.compute import most_costly

    assert page.text_content(".run-title code") in (store.default_id(), most_costly(store))
    assert store.default_id().startswith("h200"), "lands on a GPU run"
    page.wait_for_function("() => !document.querySelector('#runs-progress')", timeout=300_000, polling=500)
    rows = page.eval_on_selector_all(".run-row", "els => els.map(e => [e.id, e.querySelector('.run-cause')"
                                                  ".textContent, e.querySelector('.run-cost').textContent])")
    assert len(rows) == len(store.entries)
    _, t = _tables(runs_root / PLANTED)
    top = t.findings.filter(pl.col("is_root")).row(0, named=True)
    planted = next(r for r in rows if r[0] == f"run-row-{PLANTED}")
    assert planted[1] == kind_title(top["kind"])
    assert re.match(r"^\d[\d,.]* (s|ms|µs) (measured|estimated)", planted[2]), planted


def test_numbers_carry_units(page, served):
    goto_ready(page, served.url(f"/?run={PLANTED}"), "overview")
    assert re.fullmatch(r"\d[\d,.]* (s|ms)", stat(page, "span"))
    goto_ready(page, served.url(f"/breakdown?run={PLANTED}"), "breakdown")
    for row in grid_rows(page, "breakdown-grid"):
        assert re.fullmatch(r"\d+(\.\d{1,2})? (s|ms)", row["window_ns"]) and row["compute_pct"].endswith(" %"), row
    layout = page.evaluate("() => document.querySelector('#breakdown-rank-figure .js-plotly-plot').layout")
    assert layout["yaxis"]["ticksuffix"] == " ms"
    colors = page.evaluate("() => document.querySelector('#breakdown-rank-figure .js-plotly-plot').data"
                           ".map(t => [t.name, t.marker.color])")
    by_name = dict(colors)
    assert by_name["exposed communication"] != by_name["exposed memory copies/sets"]
    draw_lazy(page)
    ov = page.evaluate("() => { const g = document.querySelector('#overlap-step-figure .js-plotly-plot');"
                       " return g ? g.layout.yaxis : null; }")
    if ov is not None:
        assert ov["range"] == [0, 100] and ov["ticksuffix"] == " %"


def test_drift_plots_period_offsets_and_log_waits(page, served, runs_root, artifacts):
    _, t = _tables(runs_root / PLANTED)
    goto_ready(page, served.url(f"/drift?run={PLANTED}"), "drift")
    draw_lazy(page)
    ylog = page.evaluate("() => document.querySelector('#step-time-figure .js-plotly-plot').layout.yaxis")
    assert ylog["type"] == "log" and all(re.fullmatch(r"[\d.]+ (ms|s)", x) for x in ylog["ticktext"]), ylog
    cb = page.evaluate("() => document.querySelector('#skew-heatmap .js-plotly-plot').data[0].colorbar")
    assert "log" in cb["title"]["text"] and all(re.fullmatch(r"[\d.]+ (ms|s)", x) for x in cb["ticktext"])
    assert "Positive: it arrives later" in page.text_content("#offset-sign")
    assert page.query_selector("#arrival-offset-figure .main-svg") is not None
    expected = page_drift.straggler_table(t.stragglers)
    shown = grid_rows(page, "stragglers-grid")
    assert [(r["rank"], r["signal"]) for r in shown] == [(str(e["rank"]), e["signal"])
                                                         for e in expected.iter_rows(named=True)]
    assert all(re.fullmatch(r"\d+(\.\d{1,2})? (s|ms|µs|ns)", r["held_back_ns"]) for r in shown), shown
    # two ranks: offsets, drift and trend are measured against each collective's median arrival, so they mirror
    d = {r["rank"]: r for r in grid_rows(page, "drift-grid")}
    for c in ("mean_offset_ns", "drift_ns", "slope_ns_per_s"):
        a, b = d["0"][c], d["1"][c]
        assert a.lstrip("-") == b.lstrip("-") and a.startswith("-") != b.startswith("-"), (c, a, b)
    assert "falling further behind" in page.text_content("#offset-sign")
    shot(page, path=str(artifacts / "app-drift-planted.png"), full_page=True)


def test_timeline_tells_who_waits_for_whom(page, served, artifacts):
    goto_ready(page, served.url("/timeline?run=cpu-gloo-4rank"), "timeline")
    layout = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout")
    notes = [a["text"] for a in layout.get("annotations", [])]
    assert any(re.match(r"rank \d waits here .* for rank 1's compile \(step \d+\)", n) for n in notes), notes
    assert layout["xaxis"]["range"][0] == pytest.approx(0, abs=1.0), "the axis starts where activity starts"
    texts = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').data"
                          ".filter(t => t.mode === 'text').flatMap(t => t.text)")
    assert any(x.isdigit() for x in texts), "step numbers on the step lanes"
    assert layout["legend"]["x"] == 0 and layout["legend"]["xanchor"] == "left", "legend clear of the toolbar"
    lanes = layout["meta"]["lanes"]
    # zoom into the middle of the long compile wait: the lanes stay, the collective that began before is clipped in
    x0, x1 = layout["xaxis"]["range"]
    mid = (x0 + x1) / 2
    before = page.text_content("#timeline-info")
    page.evaluate("(r) => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'), "
                  "{'xaxis.range[0]': r[0], 'xaxis.range[1]': r[1]})", [mid, mid + 20])
    page.wait_for_function("(b) => document.getElementById('timeline-info').textContent !== b", arg=before,
                           timeout=120_000)
    after = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout.meta.lanes")
    assert after == lanes
    drawn = page.evaluate("""() => document.querySelector('#timeline-graph .js-plotly-plot')._fullData
        .filter(t => t.name === 'collectives').flatMap(t => Array.from(t.x)).filter(x => x !== null && !isNaN(x))""")
    assert drawn and min(drawn) == pytest.approx(mid, abs=1e-3), "a collective begun before the window is clipped"
    shot(page, path=str(artifacts / "app-timeline-zoomed-wait.png"), full_page=True)


def test_pipeline_page_draws_bubbles_and_the_schedule(page, served, artifacts):
    goto_ready(page, served.url(f"/pipeline?run={PIPELINE}"), "pipeline")
    _no_error_panels(page)
    bars = page.evaluate("() => document.querySelector('#bubble-figure .js-plotly-plot').data[0].x")
    assert len(bars) == 2
    labels = page.evaluate("() => document.querySelector('#schedule-figure .js-plotly-plot').data"
                           ".filter(t => t.text).flatMap(t => Array.from(t.text))")
    assert any(x.startswith("F") for x in labels) and any(x.startswith("B") for x in labels), labels
    stages = grid_rows(page, "stages-grid")
    assert all(r["bubble_pct"].endswith(" %") for r in stages)
    # each stage's first forward comes after its step starts (device ranges counted in the step they run in)
    assert all(re.fullmatch(r"\d+(\.\d)? (ms|µs)", r["first_forward_delay_ns"]) for r in stages), stages
    assert "(s)" not in page.text_content("#page-pipeline")
    shot(page, path=str(artifacts / "app-pipeline-schedule.png"), full_page=True)
    goto_ready(page, served.url(f"/timeline?run={PIPELINE}"), "timeline")
    lanes = graph_layout_meta(page, "timeline-graph")["lanes"]
    assert "rank 0 · micro-batches" in lanes
    goto_ready(page, served.url("/pipeline?run=cpu-gloo-4rank"), "pipeline")
    assert "Not a pipeline run" in page.text_content("#no-pipeline")


def test_recompiles_shows_the_users_line(page, served, cpu_tables, artifacts):
    run, tables = cpu_tables
    div = tables.divergent
    assert div.height >= 1, "the sample run has a planted divergent recompile"
    goto_ready(page, served.url("/recompiles?run=cpu-gloo-4rank"), "recompiles")
    item = page.text_content(".divergent-item")
    assert "cpu_gloo_4rank.py:" in item and "external_utils.py" not in item, item
    assert "rank(s)" not in item and "ranks 0 waited" not in item
    assert re.search(r"on rank 1 only at step \d+ .*; ranks 0, 2 and 3 wait ", item), item
    shown = grid_rows(page, "divergent-grid")
    expected = page_recompiles.divergent_table(div)
    assert [(r["compile_id"], r["step"]) for r in shown] == [(e["compile_id"], str(e["step"]))
                                                             for e in expected.iter_rows(named=True)]
    assert "cpu_gloo_4rank.py" in shown[0]["user_line"]
    page.click(".divergent-link >> nth=0")
    page.wait_for_function("() => document.getElementById('page-timeline') && "
                           "document.querySelector('#timeline-graph .main-svg')", timeout=120_000)
    assert f"step={div['step'][0]}" in page.url
    # a cell of the rank × compile-id matrix links to the timeline too
    goto_ready(page, served.url("/recompiles?run=cpu-gloo-4rank"), "recompiles")
    cid = div["compile_id"][0]
    page.evaluate("""(cid) => { const g = document.querySelector('#divergence-matrix .js-plotly-plot');
        g.emit('plotly_click', {points: [{x: cid + '*', y: '1', curveNumber: 0}]}); }""", cid)
    page.wait_for_function("() => location.pathname === '/timeline' && document.getElementById('page-timeline')",
                           timeout=120_000)
    assert f"step={div['step'][0]}" in page.url


def test_recommendations_best_fix_first(page, served, runs_root):
    from workbench.analyses.recommendations import recommend

    run, t = _tables(runs_root / PLANTED)
    recs = recommend(run.findings())  # the typed root causes, as the page renders them
    goto_ready(page, served.url(f"/recommendations?run={PLANTED}"), "recommendations")
    titles = page.eval_on_selector_all("#recs-section > .rec-item > div > .rec-title",
                                       "els => els.map(e => e.textContent)")
    numbers = [int(x.split(".", 1)[0]) for x in titles]
    assert numbers == list(range(1, len(numbers) + 1)), titles
    body = page.text_content("#recs-section")
    assert "see the finding" not in body and not titles[0].split(". ", 1)[1].startswith("Investigate")
    top_root = t.findings.filter(pl.col("is_root"))["kind"][0]
    assert recs.sort("rank")["finding_kind"][0] == top_root
    assert titles[0].split(". ", 1)[1] == recs.sort("rank")["title"][0]


def test_apply_never_overwrites_and_shows_the_next_command(page, served, runs_root, cpu_tables, artifacts):
    from workbench.compile_config import load_compile_config

    run_dir = runs_root / "cpu-gloo-4rank"
    for p in run_dir.glob("compile_config*.toml"):
        p.unlink()
    goto_ready(page, served.url("/recommendations?run=cpu-gloo-4rank"), "recommendations")
    page.click("#apply-config")
    page.wait_for_selector("#apply-ok", timeout=120_000)
    first = run_dir / rundir.COMPILE_CONFIG_FILE
    assert page.text_content("#applied-path") == str(first)
    assert load_compile_config(first).to_dict(), "the written config has settings"
    cmd = page.text_content("#next-command")
    assert cmd.startswith(f"WORKBENCH_COMPILE_CONFIG={first} torchrun --nproc-per-node=4 "), cmd
    assert "workbench diff" in page.text_content("#diff-command")
    text1 = first.read_text()
    page.click("#apply-config")
    page.wait_for_function("() => document.querySelector('#applied-path') && "
                           "document.querySelector('#applied-path').textContent.endsWith('compile_config-2.toml')",
                           timeout=120_000)
    assert first.read_text() == text1, "the first config is kept"
    assert (run_dir / "compile_config-2.toml").is_file()
    shot(page, path=str(artifacts / "app-recommendations-applied.png"), full_page=True)


def test_apply_after_the_run_folder_was_deleted(page, served_factory, runs_root, tmp_path):
    gone = tmp_path / "gone-run"
    shutil.copytree(runs_root / "cpu-gloo-4rank", gone, ignore=shutil.ignore_patterns("compile_config*.toml"))
    app = create_app([gone], background=False)
    served = served_factory(app)
    goto_ready(page, served.url("/recommendations?run=gone-run"), "recommendations")
    shutil.rmtree(gone)
    page.click("#apply-config")
    page.wait_for_selector("#apply-error", timeout=120_000)
    assert "no longer exists" in page.text_content("#apply-error")
    assert not gone.exists(), "Apply must not recreate a deleted run folder"
    assert page.query_selector("#apply-ok") is None


def test_picking_a_run_in_the_header_switches_pages(page, served):
    goto_ready(page, served.url("/drift?run=cpu-gloo-4rank"), "drift")
    pick(page, "run-select", "cpu-gloo-fsdp2")
    page.wait_for_function("() => location.search.includes('run=cpu-gloo-fsdp2')", timeout=120_000)
    page.wait_for_function("(k) => document.getElementById('page-' + k)", arg="drift", timeout=120_000)
    assert "run=cpu-gloo-fsdp2" in page.get_attribute("#nav-timeline", "href")


def test_broken_run_shows_an_error_panel_and_the_rest_works(page, served_factory, runs_root, tmp_path, artifacts):
    broken = tmp_path / "broken-run"
    (broken / "rank0" / "trace").mkdir(parents=True)
    (broken / "rank0" / "trace" / "t.json.gz").write_bytes(b"\x1f\x8b\x08 truncated")
    (broken / "rank1" / "trace").mkdir(parents=True)
    (broken / "rank1" / "trace" / "t.json").write_text('{"traceEvents": [')
    app = create_app([runs_root / "cpu-gloo-4rank", broken], background=False)
    served = served_factory(app)
    goto_ready(page, served.url("/?run=broken-run"), "overview")
    problems = page.query_selector("#run-error") or page.query_selector("#run-problems")
    assert problems is not None
    assert "t.json" in problems.text_content()
    shot(page, path=str(artifacts / "app-broken-run.png"), full_page=True)
    goto_ready(page, served.url("/timeline?run=broken-run"), "timeline")
    goto_ready(page, served.url("/?run=cpu-gloo-4rank"), "overview")
    _no_error_panels(page)
    # unknown ids are refused, never resolved as paths
    goto_ready(page, served.url("/?run=..%2F..%2Fetc"), "overview")
    assert "no run" in page.text_content("#run-error")


def test_timeline_zoom_redraws_exact_kernels_on_1m_events(page, served_factory, artifacts):
    run = synthetic_run(1_000_000)
    app = create_app(store=RunStore.preloaded({"synthetic-1M": run}), background=False)
    served = served_factory(app)
    goto_ready(page, served.url("/timeline?run=synthetic-1M"), "timeline", timeout_ms=90_000)
    meta = graph_layout_meta(page, "timeline-graph")
    assert meta["exact"] is False and meta["visible_kernels"] == 1_000_000
    shot(page, path=str(artifacts / "app-timeline-1M.png"), full_page=True)
    x0 = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout.xaxis.range[0]")
    page.evaluate("(x0) => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'), "
                  "{'xaxis.range[0]': x0, 'xaxis.range[1]': x0 + 0.5})", x0)
    page.wait_for_function("() => { const m = document.querySelector('#timeline-graph .js-plotly-plot').layout.meta;"
                           " return m && m.exact === true; }", timeout=120_000)
    meta = graph_layout_meta(page, "timeline-graph")
    assert meta["lanes"] == [f"rank {r} · {w}" for r in range(8) for w in ("steps", "stream 7", "stream 8")]
    lo = int(run.kernels["start"].min())
    expect = run.kernels.filter((pl.col("end") >= lo + int(x0 * 1e6))
                                & (pl.col("start") <= lo + int((x0 + 0.5) * 1e6))).height
    assert abs(meta["visible_kernels"] - expect) <= 16  # ms ↔ ns rounding at the two window edges
    assert "shown exactly" in page.text_content("#timeline-info")
    shot(page, path=str(artifacts / "app-timeline-1M-zoomed.png"), full_page=True)


def test_cli_defaults_to_localhost():
    from typer.testing import CliRunner

    from workbench.cli import app

    out = CliRunner().invoke(app, ["app", "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "127.0.0.1" in out.output and "8050" in out.output


def test_hta_trace_breakdown_equals_analysis(page, served_factory, data_dir, artifacts):
    from workbench.analyses.summary import analysis_tables
    from workbench.app.page_breakdown import rank_table

    path = data_dir / "traces" / "hta" / "trace_filter"
    app = create_app([path], background=False)
    served = served_factory(app)
    goto_ready(page, served.url("/breakdown?run=trace_filter"), "breakdown")
    _no_error_panels(page)
    expected = rank_table(analysis_tables(workbench.open(path)).breakdown_by_rank)
    shown = grid_rows(page, "breakdown-grid")
    assert [(r["rank"], r["compute_pct"], r["idle_pct"]) for r in shown] == [
        (str(e["rank"]), f"{e['compute_pct']:,.1f} %", f"{e['idle_pct']:,.1f} %") for e in expected.iter_rows(named=True)]
    shot(page, path=str(artifacts / "app-breakdown-hta.png"), full_page=True)


def test_new_user_journey(page, served, runs_root, artifacts):
    """Land on the run list, open the planted run, read the root cause, jump to its step on the timeline, read
    why, apply the fix — by clicking like a user."""
    for p in (runs_root / PLANTED).glob("compile_config*.toml"):
        p.unlink()
    goto_ready(page, served.url("/"), "overview")
    page.click(f"#run-link-{PLANTED}")
    page.wait_for_function(f"() => {{ const t = document.querySelector('.run-title code');"
                           f" return t && t.textContent === '{PLANTED}' && document.querySelector('#root-1'); }}",
                           timeout=120_000)
    assert "Divergent recompile" in page.text_content("#root-1")
    page.click("#root-1 .root-timeline-link")
    page.wait_for_function("() => document.querySelector('#page-timeline #timeline-graph .main-svg')", timeout=120_000)
    assert "step=8" in page.url
    notes = page.evaluate("() => (document.querySelector('#timeline-graph .js-plotly-plot').layout.annotations || [])"
                          ".map(a => a.text)")
    assert any("waits here" in n and "rank 1's compile" in n for n in notes), notes
    page.click("#nav-recompiles")
    page.wait_for_selector(".divergent-item", timeout=120_000)
    page.click("#nav-recommendations")
    page.wait_for_selector("#apply-config", timeout=120_000)
    page.click("#apply-config")
    page.wait_for_selector("#apply-ok", timeout=120_000)
    assert (runs_root / PLANTED / rundir.COMPILE_CONFIG_FILE).is_file()
    page.click("#nav-compare")
    page.wait_for_selector("#page-compare", timeout=120_000)
    assert page.js_errors == []
    shot(page, path=str(artifacts / "app-journey.png"), full_page=True)


def test_no_path_serves_the_bundled_sample_runs():
    from workbench.app.main import default_roots

    app = create_app(background=False)
    assert default_roots() == [REPO / "sample_traces"]
    if SAMPLE.is_dir():
        assert "cpu-gloo-4rank" in app.workbench_store.ids()
