"""Failure without fullgraph: the backend raises; the error reaches user code (BackendCompilerFailed)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("fail_backend", backend="planted (raises)")


def broken_backend(gm, example_inputs):
    raise RuntimeError("planted backend failure")  # CAUSE:backend


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend=broken_backend)
x = torch.randn(8, 8)
raised = []
for step in rec.steps(2):
    try:
        with rec.timed():
            cf(x)
    except Exception as exc:
        raised.append(f"{type(exc).__module__}.{type(exc).__name__}")
        rec.expect("failure", "backend", fullgraph=False, exception=raised[-1], frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "failures": len(raised), "graph_breaks": 0, "recompiles": 0,
                   "skipped_frames": 0}, raised=raised)
