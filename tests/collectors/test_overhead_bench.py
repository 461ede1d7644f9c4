"""The overhead benchmark's CPU smoke mode runs end to end (no timing is asserted: benchmarks print ratios)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys

import pytest
from collector_helpers import ROOT

pytest.importorskip("torch")


@pytest.mark.slow
def test_overhead_bench_smoke(tmp_path):
    out = tmp_path / "overhead.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/overhead.py"), "--smoke", "--arms",
                           "collector,residue,late_start", "--keep", str(tmp_path / "runs"), "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    tiny = res["shapes"]["tiny"]
    (rnd,) = tiny["rounds"]
    assert set(rnd) == {"bare", "collector", "residue", "late_start"}
    for arm in rnd.values():
        assert "error" not in arm and len(arm["step_ms"]) == tiny["steps"]
    assert rnd["collector"]["errors"] == [] and len(rnd["collector"]["trace_files"]) == 1   # window 5-7 saved
    assert rnd["late_start"]["errors"] == [] and len(rnd["late_start"]["trace_files"]) == 1
    assert "trace_files" not in rnd["residue"]                 # its collector was closed before the loop:
    residue_steps = tmp_path / "runs/tiny-r0-residue/rank0/steps.jsonl"
    assert residue_steps.exists() and residue_steps.read_text() == ""    # it started, and recorded no step
    segs = dict(tiny["summary"]["collector"])
    mean = segs.pop("after_mean")                                  # every step counts (the timed ones too)
    skip = set(rnd["collector"]["turn_starts"])                   # a turn's first step pays the handover
    arm_mean = statistics.fmean(t for i, t in enumerate(rnd["collector"]["step_ms"]) if i >= 8 and i not in skip)
    assert mean["arm_ms"] == pytest.approx(arm_mean, abs=1e-3) and mean["ci95"][0] <= mean["median_ratio"]
    assert rnd["collector"]["step_impl"] in ("c", "python")
    assert set(segs) == {"before", "prep", "window", "after"}
    for seg in segs.values():
        (pair,) = seg["pairs"]
        assert seg["median_ratio"] == pytest.approx(pair[2], abs=1e-3) and len(seg["ci95"]) == 2
    assert "pair 1: after-window bare" in proc.stdout


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("overhead_bench", ROOT / "bench/overhead.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod           # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_turns_placements_and_labels():
    """The lockstep's schedule: turns, CPU blocks that rotate over the arms, labels of copies (no torch run)."""
    b = _bench()
    assert b.turn_starts(120, 50) == [1, 9, 59, 109]        # steps 1-8 in one turn, then 50 at a time
    assert b.turn_starts(6, 1) == [1, 2, 3, 4, 5]           # the token every step
    labels = b.process_labels(["bare", "collector"], 2, 1)
    assert sorted(labels) == [("bare", "bare"), ("bare#2", "bare"), ("collector", "collector"),
                              ("collector#2", "collector")] and labels[0] == ("collector", "collector")
    assert set(b.gpu_cpus()) <= set(range(os.cpu_count()))      # this machine's, read from sysfs
    b.gpu_cpus = lambda: list(range(16))                        # as on the H200 machine: 16 CPUs, one node
    r0, driver = b.placements(3, "own", 2, 0)
    r1, _ = b.placements(3, "own", 2, 1)
    assert r0 == [{0, 1}, {2, 3}, {4, 5}] and driver == {15} and r1[0] == {2, 3}   # rotated by one block
    assert b.placements(2, "none", 2, 0) == ([None, None], None)
    same, _ = b.placements(2, "same", 1, 0)
    assert same[0] == same[1]


def test_segment_skips_turn_starts_in_after_only():
    b = _bench()
    steps = [9.0] * 8 + [1.0, 50.0, 1.0, 1.0]              # step 9 opens a turn (a context switch)
    assert b.segment_ms(steps, "after", skip=[1, 9]) == 1.0
    assert b.segment_ms(steps, "before", skip=[1, 9]) == 9.0
    assert b.segment_ms([1.0] * 8 + [2.0] * 10 + [100.0], "after", stat="trimmed") == 2.0


def test_paired_ratio_cancels_a_drift_shared_in_time():
    """Blocks of steps paired in time: a drift every process sees in the same turns cancels, a constant cost stays;
    ``bare+bare2`` pools both baselines; nested ablations are compared with each other."""
    b = _bench()
    drift = [1.0 + (0.5 if 100 <= i < 160 else 0.0) + 0.01 * (i % 7) for i in range(208)]   # shared, in time
    rnd = {"bare": {"step_ms": [5.0 * d for d in drift]},
           "bare2": {"step_ms": [5.0 * d for d in drift]},
           "collector": {"step_ms": [5.1 * d for d in drift]}}                                 # +2 % throughout
    assert b.paired_ratio(rnd, "collector", "bare") == pytest.approx(1.02, abs=1e-9)
    assert b.paired_ratio(rnd, "bare2", "bare") == pytest.approx(1.0, abs=1e-9)
    assert b.paired_ratio(rnd, "collector", "bare+bare2") == pytest.approx(1.02, abs=1e-9)
    assert len(b.members(rnd, "bare+bare2")) == 2 and b.paired_ratio(rnd, "missing", "bare") is None
    comps = b.comparisons(["bare2", "collector", "no_window"])
    assert comps["collector vs bare+bare2"] == ("collector", "bare+bare2") and "bare2 vs bare+bare2" not in comps
    assert comps["collector/no_window"] == ("collector", "no_window")
    assert b.segment_ms(rnd["collector"]["step_ms"], "after") / b.segment_ms(rnd["bare"]["step_ms"], "after") \
        == pytest.approx(1.02)
    summary = b.summarize([rnd, rnd], {"collector": comps["collector"]})
    assert summary["collector"]["after_paired"]["median_ratio"] == pytest.approx(1.02, abs=1e-4)
    assert summary["collector"]["after_paired"]["ci95"] == pytest.approx([1.02, 1.02], abs=1e-4)


@pytest.mark.slow
def test_host_costs_smoke(tmp_path):
    """bench/host_costs.py runs end to end on CPU: every per-call item and the training-loop conditions come out
    (no timing is asserted)."""
    out = tmp_path / "costs.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/host_costs.py"), "--smoke", "--dirs", str(tmp_path),
                           "--around", "3", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    per_call = res["per_call"]
    assert {"time.time_ns", "orjson.dumps(row)"} <= set(per_call)
    assert any(k.startswith("os.write line") for k in per_call)
    assert sum(k.startswith("with collector.step()") for k in per_call) == 6
    assert all(v["median_us"] > 0 and v["p90_us"] >= v["median_us"] for v in per_call.values())
    cold = res["cold"]["calls"]                                   # each part of a step after the caches are evicted
    assert {"empty call", "StepLog.record (the step ring)"} <= set(cold) and cold["empty call"]["extra_us"] == 0
    assert "with collector.step(): pass — default, no window [python]" in cold   # both step contexts, where built
    assert all(v["median_us"] > 0 for v in cold.values())
    loop = res["training_loop"]
    assert loop["errors"] == {} and {"collector", "sync_write", "no_device_timing"} <= set(loop)
    around = res["around"]                                       # the wrapper's entry and exit around a step
    assert around["errors"] == {} and around["rounds"] == 3
    impls = [k for k in around["conditions"] if k.startswith("with collector.step() [")]
    assert {"bare", "with nullcontext()", "with collector.step() [python]"} <= set(around["conditions"])
    assert len(impls) == len(res["step_impls"])
    assert all(v["enter_us"] > 0 and v["exit_us"] > 0 for v in around["conditions"].values())
    assert all(len(v["extra_ci95_us"]) == 2 for v in around["conditions"].values())
    assert not list(tmp_path.glob("wb-costs-*"))                 # its scratch folders are removed


@pytest.mark.slow
def test_toggle_smoke(tmp_path):
    """``--toggle``: arms switched on and off in blocks inside one process; each collector block a run directory of
    its own (with its profiler window unless the arm turns it off); patches are undone after their block (no
    timing is asserted)."""
    out = tmp_path / "toggle.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/overhead.py"), "--toggle", "2", "--smoke",
                           "--arms", "bare2,collector,no_window,no_write", "--keep", str(tmp_path / "runs"),
                           "--json", str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["rounds"] == 2 and res["errors"] == {}
    assert set(res["arms"]) == {"bare2", "collector", "no_window", "no_write"}
    assert all(len(e["after"]["ratios"]) == 2 and len(e["after"]["ci95"]) == 2 for e in res["arms"].values())
    assert all(set(r) == {"bare", "bare2", "collector", "no_window", "no_write"} for r in res["step_ms"])
    assert all(len(v) == res["block"] for r in res["step_ms"] for v in r.values())
    for k in range(2):
        run = tmp_path / f"runs/r{k}-collector/rank0"
        assert len((run / "steps.jsonl").read_text().splitlines()) >= res["block"]
        assert len(list((run / "trace").glob("*.json.gz"))) == 1
        assert not list((tmp_path / f"runs/r{k}-no_window/rank0").glob("trace/*.json.gz"))
        # no_write's patch held only in its own block: the collector blocks after it still wrote their steps
        assert (tmp_path / f"runs/r{k}-no_write/rank0/steps.jsonl").read_text() == ""
    refused = subprocess.run([sys.executable, str(ROOT / "bench/overhead.py"), "--toggle", "1", "--smoke",
                              "--arms", "profiler"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert refused.returncode == 2 and "--toggle takes bare and collector arms" in refused.stderr


def test_no_result_says_how_the_process_ended():
    b = _bench()

    def ended(how):
        pid = os.fork()
        if pid == 0:
            how()
        return os.waitpid(pid, 0)[1]

    assert "killed by SIGTERM" in b.no_result(ended(lambda: os.kill(os.getpid(), signal.SIGTERM)))
    assert "exit code 3" in b.no_result(ended(lambda: os._exit(3)))
    assert "ended normally" in b.no_result(ended(lambda: os._exit(0)))
    assert "--timeout" in b.no_result(ended(lambda: os.kill(os.getpid(), signal.SIGKILL)), timed_out=True)


def test_toggle_undoes_an_arm_whose_block_raised(tmp_path):
    """``--toggle`` switches arms inside one process: a patch is undone even when its block raises, and arms
    whose environment torch reads only at start are refused before anything is changed."""
    b = _bench()
    from workbench.collectors import step_log

    record = step_log.StepLog.record
    with pytest.raises(RuntimeError, match="block failed"):
        with b.arm_switched_on(b.ARMS["no_write"], tmp_path / "run") as (step_ctx, collector):
            assert step_log.StepLog.record is not record and collector is not None
            raise RuntimeError("block failed")
    assert step_log.StepLog.record is record and collector._closed
    before = dict(os.environ)
    with pytest.raises(ValueError, match="without environment settings"):
        with b.arm_switched_on(b.ARMS["keep_cupti"], tmp_path / "run2"):
            pass
    assert dict(os.environ) == before


def test_saved_series_are_pooled_on_the_arms_they_share(tmp_path):
    """``--summarize a.json,b.json``: the rounds of each shape taken together, for the arms all files measured; files
    sharing no arm but bare are refused, named; the training thread's CPU time per step (``--probe``) is summarised
    as arm minus baseline."""
    b = _bench()

    def rnd(extra_cpu: float) -> dict:
        return {"bare": {"step_ms": [5.0] * 40, "cpu_ms": [3.0] * 40},
                "collector": {"step_ms": [5.05] * 40, "cpu_ms": [3.0 + extra_cpu] * 40}}

    first, second, other = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text(json.dumps({"arms": {"bare": "", "collector": ""}, "shapes": {"small": {"rounds": [rnd(0.02)]}}}))
    second.write_text(json.dumps({"arms": {"bare": "", "collector": ""}, "shapes": {"small": {"rounds": [rnd(0.04)]}}}))
    other.write_text(json.dumps({"arms": {"bare": "", "bare2": ""}, "shapes": {"small": {"rounds": [rnd(0.0)]}}}))
    arms, pooled = b.pooled_rounds([first, second])
    assert arms == ["bare", "collector"] and len(pooled["small"]) == 2
    summary = b.summarize(pooled["small"], b.comparisons(["collector"]))["collector"]
    assert summary["after"]["median_ratio"] == pytest.approx(1.01)
    assert summary["after_cpu_us"]["median_us"] == pytest.approx(30.0) and summary["after_cpu_us"]["baseline"] == "bare"
    with pytest.raises(ValueError, match="c.json: arms"):
        b.pooled_rounds([first, other])
    wider = tmp_path / "e.json"       # a series with one more arm: pooled on the arms both measured
    wider_round = {**rnd(0.0), "py_step": {"step_ms": [5.1] * 40, "cpu_ms": [3.0] * 40}}
    wider.write_text(json.dumps({"arms": {"bare": "", "collector": "", "py_step": ""},
                                 "shapes": {"small": {"rounds": [wider_round]}}}))
    arms, pooled = b.pooled_rounds([wider, first])
    assert arms == ["bare", "collector"] and len(pooled["small"]) == 2
    assert set(b.summarize(pooled["small"], b.comparisons(["collector"]))) == {"collector"}
    plain = tmp_path / "d.json"       # a newer series: its bare arms ran the step with nothing around it
    plain.write_text(json.dumps({"arms": {"bare": "", "collector": ""}, "bare_step": b.BARE_STEP,
                                 "shapes": {"small": {"rounds": [rnd(0.0)]}}}))
    with pytest.raises(ValueError, match="d.json: its bare arms ran the step plain"):
        b.pooled_rounds([first, plain])
