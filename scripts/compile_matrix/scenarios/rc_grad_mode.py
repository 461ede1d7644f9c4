"""Recompile by grad mode: the model is called under torch.no_grad() from step 3."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_grad_mode", backend="aot_eager")
model = torch.nn.Linear(8, 8)
cm = torch.compile(model, backend="aot_eager")
x = torch.randn(4, 8)
for step in rec.steps(6):
    with rec.timed():
        if step < 3:
            cm(x).sum().backward()
        else:
            with torch.no_grad():  # CAUSE:grad
                cm(x)
    if step == 3:
        rec.expect("recompile", "grad", cause="grad_mode", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
