"""Record the compile-log matrix for one torch: run every scenario under TORCH_TRACE with that torch's Python and
store the log(s), the scenario's expected.json and its console output under
``tests/data/compile_logs/matrix/<torch version>/<class>/``.

    python scripts/compile_matrix/run_matrix.py --python /tmp/tv/t2.11.0/bin/python [--only gb_loop rc_shape]

Each run gets its own empty TORCH_TRACE folder and its own inductor cache folder (so neither compile caches nor
profile-guided dynamic shapes leak between scenarios), OMP_NUM_THREADS=1 and no visible GPU. Distributed scenarios
run as 2 processes with a gloo process group (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCENARIOS = HERE / "scenarios"
DEFAULT_OUT = REPO / "tests" / "data" / "compile_logs" / "matrix"
DISTRIBUTED = {"ddp_split": 2, "ddp_outer": 2, "fsdp2": 2, "fsdp2_root": 2, "divergent_2rank": 2}
HELPERS = {"cache_common"}
MAX_CONSOLE = 20_000


def classes() -> list[str]:
    return sorted(p.stem for p in SCENARIOS.glob("*.py") if p.stem not in HELPERS)


def torch_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True,
                         check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return out.stdout.strip().split("+")[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(python: str, cls: str, dest: Path, timeout: int) -> dict:
    """Run one scenario; fill ``dest`` with its logs, expected.json and console.txt; return a summary."""
    world = DISTRIBUTED.get(cls, 1)
    with tempfile.TemporaryDirectory(prefix=f"cm_{cls}_") as tmp:
        tmp_p = Path(tmp)
        trace, exp, cache = tmp_p / "trace", tmp_p / "expected", tmp_p / "cache"
        for d in (trace, exp, cache):
            d.mkdir()
        env = {**os.environ, "TORCH_TRACE": str(trace), "MATRIX_OUT": str(exp),
               "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
               "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONHASHSEED": "0",
               "PYTHONUNBUFFERED": "1"}
        for k in ("TORCH_COMPILE_DYNAMIC_SOURCES", "TORCH_LOGS", "TORCHDYNAMO_VERBOSE"):
            env.pop(k, None)
        port = free_port()
        t0 = time.time()
        procs = []
        for r in range(world):
            penv = dict(env)
            if world > 1:
                penv.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=str(port))
            procs.append(subprocess.Popen([python, str(SCENARIOS / f"{cls}.py")], env=penv, cwd=str(REPO),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        console, rcs = [], []
        for r, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                out += f"\n[run_matrix] killed after {timeout} s\n"
            rcs.append(p.returncode)
            console.append((f"===== rank {r} (exit {p.returncode}) =====\n" if world > 1 else
                            f"===== exit {p.returncode} =====\n") + out)
        elapsed = time.time() - t0
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        logs = sorted(trace.glob("*.log"))
        for log in logs:
            shutil.copy2(log, dest / log.name)
        text = "\n".join(console)
        if len(text) > MAX_CONSOLE:
            text = text[:MAX_CONSOLE // 2] + "\n[... cut ...]\n" + text[-MAX_CONSOLE // 2:]
        (dest / "console.txt").write_text(text)
        parts = {}
        for f in sorted(exp.glob("expected*.json")):
            d = json.loads(f.read_text())
            parts[str(d.get("rank") if d.get("rank") is not None else 0)] = d
        merged = merge(cls, parts, rcs, world)
        (dest / "expected.json").write_text(json.dumps(merged, indent=1) + "\n")
        return {"class": cls, "exit": rcs, "logs": [(p.name, p.stat().st_size) for p in logs],
                "supported": merged["supported"], "seconds": round(elapsed, 1)}


def merge(cls: str, parts: dict, rcs: list[int], world: int) -> dict:
    """One expected.json for the class: what is common once, each rank's record under ``ranks``."""
    if not parts:
        return {"class": cls, "supported": False, "why": f"the scenario wrote no expectations (exit {rcs})",
                "world_size": world, "ranks": {}}
    first = next(iter(parts.values()))
    supported = all(p.get("supported", True) for p in parts.values())
    out = {"class": cls, "torch_version": first.get("torch_version"), "supported": supported,
           "script": first.get("script"), "world_size": world, "exit_codes": rcs}
    if not supported:
        out["why"] = next(p["why"] for p in parts.values() if not p.get("supported", True))
    out["ranks"] = {r: {k: v for k, v in p.items() if k not in ("class", "torch_version", "script", "supported")}
                    for r, p in parts.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="the Python of the venv whose torch records")
    ap.add_argument("--only", nargs="*", help="classes to record (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--timeout", type=int, default=1200)
    a = ap.parse_args()
    version = torch_version(a.python)
    todo = a.only or classes()
    for cls in todo:
        res = run_one(a.python, cls, a.out / version / cls, a.timeout)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
