"""The environment fingerprint written to ``rank<R>/fingerprint.json``.

Example:
    >>> fp = fingerprint(rank=0, local_rank=0, world_size=1)
    >>> sorted(k for k in ("host", "torch", "config_hash") if k in fp)
    ['config_hash', 'host', 'torch']
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import socket
import sys
from importlib import metadata
from typing import Any

ENV_PREFIXES: tuple[str, ...] = ("TORCH", "NCCL", "CUDA", "PYTORCH")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _canonical(obj: Any) -> Any:
    """JSON stand-in for config values that is the same in every process (sets sorted, no addresses)."""
    if isinstance(obj, (set, frozenset)):
        return sorted((_canonical(o) for o in obj), key=repr)
    if callable(obj):
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj))


def config_hash() -> str | None:
    """sha256 of torch._dynamo.config + torch._inductor.config (values of the calling thread), as sorted JSON."""
    try:
        import torch._dynamo.config as dcfg
        import torch._inductor.config as icfg

        blob = json.dumps(
            {"dynamo": dcfg.get_config_copy(), "inductor": icfg.get_config_copy()},
            sort_keys=True, default=_canonical,
        ).encode()
        return hashlib.sha256(blob).hexdigest()
    except Exception:
        return None


def _device(local_rank: int) -> tuple[dict[str, Any] | None, int]:
    import torch

    if not torch.cuda.is_available():
        return None, 0
    count = torch.cuda.device_count()
    index = torch.cuda.current_device() if torch.cuda.is_initialized() else local_rank % max(count, 1)
    p = torch.cuda.get_device_properties(index)
    dev: dict[str, Any] = {"index": index}
    for key in ("name", "total_memory", "multi_processor_count", "major", "minor", "L2_cache_size",
                "gcnArchName", "uuid", "pci_bus_id", "pci_device_id", "pci_domain_id"):
        if hasattr(p, key):
            value = getattr(p, key)
            dev[key] = value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
    dev["capability"] = f"{p.major}.{p.minor}"
    return dev, count


def fingerprint(*, rank: int, local_rank: int, world_size: int) -> dict[str, Any]:
    """What this rank runs on: host, versions, device, env vars, backend and config hash."""
    import torch

    fp: dict[str, Any] = {
        "host": socket.gethostname(),
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "pid": os.getpid(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "triton": _version("triton") or _version("pytorch-triton"),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": None,
        "nccl": None,
        "device": None,
        "device_count": 0,
        "backend": None,
    }
    try:
        fp["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        pass
    try:
        fp["device"], fp["device_count"] = _device(local_rank)
    except Exception as exc:
        fp["device_error"] = str(exc)
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            fp["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            fp["backend"] = str(dist.get_backend())
    except Exception:
        pass
    fp["env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    fp["config_hash"] = config_hash()
    return fp
