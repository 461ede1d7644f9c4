"""FX-graph cache bypass: a post-grad custom pass that is not a CustomGraphPass makes the graph uncacheable."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from cache_common import cache_settings, model_and_input  # noqa: E402

settings = cache_settings()


def my_pass(graph):
    return None


torch._inductor.config.post_grad_custom_post_pass = my_pass  # CAUSE:pass
rec = Recorder("cache_bypass", backend="inductor", cache_settings=settings)
model, x = model_and_input()
cm = torch.compile(model)
for step in rec.steps(3):
    with rec.timed():
        cm(x).sum().backward()
    if step == 0:
        rec.expect("cache_bypass", "pass", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "graph_breaks": 0, "skipped_frames": 0,
                   "failures": 0})
