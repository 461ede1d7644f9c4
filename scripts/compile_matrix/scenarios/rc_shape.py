"""Recompile by shape: dim 0 changes at step 2 (default automatic dynamic: the second compile is dynamic)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_shape", backend="aot_eager")


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager")
sizes = [4, 4, 8, 12, 16, 16, 16]
for step in rec.steps(len(sizes)):
    x = torch.randn(sizes[step], 8)
    with rec.timed():
        cf(x)  # CAUSE:call
    if step == 2:
        rec.expect("recompile", "call", cause="shape", source="L['x']", dim=0, frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
