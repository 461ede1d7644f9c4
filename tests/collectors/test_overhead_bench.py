"""The overhead benchmark's CPU smoke mode runs end to end (no timing is asserted: benchmarks print ratios)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from collector_helpers import ROOT

pytest.importorskip("torch")


@pytest.mark.slow
def test_overhead_bench_smoke(tmp_path):
    out = tmp_path / "overhead.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench/overhead.py"), "--smoke", "--arms", "collector",
                           "--json", str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(out.read_text())
    tiny = res["shapes"]["tiny"]
    (rnd,) = tiny["rounds"]
    assert set(rnd) == {"bare", "collector"}
    for arm in rnd.values():
        assert "error" not in arm and len(arm["step_ms"]) == tiny["steps"]
    assert rnd["collector"]["errors"] == [] and len(rnd["collector"]["trace_files"]) == 1   # window 5-7 saved
    segs = tiny["summary"]["collector"]
    assert set(segs) == {"before", "prep", "window", "after"}
    for seg in segs.values():
        (pair,) = seg["pairs"]
        assert seg["median_ratio"] == pytest.approx(pair[2], abs=1e-3) and len(seg["ci95"]) == 2
    assert "pair 1: after-window bare" in proc.stdout
