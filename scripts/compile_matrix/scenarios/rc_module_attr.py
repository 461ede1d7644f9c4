"""Recompile by a module attribute: model.scale (an int) changes at step 3."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("rc_module_attr", backend="aot_eager")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.scale = 2

    def forward(self, x):
        return self.lin(x) * self.scale


model = Net()
cm = torch.compile(model, backend="aot_eager")
x = torch.randn(4, 8)
with torch.no_grad():
    for step in rec.steps(6):
        if step == 3:
            model.scale = 3  # CAUSE:attr
        with rec.timed():
            cm(x)
        if step == 3:
            rec.expect("recompile", "attr", cause="module_attr", source="L['self'].scale", frame="forward",
                       frame_line=Net.forward.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
