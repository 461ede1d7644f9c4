"""Compiled autograd: torch._dynamo.config.compiled_autograd = True and a compiled training step whose backward is
captured by compiled autograd (compile ids with a compiled-autograd prefix, !0/...)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

torch.manual_seed(0)
if "compiled_autograd" not in torch._dynamo.config.get_config_copy():
    from common import unsupported
    unsupported("compiled_autograd", "torch._dynamo.config has no compiled_autograd")
torch._dynamo.config.compiled_autograd = True
rec = Recorder("compiled_autograd", backend="aot_eager")
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.randn(8, 16)


def train(model, x):
    loss = model(x).sum()
    loss.backward()  # CAUSE:backward
    return loss


ct = torch.compile(train, backend="aot_eager")
for step in rec.steps(4):
    with rec.timed():
        ct(model, x)
    if step == 0:
        rec.expect("compiled_autograd", "backward", frame="train")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "skipped_frames": 0, "failures": 0},
           counts_note="graph breaks here are torch-internal (observed_counts), not the script's")
