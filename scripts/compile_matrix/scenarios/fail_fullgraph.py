"""Failure with fullgraph=True: a graph break (data-dependent branch) raises into user code on every call."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("fail_fullgraph", backend="aot_eager")


def f(x):
    y = torch.tanh(x)
    if y.sum() > 0:  # CAUSE:branch
        y = y * 2
    return y


cf = torch.compile(f, backend="aot_eager", fullgraph=True)
x = torch.randn(8, 8).abs()
raised = []
for step in rec.steps(2):
    try:
        with rec.timed():
            cf(x)
    except Exception as exc:
        raised.append(f"{type(exc).__module__}.{type(exc).__name__}")
        rec.expect("failure", "branch", fullgraph=True, exception=raised[-1], frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "failures": len(raised), "graph_breaks": 0, "recompiles": 0,
                   "skipped_frames": 0}, raised=raised)
