"""Graph break at `print` inside the compiled function."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("gb_print", backend="aot_eager")


def f(x):
    y = torch.tanh(x)
    print("inside f")  # CAUSE:print
    return y + 1


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 16)
for step in rec.steps(6):
    with rec.timed():
        cf(x)
    if step == 0:
        rec.expect("graph_break", "print", cause="print", frame="f", frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "graph_breaks": 1, "recompiles": 0, "skipped_frames": 0,
                   "failures": 0})
