"""Recompile by train/eval: model.eval() at step 3 (Dropout reads self.training)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_train_eval", backend="aot_eager")
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1))
cm = torch.compile(model, backend="aot_eager")
x = torch.randn(4, 8)
with torch.no_grad():
    for step in rec.steps(6):
        if step == 3:
            model.eval()  # CAUSE:eval
        with rec.timed():
            cm(x)
        if step == 3:
            rec.expect("recompile", "eval", cause="train_eval", source="training", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
