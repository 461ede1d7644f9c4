"""Issue 36 (left items 3 and 4): severity has one definition, the cost's share of the wall time of the steps it was
measured over (``rootcause.measured_wall_ns``: the analysed profiler-window steps for a kind measured there, the
analysed run for one measured over every step), and a symptom is shown within its root cause's cost
(``findings.within_root``) in what ``workbench analyze`` prints, on the bundled GPU recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from workbench.analyses import findings as F
from workbench.analyses import metrics
from workbench.analyses.kinds import Kind
from workbench.analyses.rootcause import measured_wall_ns, window_wall_ns
from workbench.analyses.summary import analysis_tables, analyze

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"cpu_dataload": ROOT / "tests" / "data" / "gpu_idle" / "cpu_dataload",
        "item_sync": ROOT / "tests" / "data" / "gpu_idle" / "item_sync",
        "eager_frame": ROOT / "sample_traces" / "gpu-eager-frame",
        "launch_bound": ROOT / "sample_traces" / "gpu-launch-bound-before"}


def _open(name: str) -> workbench.Run:
    if not RUNS[name].is_dir():
        pytest.skip(f"{RUNS[name]} is missing")
    return workbench.open(RUNS[name])


@pytest.fixture(scope="module")
def analysed() -> dict[str, tuple]:
    out = {}
    for name in RUNS:
        run = _open(name)
        out[name] = (run, list(analysis_tables(run).roots))
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_every_severity_is_the_share_of_the_steps_it_was_measured_over(analysed, name):
    run, roots = analysed[name]
    wall, window = metrics.wall_ns(run.steps), window_wall_ns(run.steps)
    assert window and all(window[r] < wall[r] for r in window)
    for f, root in (x for r in roots for x in r.walk()):
        own = F.rescore(f, measured_wall_ns(f, wall, window))
        assert f.severity == (F.no_more_severe(own, root) if root is not None else own).severity, (f.kind, f.severity)
        measured_in_window = F.kind_spec(f.kind).cost_scope == "window"
        assert measured_wall_ns(f, wall, window) == max((window if measured_in_window else wall)[r] for r in f.ranks)


def test_a_planted_data_loading_cost_rates_by_the_steps_it_cost(analysed):
    """~17 ms a planted step of a ~40 ms step: high, not 'low' for being spread over the whole run (its compiles)."""
    run, roots = analysed["cpu_dataload"]
    f = next(f for f in roots if f.kind == Kind.DATA_LOADING)
    share = f.cost_ns / measured_wall_ns(f, metrics.wall_ns(run.steps), window_wall_ns(run.steps))
    assert share >= F.HIGH_SHARE_PCT / 100 and f.severity == "high"


def test_a_93_pct_idle_launch_bound_gpu_is_not_low(analysed):
    _, roots = analysed["launch_bound"]
    f = next(f for f in roots if f.kind == Kind.LAUNCH_BOUND)
    assert f.severity == "high", (f.cost_ns, f.steps)


@pytest.mark.parametrize("name", list(RUNS))
def test_symptoms_are_shown_within_their_root_cause(analysed, name):
    run, roots = analysed[name]
    for r in roots:
        for s in r.symptoms:
            assert s.cost.ns is None or r.cost.ns is None or s.cost.ns <= r.cost.ns, (r.kind, s.kind)
    for x in analyze(run)["findings"]:             # what `workbench analyze` prints (and --json)
        for s in x.get("symptoms", []):
            assert s["cost"]["ns"] is None or s["cost"]["ns"] <= x["cost"]["ns"], (x["kind"], s["kind"])


def test_the_eager_frame_launch_symptom_keeps_its_own_measurement_in_words(analysed):
    _, roots = analysed["eager_frame"]
    root = next(f for f in roots if f.kind == Kind.SKIPPED_FRAME)
    lb = next(s for s in root.symptoms if s.kind == Kind.LAUNCH_BOUND)
    assert lb.cost_ns == root.cost_ns and "measured alone over its own window" in lb.cost.method


def test_within_root_is_the_one_cap():
    assert F.symptom_cost_ns(70, 20) == 20 and F.symptom_cost_ns(5, 20) == 5 and F.symptom_cost_ns(None, 3) is None
