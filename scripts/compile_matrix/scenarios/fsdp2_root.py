"""FSDP2, root compiled: 2 gloo ranks, fully_shard on each layer and the root, then torch.compile(model) with aot_eager
on CPU. Seen here: one compile that graph-breaks on FSDP's own (disabled) hooks; the layers are not compiled."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from common import Recorder, torch  # noqa: E402

from common import init_distributed, unsupported  # noqa: E402

rank, world = init_distributed()
try:
    from torch.distributed.fsdp import fully_shard
    where = "torch.distributed.fsdp.fully_shard"
except ImportError:
    try:
        from torch.distributed._composable.fsdp import fully_shard
        where = "torch.distributed._composable.fsdp.fully_shard"
    except ImportError:
        unsupported("fsdp2_root", "no fully_shard in this torch", rank)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
try:
    for layer in model:
        fully_shard(layer)
    fully_shard(model)  # CAUSE:shard
    x = torch.randn(8, 64)
    model(x).sum().backward()  # eager check that FSDP2 runs on CPU here
except Exception as exc:
    unsupported("fsdp2_root",
                f"FSDP2 on CPU/gloo failed eagerly: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", rank)
rec = Recorder("fsdp2_root", backend="aot_eager", world_size=world, fully_shard=where)
cm = torch.compile(model, backend="aot_eager")
failed = []
for step in rec.steps(4):
    try:
        with rec.timed():
            cm(x).sum().backward()
    except Exception as exc:
        failed.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        break
    if step == 0:
        rec.expect("fsdp2_compile", "shard", frame="forward")
rec.finish(counts={"compiles": len(rec.compiles), "recompiles": 0, "skipped_frames": 0, "failures": len(failed)},
           counts_note="graph breaks here are torch-internal (observed_counts), not the script's",
           raised=failed)
torch.distributed.destroy_process_group()
