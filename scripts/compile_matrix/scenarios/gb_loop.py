"""Graph break inside a loop of forward: dynamo skips the whole frame, which then runs eagerly for the whole run."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
rec = Recorder("gb_loop", backend="aot_eager")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            if x.sum() > 0:  # CAUSE:branch
                x = x * 0.5
        return x


model = Net()
cm = torch.compile(model, backend="aot_eager")
x = torch.randn(16, 32)
with torch.no_grad():
    for step in rec.steps(8):
        with rec.timed():
            cm(x)
        if step == 0:
            rec.expect("skipped_frame", "branch", cause="graph_break_in_loop", frame="forward",
                       frame_line=Net.forward.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "graph_breaks": 1, "recompiles": 0, "skipped_frames": 1,
                   "failures": 0},
           eager_steps=list(range(1, 8)),
           cost_note="forward runs eagerly from step 0 on: eager_step_ns is its time per step on this CPU")
