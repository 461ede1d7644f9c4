"""Issue 13: ``workbench diff`` proves a fix worked, says when it did nothing, when it cannot tell, and when the runs
are not comparable.

Pairs (all real recordings):
- fixed: ``sample_traces/cpu-recompile-before`` → ``-after`` (2-rank gloo, rank 1 alone recompiles at step 6; the
  rerun applies the config ``workbench recommend`` wrote);
- did nothing: the bundled BEFORE vs the same job rerun here with a config that does not remove the recompile (a
  higher recompile limit);
- noisy short: that rerun vs a 4-step run of the job as it was, both recorded here;
- different jobs: ``cpu-gloo-4rank`` vs ``h200x2-ddp-nccl``; foreign traces: an A100 trace vs the H200 pair;
- no device data after: ``h200x2-planted`` (GPU) → ``cpu-gloo-4rank`` (same script on CPU).
"""

from __future__ import annotations

import dataclasses

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import workbench
from workbench.analyses.diff import (
    MIN_STEPS, RunData, compare, diff_runs, median_change_ci, normalise_name, rank_sum_p,
)
from workbench.analyses.findings import flatten
from workbench.analyses.summary import analysis_tables
from workbench.compile_config import NO_CONFIG_HASH

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"
BEFORE, AFTER = SAMPLES / "cpu-recompile-before", SAMPLES / "cpu-recompile-after"
WORKER = REPO / "tests" / "compile" / "divergent_worker.py"


def _data(path: Path) -> RunData:
    run = workbench.open(path, on_error="skip")
    return RunData.from_run(run, analysis_tables(run), name=path.name)


@pytest.fixture(scope="session")
def bundled() -> tuple[RunData, RunData]:
    if not BEFORE.is_dir() or not AFTER.is_dir():
        pytest.skip("sample_traces/cpu-recompile-before/-after are absent")
    return _data(BEFORE), _data(AFTER)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def _by_kind(d) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in d.findings:
        out.setdefault(f.kind, []).append(f)
    return out


# ------------------------------------------------------------------------------------------ statistics
def test_rank_sum_matches_a_hand_computation():
    # U = 0 for complete separation of 5 vs 5; sigma^2 = 25 * 11 / 12; z = (12.5 - 0.5) / sigma
    z = 12.0 / (25 * 11 / 12) ** 0.5
    import math

    assert rank_sum_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(math.erfc(z / 2 ** 0.5), rel=1e-9)
    assert rank_sum_p([1, 2, 3], [1, 2, 3]) == pytest.approx(1.0)
    assert rank_sum_p([5, 5, 5], [5, 5, 5]) == 1.0  # every value tied: no evidence at all


def test_compare_needs_enough_steps_and_separated_spreads():
    slow = [100.0 + (i % 5) for i in range(20)]
    fast = [80.0 + (i % 5) for i in range(20)]
    assert compare(slow, fast).verdict == "better"
    assert compare(fast, slow).verdict == "worse"
    lo, hi = median_change_ci(slow, fast)
    true = 100.0 * (82.0 / 102.0 - 1.0)  # the medians are 102 and 82
    assert lo <= true <= hi < 0
    # too few steps: never "better", however large the change looks
    short = compare(slow[:MIN_STEPS - 1], fast[:MIN_STEPS - 1])
    assert short.verdict == "cannot tell" and f"need at least {MIN_STEPS}" in short.reason
    # the same distribution on both sides, tight: unchanged; wide and overlapping: cannot tell
    assert compare(slow, list(reversed(slow))).verdict == "unchanged"
    wide_a = [50.0, 150.0, 70.0, 130.0, 90.0, 110.0, 60.0, 140.0, 100.0, 80.0]
    wide_b = [v * 0.93 for v in reversed(wide_a)]
    assert compare(wide_a, wide_b).verdict == "cannot tell"


def test_triton_variants_group_under_one_name():
    assert normalise_name("triton_poi_fused_add_mul_12") == normalise_name("triton_poi_fused_add_mul_3") \
        == "triton_poi_fused_add_mul"
    assert normalise_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert normalise_name("aten::mm") == "aten::mm"


# ------------------------------------------------------------------------------------------ the fixed pair
def test_bundled_pair_proves_the_fix(bundled):
    d = diff_runs(*bundled)
    assert d.comparability.level == "comparable", d.comparability
    assert [x.what for x in d.comparability.differences] == ["compile config"]
    cfg = d.comparability.differences[0]
    assert cfg.effect == "expected"
    # each side shows its config's own hash: no config and the mark_dynamic config hash differently
    assert f"config hash {NO_CONFIG_HASH[:16]}" in cfg.before and "config hash" in cfg.after
    assert NO_CONFIG_HASH[:16] not in cfg.after, cfg
    kinds = _by_kind(d)
    div = kinds["divergent_recompile"][0]
    assert div.verdict == "fixed" and div.ranks == (0, 1) and div.steps == (6,), div
    assert "compile logs" in div.evidence
    assert all(f.verdict == "fixed" for f in kinds.get("recompile_shape", []))
    assert not any(f.kind in ("divergent_recompile", "recompile_shape") for f in d.new_findings)
    metrics = {m.name: m for m in d.metrics}
    assert (metrics["recompiles"].before, metrics["recompiles"].after, metrics["recompiles"].direction) == \
        (1.0, 0.0, "better")
    assert metrics["worst step"].after < 0.25 * metrics["worst step"].before  # the stall is gone
    assert d.steps_before.n == d.steps_after.n == 23 and d.steps_before.source == "collector"
    assert d.step_time.verdict != "worse"
    assert d.regressions() == []
    assert d.cpu_ops, "CPU ops per step are attributed"


def test_reversed_pair_is_a_regression_and_zero_to_one_recompile_is_worse(bundled):
    d = diff_runs(bundled[1], bundled[0])
    m = {x.name: x for x in d.metrics}["recompiles"]
    assert (m.before, m.after, m.direction) == (0.0, 1.0, "worse")
    new = {f.kind for f in d.new_findings}
    assert "divergent_recompile" in new
    assert any("divergent_recompile" in r for r in d.regressions())


def _cli_inproc(*args: str):
    """The ``workbench`` command in this process (no interpreter start-up): exit code and output."""
    from typer.testing import CliRunner

    from workbench.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_json_fail_on_and_report(bundled, tmp_path):
    ok = _cli_inproc("diff", str(BEFORE), str(AFTER), "--json", "--fail-on", "regression")
    assert ok.exit_code == 0, ok.output[-2000:]
    out = json.loads(ok.stdout)
    assert out["comparability"]["comparable"] is True
    verdicts = {f["kind"]: f["verdict"] for f in out["findings"]}
    assert verdicts["divergent_recompile"] == "fixed"
    assert out["step_time"]["n_before"] == 23 and out["regressions"] == []
    bad = _cli("diff", str(AFTER), str(BEFORE), "--fail-on", "regression")
    assert bad.returncode == 1
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("regression: ") and "divergent_recompile" in lines[0], bad.stderr
    text = _cli_inproc("diff", str(BEFORE), str(AFTER))
    assert text.exit_code == 0 and "Comparability: comparable" in text.stdout
    assert text.stdout.index("Comparability") < text.stdout.index("Findings of BEFORE")
    html = tmp_path / "diff.html"
    rep = _cli_inproc("report", str(BEFORE), str(AFTER), "-o", str(html), "--plotlyjs", "cdn")
    assert rep.exit_code == 0, rep.output[-2000:]
    page = html.read_text()
    assert "Comparability: comparable" in page and "divergent_recompile" in page and ">fixed<" in page


# ------------------------------------------------------------------------------------------ control pairs
def test_different_jobs_are_not_comparable():
    a, b = SAMPLES / "cpu-gloo-4rank", SAMPLES / "h200x2-ddp-nccl"
    if not a.is_dir() or not b.is_dir():
        pytest.skip("sample runs absent")
    d = diff_runs(_data(a), _data(b))
    c = d.comparability
    assert c.level == "not comparable"
    what = {x.what: x.effect for x in c.differences}
    assert what["script"] == "different job" and what["compiled frames"] == "different job"
    assert what["world size"] == what["device"] == what["torch"] == "warning"
    assert d.findings and {f.verdict for f in d.findings} == {"not comparable"}
    assert d.step_time.verdict == "not comparable"
    assert d.regressions() and d.regressions()[0].startswith("runs are not comparable")
    r = _cli("diff", str(a), str(b), "--fail-on", "regression")
    assert r.returncode == 1 and "not comparable" in r.stderr


def test_foreign_traces_of_other_hardware_warn(data_dir):
    a100 = data_dir / "traces" / "hta" / "nccl_parser_config"
    h200 = SAMPLES / "h200x2-ddp-nccl"
    c = diff_runs(_data(a100), _data(h200)).comparability
    what = {x.what: (x.before, x.after, x.effect) for x in c.differences}
    assert "A100" in what["device"][0] and "H200" in what["device"][1] and what["device"][2] == "warning"
    assert c.level in ("warnings", "not comparable")


def test_no_device_data_after_is_cannot_tell_not_fixed():
    gpu, cpu = SAMPLES / "h200x2-planted", SAMPLES / "cpu-gloo-4rank"
    if not gpu.is_dir() or not cpu.is_dir():
        pytest.skip("sample runs absent")
    before = _data(gpu)
    # its device-only finding (rank 1's host-bound idle) is a symptom of the recompile there: judge every finding
    before = dataclasses.replace(before, findings=tuple(flatten(before.findings)))
    d = diff_runs(before, _data(cpu))
    assert d.comparability.comparable  # same script and compiled frames, other hardware
    assert "device data" in {x.what for x in d.comparability.differences}
    device = [f for f in d.findings if f.source == "breakdown"]  # seen only in device activity
    assert device, [f.kind for f in d.findings]
    for f in device:
        assert f.verdict == "cannot tell" and "no device data" in f.evidence, f
    assert all(f.caveat for f in d.findings)  # the environment differs: every verdict says so


# ------------------------------------------------------------------------------------------ live pairs
def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_port()), str(WORKER), "--out", str(out),
           "--odd-rank", "1", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="session")
def live_runs(tmp_path_factory) -> dict[str, Path]:
    """Two 4-step runs of the bundled job, recorded here at once: as it was, and with a config that does not fix
    it (a higher recompile limit does not stop a one-rank shape recompile)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("diff-live")
    nofix = root / "nofix.toml"
    nofix.write_text("# raising the limit does not stop a one-rank shape recompile\n[dynamo]\nrecompile_limit = 16\n")
    jobs = {"short": ("--steps", "4", "--odd-step", "2"),
            "nofix": ("--steps", "4", "--odd-step", "2", "--compile-config", str(nofix))}
    procs = {}
    for name, extra in jobs.items():
        procs[name] = _start(root / name, *extra)
        time.sleep(0.5)  # distinct ports, staggered start
    for name, p in procs.items():
        out, _ = p.communicate(timeout=400)
        assert p.returncode == 0, f"{name}: {out[-3000:]}"
    return {name: root / name for name in jobs}


@pytest.mark.slow
def test_a_fix_that_did_nothing_is_unchanged(bundled, live_runs):
    """The bundled BEFORE vs a quick rerun with a config that does not fix the recompile."""
    d = diff_runs(bundled[0], _data(live_runs["nofix"]))
    assert d.comparability.comparable, d.comparability
    assert {x.what: x.effect for x in d.comparability.differences}.get("compile config") == "expected"
    kinds = _by_kind(d)
    assert kinds["divergent_recompile"][0].verdict == "unchanged", kinds["divergent_recompile"]
    assert all(f.verdict == "unchanged" for f in kinds.get("recompile_shape", []))
    assert "still there" in kinds["divergent_recompile"][0].evidence
    assert {m.name: m.direction for m in d.metrics}["recompiles"] == "unchanged"
    assert not any(f.verdict == "fixed" for f in d.findings if "recompile" in f.kind)


@pytest.mark.slow
def test_a_noisy_short_pair_cannot_tell(live_runs):
    d = diff_runs(_data(live_runs["short"]), _data(live_runs["nofix"]))
    assert d.comparability.level == "comparable"
    assert d.steps_before.n == d.steps_after.n == 3
    assert d.step_time.verdict == "cannot tell" and "need at least" in d.step_time.reason
    judged = {m.name: m.direction for m in d.metrics if m.unit == "ns/step"}
    assert "better" not in judged.values() and "worse" not in judged.values(), judged
    for f in d.findings:
        assert f.verdict in ("unchanged", "cannot tell"), f


def test_kernels_are_compared_per_step_and_grouped_by_normalised_name():
    """Two real H200 runs of one script (1 rank vs 2 ranks): kernel time per profiler step, mean over ranks,
    computed here by hand for the biggest changed kernel; NCCL's one-rank kernel is removed, the ring kernel added."""
    import polars as pl

    from workbench.analyses.window import window_kernels, window_steps

    one, two = SAMPLES / "h200-1gpu", SAMPLES / "h200x2-ddp-nccl"
    if not one.is_dir() or not two.is_dir():
        pytest.skip("H200 sample runs absent")
    b, a = _data(one), _data(two)
    d = diff_runs(b, a)
    assert d.comparability.comparable and "world size" in {x.what for x in d.comparability.differences}
    assert d.kernels and all(k.kind == "kernel" for k in d.kernels)
    assert all(normalise_name(k.name) == k.name for k in d.kernels)
    status = {k.name.split("(")[0]: k.status for k in d.kernels}
    assert status.get("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "added", status
    assert any(k.status == "removed" and "onerank" in k.name for k in d.kernels), status
    deltas = [abs(k.delta_ns) for k in d.kernels]
    assert deltas == sorted(deltas, reverse=True)  # most changed first
    k = next(k for k in d.kernels if k.status == "changed")
    for side, got_ns, got_count in ((a, k.after_ns, k.after_count), (b, k.before_ns, k.before_count)):
        kw = window_kernels(side.kernels, side.steps).with_columns(pl.col("name").cast(pl.String))
        mine = kw.filter(pl.col("name").map_elements(normalise_name, return_dtype=pl.String) == k.name)
        steps = window_steps(side.steps).filter(pl.col("in_window")).group_by("rank").len()
        per_rank = mine.group_by("rank").agg(ns=pl.col("dur").sum(), n=pl.len()).join(steps, on="rank")
        ranks = kw["rank"].n_unique()
        assert got_ns == pytest.approx(float((per_rank["ns"] / per_rank["len"]).sum()) / ranks)
        assert got_count == pytest.approx(float((per_rank["n"] / per_rank["len"]).sum()) / ranks)


def test_a_time_shared_gpu_is_another_set_up():
    """The same script on two ranks sharing one H200 vs two H200s: comparable, with the placement as a warning."""
    shared, two = SAMPLES / "h200-2rank-shared-gpu", SAMPLES / "h200x2-ddp-nccl"
    if not shared.is_dir() or not two.is_dir():
        pytest.skip("H200 sample runs absent")
    c = diff_runs(_data(shared), _data(two)).comparability
    what = {x.what: (x.before, x.after, x.effect) for x in c.differences}
    assert what["GPUs in use"] == ("1", "2", "warning") and c.level == "warnings", c
