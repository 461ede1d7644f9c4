"""Recompile by requires_grad: the input requires grad from step 3."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_requires_grad", backend="aot_eager")


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager")
base = torch.randn(8, 8)
for step in rec.steps(6):
    x = base if step < 3 else base.clone().requires_grad_(True)
    with rec.timed():
        cf(x)  # CAUSE:call
    if step == 3:
        rec.expect("recompile", "call", cause="requires_grad", source="L['x']", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
