"""torch.compile(DDP(model)) on CPU/gloo: 2 ranks, the same model as ddp_split, but the DDP wrapper is compiled. Seen
here: dynamo graph-breaks on DDP's own code (Logger.set_runtime_stats_and_log, the skipped _inside_ddp_forward) and
the model's forward is never compiled: it runs eagerly."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import init_distributed  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

rank, world = init_distributed()
torch.manual_seed(0)
rec = Recorder("ddp_outer", backend="aot_eager", world_size=world)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
ddp = DDP(model, bucket_cap_mb=1)  # CAUSE:ddp
cm = torch.compile(ddp, backend="aot_eager")
x = torch.randn(8, 256)
for step in rec.steps(4):
    with rec.timed():
        cm(x).sum().backward()
    if step == 0:
        rec.expect("ddp_internal_breaks", "ddp", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "skipped_frames": 0,
                   "failures": 0},
           counts_note="graph breaks here are torch-internal (observed_counts), not the script's")
torch.distributed.destroy_process_group()
