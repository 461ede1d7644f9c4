"""FX-graph and AOTAutograd cache, miss then hit in one process: inductor compiles a training step (cold cache: miss),
torch._dynamo.reset(), compiles it again (warm cache: hit). Both caches are switched on explicitly."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from cache_common import cache_settings, model_and_input  # noqa: E402

settings = cache_settings()
rec = Recorder("cache_hit_miss", backend="inductor", cache_settings=settings)
model, x = model_and_input()
for gen in range(2):
    if gen:
        rec.reset()  # CAUSE:reset
        rec.expect("reset", "reset", generation=gen)
    cm = torch.compile(model)
    for step in rec.steps(3):
        with rec.timed():
            cm(x).sum().backward()  # CAUSE:call
        if step % 3 == 0:
            rec.expect("cache_miss" if gen == 0 else "cache_hit", "call", generation=gen, frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "first_compiles": len(rec.compiles), "recompiles": 0,
                   "resets": 1, "graph_breaks": 0, "skipped_frames": 0, "failures": 0})
