"""Recompile by dtype: float32, then float64 from step 3."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_dtype", backend="aot_eager")


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager")
x32 = torch.randn(8, 8)
for step in rec.steps(6):
    x = x32 if step < 3 else x32.double()
    with rec.timed():
        cf(x)  # CAUSE:call
    if step == 3:
        rec.expect("recompile", "call", cause="dtype", source="L['x']", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
