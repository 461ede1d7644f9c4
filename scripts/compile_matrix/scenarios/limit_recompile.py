"""Recompile limit: torch.compile(f, dynamic=False) and 10 sequence lengths; after the limit (8) the frame runs
eagerly for every new length."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import dynamo_key  # noqa: E402

torch.manual_seed(0)
rec = Recorder("limit_recompile", backend="aot_eager", limit_key=dynamo_key("recompile_limit"))


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager", dynamic=False)
lengths = [8 + 2 * i for i in range(10)] + [26, 26, 26]
limit = getattr(torch._dynamo.config, dynamo_key("recompile_limit"))
for step in rec.steps(len(lengths)):
    x = torch.randn(4, lengths[step])
    with rec.timed():
        cf(x)  # CAUSE:call
    if 1 <= step < limit:
        rec.expect("recompile", "call", cause="shape", source="L['x']", dim=1, frame="f")
    elif step == limit:
        rec.expect("recompile_limit", "call", limit=limit, limit_type="recompile_limit", frame="f",
                   frame_line=f.__code__.co_firstlineno)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": limit - 1, "limit_hits": 1,
                   "graph_breaks": 0, "skipped_frames": 1, "failures": 0},
           eager_steps=list(range(limit, len(lengths))), limit=limit)
