"""Accumulated recompile limit: accumulated_recompile_limit = 4 (recompile_limit left at 8), dynamic=False and 7
lengths: the 5th compile of the code object is refused."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import dynamo_key, set_dynamo  # noqa: E402

torch.manual_seed(0)
key = set_dynamo("accumulated_recompile_limit", 4)
rec = Recorder("limit_accumulated", backend="aot_eager", limit_key=key)


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager", dynamic=False)
lengths = [8 + 2 * i for i in range(7)] + [20, 20]
for step in rec.steps(len(lengths)):
    x = torch.randn(4, lengths[step])
    with rec.timed():
        cf(x)  # CAUSE:call
    if 1 <= step < 4:
        rec.expect("recompile", "call", cause="shape", source="L['x']", dim=1, frame="f")
    elif step == 4:
        rec.expect("recompile_limit", "call", limit=4, limit_type="accumulated_recompile_limit", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 3, "limit_hits": 1, "graph_breaks": 0,
                   "skipped_frames": 1, "failures": 0},
           eager_steps=list(range(4, len(lengths))),
           recompile_limit=getattr(torch._dynamo.config, dynamo_key("recompile_limit")))
