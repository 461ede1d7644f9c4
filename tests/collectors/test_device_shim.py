"""The device machine has torch but no polars: its scripts (bench/faults_gpu.sh, bench/gpu_idle.sh) put a minimal
``workbench`` package on the path, the collectors plus the modules listed in bench/device_shim.sh. A collector run
in such a package, with polars and pyarrow made unimportable, records its steps, profiler window and run files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUN = r"""
import sys

class NoAnalysisStack:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("polars", "pyarrow", "plotly", "dash"):
            raise ImportError(f"{name} is not on the device machine")
        return None

# the device has no workbench installed: drop this checkout's editable-install finders (they would serve any
# module missing from the shim out of the checkout)
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
sys.meta_path.insert(0, NoAnalysisStack())
import torch
from workbench.collectors import Collector

with Collector(sys.argv[1], profile_start=1, profile_length=2) as c:
    for _ in range(4):
        with c.step():
            torch.ones(64, 64).matmul(torch.ones(64, 64)).sum()
"""


def shim_files() -> list[str]:
    text = (ROOT / "bench" / "device_shim.sh").read_text()
    return re.search(r'^SHIM_FILES="([^"]+)"', text, re.M).group(1).split()


def test_the_collectors_run_from_the_device_shim_without_the_analysis_stack(tmp_path):
    shim = tmp_path / "shim" / "workbench"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('"""minimal workbench"""\n')
    for name in shim_files():
        (shim / name).symlink_to(ROOT / "workbench" / name)
    (shim / "collectors").symlink_to(ROOT / "collectors")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shim"), "PYTHONSAFEPATH": "1"}
    res = subprocess.run([sys.executable, "-P", "-c", RUN, str(out)], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "rank0" / "steps.jsonl").read_text().splitlines()
             if '"start_ns"' in line]
    assert sorted(set(steps)) == [0, 1, 2, 3]
    assert list((out / "rank0" / "trace").glob("*.json*")), "no profiler window was written"
    assert json.loads((out / "run.json").read_text())["finished"]   # the time the run closed
