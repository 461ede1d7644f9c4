"""Compile caches warm from an earlier process: a child process (not traced) compiles the same training step into
the same cache folder; then this process compiles it and hits the FX-graph and AOTAutograd caches."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

import os  # noqa: E402
import subprocess  # noqa: E402

from cache_common import cache_settings, model_and_input  # noqa: E402

settings = cache_settings()
if "--warm" in sys.argv:
    model, x = model_and_input()
    torch.compile(model)(x).sum().backward()
    sys.exit(0)
env = {k: v for k, v in os.environ.items() if k != "TORCH_TRACE"}
subprocess.run([sys.executable, __file__, "--warm"], env=env, check=True)
rec = Recorder("cache_warm", backend="inductor", cache_settings=settings)
model, x = model_and_input()
cm = torch.compile(model)
for step in rec.steps(3):
    with rec.timed():
        cm(x).sum().backward()  # CAUSE:call
    if step == 0:
        rec.expect("cache_hit", "call", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
