"""torch.compiler.disable: forward calls a disabled helper, so the graph breaks around it."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("compiler_disable", backend="aot_eager")


@torch.compiler.disable
def helper(y):
    return y * 2


def f(x):
    y = torch.tanh(x)
    y = helper(y)  # CAUSE:disabled
    return y + 1


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 8)
for step in rec.steps(5):
    with rec.timed():
        cf(x)
    if step == 0:
        rec.expect("graph_break", "disabled", cause="disabled_function", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "graph_breaks": 1, "recompiles": 0, "skipped_frames": 0,
                   "failures": 0})
