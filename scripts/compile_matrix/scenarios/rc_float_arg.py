"""Recompile by a float argument: s changes at step 2, 3, 4 (how many compiles depends on specialize_float)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_float_arg", backend="aot_eager")


def f(x, s):
    return torch.tanh(x) * s


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 8)
ss = [0.5, 0.5, 0.75, 1.25, 1.5, 1.5]
for step in rec.steps(len(ss)):
    with rec.timed():
        cf(x, ss[step])  # CAUSE:call
    if step == 2:
        rec.expect("recompile", "call", cause="float_arg", source="L['s']", frame="f",
                   frame_line=f.__code__.co_firstlineno)
import torch._dynamo  # noqa: E402
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": len(rec.compiles) - 1, "graph_breaks": 0,
                   "skipped_frames": 0, "failures": 0},
           specialize_float=torch._dynamo.config.specialize_float)
