"""suppress_errors=True: the backend raises, dynamo swallows it and the frame runs eagerly (nothing raised)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
torch._dynamo.config.suppress_errors = True
rec = Recorder("suppress_errors", backend="planted (raises)")


def broken_backend(gm, example_inputs):
    raise RuntimeError("planted backend failure")  # CAUSE:backend


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend=broken_backend)
x = torch.randn(8, 8)
raised = []
for step in rec.steps(4):
    try:
        with rec.timed():
            cf(x)
    except Exception as exc:
        raised.append(f"{type(exc).__module__}.{type(exc).__name__}")
    if step == 0:
        rec.expect("skipped_frame", "backend", cause="suppressed_error", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "failures": 0, "suppressed": 1, "skipped_frames": 1,
                   "graph_breaks": 0, "recompiles": 0}, raised=raised, eager_steps=[1, 2, 3])
