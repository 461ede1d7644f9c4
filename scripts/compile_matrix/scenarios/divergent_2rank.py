"""Divergent recompile: 2 gloo ranks; at step 3 rank 1 alone gets a longer input and recompiles, then both ranks
meet in an all_reduce (rank 0 waits there for rank 1's compile)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import init_distributed  # noqa: E402

rank, world = init_distributed()
torch.manual_seed(0)
rec = Recorder("divergent_2rank", backend="aot_eager", world_size=world)


def f(x):
    return torch.tanh(x).sum(1)


cf = torch.compile(f, backend="aot_eager")
for step in rec.steps(6):
    n = 12 if (rank == 1 and step >= 3) else 8
    x = torch.randn(4, n)  # CAUSE:shape
    with rec.timed():
        y = cf(x)
        torch.distributed.all_reduce(y.sum().reshape(1))
    if step == 3 and rank == 1:
        rec.expect("recompile", "shape", cause="shape", source="L['x']", dim=1, divergent=True, frame="f",
                   frame_line=f.__code__.co_firstlineno)
    if step == 3 and rank == 0:
        rec.expect("wait_for_peer_compile", None, peer=1)
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 1 if rank == 1 else 0, "graph_breaks": 0,
                   "skipped_frames": 0, "failures": 0})
torch.distributed.destroy_process_group()
