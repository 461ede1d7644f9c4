"""Well-formed inputs for the hostile corpus to spoil: Kineto traces, TORCH_TRACE compile logs, run directories,
Flight Recorder dumps, pickles that would run code, compile-cache bundles and sparse files.

Every builder is deterministic given its ``random.Random`` and returns what the good data holds (kernels,
collectives, compiles per rank), so a case can check that the good part survived the bad part.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Nanoseconds since the epoch where the traces' clocks start (late 2026).
BASE_NS = 1_790_000_000_000_000_000
GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass(slots=True)
class TraceFacts:
    """What a built trace holds: compute kernels, collectives, steps (their numbers)."""

    compute: int
    collectives: int
    steps: list[int]


def kineto_trace(rank: int, world: int, rng: random.Random, *, steps: int = 3, gemms: int = 3,
                 first_step: int = 1, t0_us: float = 1_000.0) -> tuple[dict[str, Any], TraceFacts]:
    """A small GPU Kineto trace of ``rank``: per step a ``ProfilerStep#N`` annotation, ``gemms`` matmuls each
    launched by ``cudaLaunchKernel``, and one NCCL all-reduce (``record_param_comms`` + its kernel)."""
    pid, tid = 1000 + rank, 1000 + rank
    ev: list[dict[str, Any]] = []
    ext = corr = 1
    t = t0_us
    for s in range(first_step, first_step + steps):
        step_start = t
        for _ in range(gemms):
            dur = round(rng.uniform(20, 80), 3)
            ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid, "ts": t, "dur": 30.0,
                       "args": {"External id": ext, "Record function id": 0}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": t + 5, "dur": 8.0, "args": {"External id": ext, "cbid": 211, "correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": t + 20, "dur": dur,
                       "args": {"External id": ext, "device": 0, "stream": 7, "correlation": corr,
                                "grid": [132, 1, 1], "block": [384, 1, 1]}})
            ext, corr, t = ext + 1, corr + 1, t + 40 + dur
        nelems = rng.choice([1 << 20, 4 << 20, 3151360])
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": t,
                   "dur": 60.0, "args": {"External id": ext, "Record function id": 0, "Collective name": "allreduce",
                                         "dtype": "Float", "In msg nelems": nelems, "Out msg nelems": nelems,
                                         "Group size": world, "Process Group Name": "0",
                                         "Process Group Description": "default_pg",
                                         "Process Group Ranks": str(list(range(min(world, 8))))}})
        ev.append({"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": pid, "tid": tid,
                   "ts": t + 2, "dur": 50.0, "args": {"External id": ext + 1}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                   "ts": t + 10, "dur": 9.0, "args": {"External id": ext, "cbid": 211, "correlation": corr}})
        cdur = round(rng.uniform(100, 400), 3)
        ev.append({"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": 20, "ts": t + 30, "dur": cdur,
                   "args": {"External id": ext, "device": 0, "stream": 20, "correlation": corr}})
        ext, corr, t = ext + 2, corr + 1, t + 60 + cdur
        ev.insert(len(ev) - 4 * gemms - 4, {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}",
                                             "pid": pid, "tid": tid, "ts": step_start - 1,
                                             "dur": round(t - step_start + 1, 3)})
        t += 20
    ev.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}})
    ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "python3"}})
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045379072,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "nccl_version": "2.27.3"},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": ev,
    }
    return doc, TraceFacts(steps * gemms, steps, list(range(first_step, first_step + steps)))


def events_of(doc: dict[str, Any], cat: str, name_part: str = "") -> list[dict[str, Any]]:
    """The events of ``doc`` in category ``cat`` whose name contains ``name_part``."""
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and name_part in str(e.get("name", ""))]


def launch_of(doc: dict[str, Any], kernel: dict[str, Any]) -> dict[str, Any]:
    """The ``cudaLaunchKernel`` of ``kernel`` (same correlation id)."""
    corr = kernel["args"]["correlation"]
    return next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                and e.get("args", {}).get("correlation") == corr)


def write_json(path: Path, obj: Any, *, gz: bool = False) -> Path:
    """``obj`` as JSON at ``path`` (gzip-compressed when ``gz``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def sparse_file(path: Path, size: int, head: bytes = b"") -> Path:
    """A file of ``size`` bytes that takes no disk: ``head`` then a hole of zeros."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def deep_json(depth: int, leaf: Any = 1) -> str:
    """``{"a": {"a": ... leaf ...}}`` nested ``depth`` times, as text (built without recursion)."""
    return '{"a": ' * depth + json.dumps(leaf) + "}" * depth


# --------------------------------------------------------------------------------------------- compile logs
def _glog(rng: random.Random, pid: int, where: str, obj: dict[str, Any], payload: str | None = None) -> str:
    hh, mm, ss = 10, rng.randrange(3), rng.randrange(60)   # one job: every rank's lines within minutes
    head = f"V1129 {hh:02d}:{mm:02d}:{ss:02d}.{rng.randrange(10**6):06d} {pid} {where}] "
    if payload is None:
        return head + json.dumps(obj) + "\n"
    obj = {**obj, "has_payload": "%032x" % rng.getrandbits(128)}
    return head + json.dumps(obj) + "\n" + "".join(f"\t{ln}\n" for ln in payload.split("\n"))


def compile_log(rank: int, frames: int, rng: random.Random, *, co_name: str = "forward",
                fail_reason: str | None = None) -> tuple[str, int]:
    """A TORCH_TRACE log of ``rank`` with ``frames`` frame compiles (dynamo_start + metrics each); returns the text
    and the number of compiles."""
    pid = 4000 + rank
    out = [_glog(rng, pid, "torch/_logging/structured.py:28", {"str": ["/work/train.py", 1]})]
    t = 1_795_950_006.25
    for f in range(frames):
        ctx = {"rank": rank, "frame_id": f, "frame_compile_id": 0, "attempt": 0}
        stack = [{"line": 35 + f, "name": co_name, "filename": 1, "loc": "loss = model(x).sum()"}]
        out.append(_glog(rng, pid, "torch/_dynamo/convert_frame.py:303", {"dynamo_start": {"stack": stack}, **ctx}))
        dur = round(rng.uniform(0.2, 3.0), 6)
        metrics = {"compile_id": f"{f}/0", "frame_key": str(f + 1), "co_name": co_name,
                   "co_filename": "/work/train.py", "co_firstlineno": 30 + f, "cache_size": 0,
                   "accumulated_cache_size": 0, "guard_count": 12, "graph_op_count": 3, "graph_node_count": 9,
                   "graph_input_count": 5, "start_time": t, "entire_frame_compile_time_s": dur,
                   "backend_compile_time_s": round(dur * 0.7, 6), "inductor_compile_time_s": None,
                   "code_gen_time_s": None, "fail_type": None, "fail_reason": fail_reason,
                   "restart_reasons": [], "dynamo_time_before_restart_s": 0.0, "has_guarded_code": True}
        out.append(_glog(rng, pid, "torch/_dynamo/utils.py:2009", {"compilation_metrics": metrics, **ctx}))
        t += dur + 0.01
    return "".join(out), frames


def compile_log_name(rank: int, rng: random.Random) -> str:
    """A name as torch gives a rank's TORCH_TRACE log."""
    tail = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(8))
    return f"dedicated_log_torch_trace_rank_{rank}_{tail}.log"


# --------------------------------------------------------------------------------------------- run directories
def run_dir(root: Path, ranks: list[int], rng: random.Random, *, steps: int = 6, world: int | None = None,
            compile_frames: int = 2, traced: bool = True) -> dict[int, TraceFacts]:
    """A run directory as the collectors write it: ``run.json``, per rank ``fingerprint.json``, ``steps.jsonl``,
    a trace of the profiled steps and a compile log. Returns each rank's trace facts."""
    world = world if world is not None else len(ranks)
    write_json(root / "run.json", {"run_id": "%032x" % rng.getrandbits(128), "world_size": world,
                                   "argv": ["train.py"], "collector_version": "0.1.0",
                                   "profile_windows": [[2, 3]], "compile_config": None})
    facts: dict[int, TraceFacts] = {}
    for r in ranks:
        rd = root / f"rank{r}"
        write_json(rd / "fingerprint.json", {"rank": r, "world_size": world, "hostname": f"node{r // 8}",
                                             "torch": "2.13.0", "python": "3.11.9", "env": {}})
        t = BASE_NS + 10**9
        lines = []
        for s in range(steps):
            d = rng.randrange(40, 60) * 10**6
            lines.append(json.dumps({"step": s, "start_ns": t, "end_ns": t + d, "profiled": s in (2, 3)}))
            t += d + 1000
        (rd / "steps.jsonl").write_text("\n".join(lines) + "\n")
        if traced:
            doc, facts[r] = kineto_trace(r, world, rng, steps=2, first_step=2)
            write_json(rd / "trace" / f"rank{r}.steps2-3.pt.trace.json.gz", doc, gz=True)
        if compile_frames:
            text, _ = compile_log(r, compile_frames, rng)
            (rd / "compile").mkdir(parents=True, exist_ok=True)
            (rd / "compile" / compile_log_name(r, rng)).write_text(text)
    return facts


# --------------------------------------------------------------------------------------------- Flight Recorder
def fr_entry(rank: int, seq: int, rng: random.Random, *, op: str = "all_reduce", pg: str = "0",
             state: str = "completed") -> dict[str, Any]:
    """One Flight Recorder entry as torch writes it (version 2.x)."""
    n = rng.choice([1024, 4096, 1 << 20])
    t = BASE_NS + seq * 10**7 + rank * 1000
    return {
        "record_id": seq, "pg_id": 0, "process_group": [pg, "default_pg"], "collective_seq_id": seq,
        "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"nccl:{op}", "time_created_ns": t,
        "input_sizes": [[n]], "input_dtypes": ["Float"], "output_sizes": [[n]], "output_dtypes": ["Float"],
        "state": state, "time_discovered_started_ns": t + 1000 if state != "scheduled" else None,
        "time_discovered_completed_ns": t + 5000 if state == "completed" else None, "retired": state == "completed",
        "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "/work/train.py", "line": 88 + seq % 3},
                   {"name": "all_reduce", "filename": "/usr/lib/python3/site-packages/torch/distributed/c10d.py",
                    "line": 2800}],
    }


def fr_dump(rank: int, entries: int, rng: random.Random, *, last_state: str = "completed") -> dict[str, Any]:
    """A Flight Recorder dump of ``rank`` with ``entries`` all-reduces, the last in ``last_state``."""
    ents = [fr_entry(rank, i, rng, state="completed" if i < entries - 1 else last_state) for i in range(entries)]
    return {"version": "2.4", "comm_lib_version": "2.27.3", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                                                  "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": entries - 1, "last_started_collective": entries - 1,
                                "last_completed_collective": entries - (1 if last_state != "completed" else 0) - 1}},
            "entries": ents}


class Call:
    """``module.name(*args)``: the payload of a malicious pickle (written by :func:`pickle_bytes`)."""

    def __init__(self, module: str, name: str, args: tuple) -> None:
        self.module, self.name, self.args = module, name, args


def pickle_bytes(obj: Any, protocol: int) -> bytes:
    """``obj`` (dicts, lists, tuples, str, int, None and :class:`Call`) as pickle opcodes of ``protocol``, written
    by hand so a :class:`Call` becomes a global and a ``REDUCE`` as an attacker writes it."""
    def enc(o: Any) -> bytes:
        if isinstance(o, Call):
            if protocol >= 4:
                g = _short(o.module) + _short(o.name) + b"\x93"          # STACK_GLOBAL
            else:
                g = b"c" + o.module.encode() + b"\n" + o.name.encode() + b"\n"   # GLOBAL
            return g + enc(o.args) + b"R"
        if isinstance(o, str):
            if protocol == 0:
                return b"V" + o.encode("raw_unicode_escape") + b"\n"
            raw = o.encode()
            return b"X" + len(raw).to_bytes(4, "little") + raw
        if isinstance(o, bool) or o is None:
            return {True: b"I01\n", False: b"I00\n", None: b"N"}[o]
        if isinstance(o, int):
            return b"I%d\n" % o
        if isinstance(o, tuple):
            return b"(" + b"".join(enc(x) for x in o) + b"t"
        if isinstance(o, list):
            return b"(" + b"".join(enc(x) for x in o) + b"l"
        if isinstance(o, dict):
            return b"(" + b"".join(enc(k) + enc(v) for k, v in o.items()) + b"d"
        raise TypeError(type(o))

    head = b"\x80" + bytes([protocol]) if protocol >= 2 else b""
    return head + enc(obj) + b"."


DOORS = ("os.system", "posix.system", "subprocess.call", "builtins.exec", "builtins.eval", "builtins.open",
         "shutil.copyfile", "subprocess.Popen")


def evil_call(door: str, marker: Path) -> Call:
    """A call through ``door`` (one of :data:`DOORS`) that creates ``marker``."""
    m = str(marker)
    mod, name = door.rsplit(".", 1)
    args: tuple = {
        "os.system": (f"touch '{m}'",), "posix.system": (f"touch '{m}'",),
        "subprocess.call": (["touch", m],), "subprocess.Popen": (["touch", m],),
        "builtins.exec": (f"open({m!r}, 'w').close()",), "builtins.eval": (f"open({m!r}, 'w')",),
        "builtins.open": (m, "w"), "shutil.copyfile": ("/etc/hostname", m),
    }[door]
    return Call(mod, name, args)


def evil_dump(door: str, marker: Path, protocol: int, rank: int, rng: random.Random, *,
              where: str = "entry") -> bytes:
    """A Flight Recorder dump of ``rank`` that creates ``marker`` when plain :mod:`pickle` reads it: the call is
    the whole pickle (``where="top"``), or hidden in an entry (``"entry"``) or in ``pg_config`` (``"pg"``)."""
    call = evil_call(door, marker)
    if where == "top":
        return pickle_bytes(call, protocol)
    dump = fr_dump(rank, 2, rng)
    if where == "entry":
        dump["entries"][1]["frames"] = [call]
    else:
        dump["pg_config"]["0"]["desc"] = call
    return pickle_bytes(dump, protocol)


def shared_reference_bomb(levels: int, width: int, protocol: int = 4) -> bytes:
    """A dump whose entries expand to ``width ** levels`` leaves through shared references (tiny on disk)."""
    x: Any = [{"a": 1}]
    for _ in range(levels):
        x = [x] * width
    obj = {"version": "2.4", "pg_config": {}, "pg_status": {},
           "entries": [{"profiling_name": "nccl:all_reduce", "collective_seq_id": 0, "frames": x,
                        "input_sizes": x, "state": "completed"}]}
    return pickle.dumps(obj, protocol=protocol)


def shared_list_dump(entries: int, list_len: int, protocol: int = 4) -> bytes:
    """``entries`` Flight Recorder entries all holding the same ``list_len``-frame stack list."""
    frames = [{"name": f"f{i}", "filename": "/work/train.py", "line": i} for i in range(list_len)]
    sizes = [[1024]] * 4
    ents = [{"record_id": i, "process_group": ["0", "default_pg"], "collective_seq_id": i,
             "profiling_name": "nccl:all_reduce", "time_created_ns": BASE_NS + i, "state": "completed",
             "input_sizes": sizes, "output_sizes": sizes, "frames": frames} for i in range(entries)]
    return pickle.dumps({"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": ents}, protocol=protocol)


def deep_pickle(depth: int, key: str = "input_sizes") -> bytes:
    """A dump with one entry whose ``key`` nests ``depth`` lists deep, written opcode by opcode (the writer needs no
    recursion; plain ``pickle.loads`` reads it without recursing either)."""
    lists = b"]" * depth + b"a" * (depth - 1)   # EMPTY_LIST x depth, then APPEND each into the one below
    return (b"\x80\x04}(" + _short("version") + _short("2.4") + _short("pg_config") + b"}" + _short("pg_status")
            + b"}" + _short("entries") + b"]}" + _short("profiling_name") + _short("nccl:all_reduce") + b"s"
            + _short(key) + lists + b"sau.")


def _short(s: str) -> bytes:
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b  # SHORT_BINUNICODE


def cache_bundle(artifacts: list[tuple[str, str, bytes]]) -> bytes:
    """A ``torch.compiler.save_cache_artifacts`` bundle of (kind, key, content): a CRC-32 of the rest, the format
    version (1), then per kind its name, count, and each artifact's key and bytes (lengths as big-endian u64,
    strings base64)."""
    import base64
    import zlib

    def u64(i: int) -> bytes:
        return i.to_bytes(8, "big")

    def string(s: str) -> bytes:
        b = base64.b64encode(s.encode())
        return u64(len(b)) + b

    out = u64(1)
    by_kind: dict[str, list[tuple[str, bytes]]] = {}
    for kind, key, content in artifacts:
        by_kind.setdefault(kind, []).append((key, content))
    for kind, items in by_kind.items():
        out += string(kind) + u64(len(items))
        for key, content in items:
            out += string(key) + u64(len(content)) + content
    return zlib.crc32(out).to_bytes(4, "big") + out


def planted_program(path: Path, marker: Path) -> Path:
    """An executable shell script at ``path`` that creates ``marker`` (a planted compiler or tool)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    os.chmod(path, 0o755)
    return path
