"""Graph break in a nested call: a data-dependent branch inside a helper that the compiled function calls."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("gb_nested", backend="aot_eager")


def helper(y):
    if y.sum() > 0:  # CAUSE:branch
        return y * 2
    return y


def f(x):
    y = torch.tanh(x)
    y = helper(y)  # CAUSE:call
    return y + 1


cf = torch.compile(f, backend="aot_eager")
x = torch.randn(8, 16).abs()
for step in rec.steps(6):
    with rec.timed():
        cf(x)
    if step == 0:
        rec.expect("graph_break", "branch", cause="data_dependent_branch", frame="f",
                   frame_line=f.__code__.co_firstlineno, call_line=__import__("common").cause_line("call"))
rec.finish(counts={"compiles": len(rec.compiles), "graph_breaks": 1, "recompiles": 0, "skipped_frames": 0,
                   "failures": 0})
