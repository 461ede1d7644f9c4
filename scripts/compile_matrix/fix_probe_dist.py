"""``[distributed] guard_collectives`` on the installed torch: 2 gloo ranks, rank 1 alone changes its input's length at
step 3. Without the setting only rank 1 recompiles; with it, the ranks agree before recompiling and both do.

Run as 2 processes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set); each prints one ``FIX_RESULT`` line.
Orders: ``none``, ``before_compile`` (set, then torch.compile), ``after_compile`` (torch.compile, set, first call).
"""

from __future__ import annotations

import argparse
import datetime
import json

import torch
import torch.distributed as dist
from torch._dynamo.testing import CompileCounterWithBackend

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--order", default="none")
A = ap.parse_args()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
result = {"torch": torch.__version__, "fix": "guard_collectives", "order": A.order, "rank": rank}


def f(x):
    return torch.tanh(x).sum(1)


def set_fix() -> None:
    torch.compiler.set_enable_guard_collectives(True)


try:
    if A.order != "none" and not hasattr(torch.compiler, "set_enable_guard_collectives"):
        raise AttributeError("torch.compiler has no set_enable_guard_collectives")
    cnt = CompileCounterWithBackend("aot_eager")
    if A.order == "before_compile":
        set_fix()
    cf = torch.compile(f, backend=cnt)
    if A.order == "after_compile":
        set_fix()
    for step in range(6):
        n = 12 if (rank == 1 and step >= 3) else 8
        y = cf(torch.ones(4, n))
        dist.all_reduce(y.sum().reshape(1))
    result["compiles"] = cnt.frame_count
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
print("FIX_RESULT " + json.dumps(result), flush=True)
dist.destroy_process_group()
