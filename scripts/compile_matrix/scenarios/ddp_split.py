"""DDP's graph split: 2 gloo ranks, DDP with 1 MB buckets over 8 layers of 256 KB (2 MB of parameters), compiled with
aot_eager as DDP(torch.compile(model)): the model's frame is compiled inside DDP's forward, where DDPOptimizer splits
its graph at bucket boundaries (optimize_ddp). Smaller buckets than DDP's first bucket (1 MB) are refused by
DDPOptimizer; torch.compile(DDP(model)) compiles no model graph on CPU/gloo (see ddp_outer)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import init_distributed  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

rank, world = init_distributed()
torch.manual_seed(0)
rec = Recorder("ddp_split", backend="aot_eager", world_size=world)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
cm = DDP(torch.compile(model, backend="aot_eager"), bucket_cap_mb=1)  # CAUSE:ddp
x = torch.randn(8, 256)
for step in rec.steps(4):
    with rec.timed():
        cm(x).sum().backward()
    if step == 0:
        rec.expect("ddp_split", "ddp", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "skipped_frames": 0,
                   "failures": 0},
           counts_note="graph breaks here are torch-internal (observed_counts), not the script's")
torch.distributed.destroy_process_group()
