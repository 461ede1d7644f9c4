"""Recompile by a global: SCALE changes at step 3."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_global", backend="aot_eager")
SCALE = 1.0


def f(x):
    return torch.tanh(x) * SCALE


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 8)
for step in rec.steps(6):
    if step == 3:
        SCALE = 2.0  # CAUSE:global
    with rec.timed():
        cf(x)
    if step == 3:
        rec.expect("recompile", "global", cause="global", source="G['SCALE']", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
