"""Dynamo reset between compiles: two functions compiled, torch._dynamo.reset(), three times: 6 first compiles in 3
generations, no recompile."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("reset", backend="aot_eager")


def f(x):
    return torch.tanh(x).sum(1)


def g(x):
    return torch.sigmoid(x) * 2


x = torch.randn(8, 8)
for gen in range(3):
    if gen:
        rec.reset()  # CAUSE:reset
        rec.expect("reset", "reset", generation=gen)
    cf = torch.compile(f, backend="aot_eager")
    cg = torch.compile(g, backend="aot_eager")
    for step in rec.steps(2):
        with rec.timed():
            cf(x)
            cg(x)
        if step % 2 == 0:
            rec.expect("first_compile", None, frame="f", generation=gen)
            rec.expect("first_compile", None, frame="g", generation=gen)
rec.finish(counts={"compiles": 6, "first_compiles": 6, "recompiles": 0, "resets": 2, "generations": 3,
                   "graph_breaks": 0, "skipped_frames": 0, "failures": 0})
