"""Recompile by an int argument: n changes at step 2 (then automatic dynamic makes n symbolic)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_int_arg", backend="aot_eager")


def f(x, n):
    return torch.tanh(x) * n


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 8)
ns = [2, 2, 3, 4, 5, 5]
for step in rec.steps(len(ns)):
    with rec.timed():
        cf(x, ns[step])  # CAUSE:call
    if step == 2:
        rec.expect("recompile", "call", cause="int_arg", source="L['n']", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
