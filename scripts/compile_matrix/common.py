"""What every compile-matrix scenario shares: the step marker, an in-process record of the compile events, timing
of each call, and the ``expected.json`` a scenario writes of what it knows.

A scenario runs under ``TORCH_TRACE=<dir>`` (set by ``run_matrix.py`` before Python starts) with
``MATRIX_OUT=<dir>`` naming where its expectations go. It marks each loop index with :meth:`Recorder.steps`, times
its calls with :meth:`Recorder.timed`, and declares the events it causes with :meth:`Recorder.expect` (class,
cause, the ``# CAUSE:<tag>`` line of its own source). The recorder also listens to torch's structured-log logger
in the process, so ``expected.json`` holds what torch reported in-process (compile ids, fail types, cache
artifacts) beside what the script declared, both tied to the step they happened in.

Costs: the extra wall time of the step an event happened in over the median step with no compile event
(``cost_ns``), and for frames that run eagerly the median time of those eager steps (``eager_step_ns``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import torch
import torch._dynamo

OUT = Path(os.environ.get("MATRIX_OUT", "."))
SCRIPT = Path(sys.argv[0]).resolve()
VERSION = torch.__version__.split("+")[0]
V = tuple(int(p) for p in re.findall(r"\d+", VERSION)[:2])  # (2, 11)

#: new config name → the name older torch uses
_OLD_NAMES = {
    "recompile_limit": "cache_size_limit",
    "accumulated_recompile_limit": "accumulated_cache_size_limit",
    "skip_code_recursive_on_recompile_limit_hit": "skip_code_recursive_on_cache_limit_hit",
}
_CACHE_ARTIFACTS = ("fx_graph_cache_hit", "fx_graph_cache_miss", "fx_graph_cache_bypass",
                    "aotautograd_cache_hit", "aotautograd_cache_miss", "aotautograd_cache_bypass")


def dynamo_key(name: str) -> str:
    """The name this torch's ``torch._dynamo.config`` has for ``name`` (``recompile_limit`` → ``cache_size_limit``)."""
    keys = torch._dynamo.config.get_config_copy().keys()
    if name in keys:
        return name
    old = _OLD_NAMES.get(name)
    if old in keys:
        return old
    raise KeyError(f"torch {VERSION} has no torch._dynamo.config.{name}")


def set_dynamo(name: str, value: Any) -> str:
    """Set a dynamo config key under its name on this torch; returns the name used."""
    key = dynamo_key(name)
    setattr(torch._dynamo.config, key, value)
    return key


def cause_line(tag: str, script: Path = SCRIPT) -> int:
    """Line number of the ``# CAUSE:<tag>`` comment in the scenario's source."""
    for i, text in enumerate(script.read_text().splitlines(), 1):
        if re.search(rf"#\s*CAUSE:{re.escape(tag)}\b", text):
            return i
    raise KeyError(f"no '# CAUSE:{tag}' in {script.name}")


def _rank() -> int | None:
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


class _TraceHandler(logging.Handler):
    """Receives every structured-log record (the TORCH_TRACE stream) inside the process."""

    def __init__(self, rec: "Recorder") -> None:
        super().__init__(logging.DEBUG)
        self.rec = rec

    def emit(self, record: logging.LogRecord) -> None:
        md = getattr(record, "metadata", None)
        if isinstance(md, dict):
            try:
                self.rec._on_structured(md)
            except Exception as exc:  # the record must never break the run it records
                self.rec.notes.append(f"record handler: {type(exc).__name__}: {exc}")


def _cid(md: dict[str, Any]) -> str | None:
    if md.get("frame_id") is None:
        return None
    s = f"{md['frame_id']}/{md.get('frame_compile_id')}"
    if md.get("attempt"):
        s += f"_{md['attempt']}"
    if md.get("compiled_autograd_id") is not None:
        s = f"!{md['compiled_autograd_id']}/{s}"
    return s


class Recorder:
    """One scenario run: steps, calls, torch's in-process compile events and the script's declared events."""

    def __init__(self, cls: str, backend: str | None = None, **info: Any) -> None:
        self.cls = cls
        self.backend = backend
        self.info: dict[str, Any] = dict(info)
        self.step = -1
        self.generation = 0
        self.call_ns: dict[int, int] = {}
        self.compiles: list[dict[str, Any]] = []   # one per compilation_metrics, in order
        self.bwd_compiles: list[dict[str, Any]] = []
        self.artifacts: dict[str, list[dict[str, Any]]] = {}
        self.starts = 0
        self.expected: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.context_hook = False
        hook = getattr(torch._dynamo.utils, "register_hook_for_recompile_user_context", None)
        if hook is not None:
            hook(lambda: f"step={self.step}")
            self.context_hook = True
        from torch._logging._internal import trace_log
        trace_log.addHandler(_TraceHandler(self))

    # --- what torch reports in-process
    def _on_structured(self, md: dict[str, Any]) -> None:
        if "compilation_metrics" in md or "bwd_compilation_metrics" in md:
            key = "compilation_metrics" if "compilation_metrics" in md else "bwd_compilation_metrics"
            m = md[key] or {}
            reason = m.get("fail_reason")
            row = {
                "compile_id": m.get("compile_id") or _cid(md), "step": self.step, "generation": self.generation,
                "co_name": m.get("co_name"), "fail_type": m.get("fail_type"),
                "fail_reason_head": str(reason).strip().splitlines()[0][:300] if reason else None,
                "fail_user_frame": (f"{Path(m['fail_user_frame_filename']).name}:{m.get('fail_user_frame_lineno')}"
                                    if m.get("fail_user_frame_filename") else None),
                "recompile_reason": (str(m["recompile_reason"])[:300] if m.get("recompile_reason") else None),
                "restart_reasons": [str(r)[:200] for r in (m.get("restart_reasons") or [])],
                "graph_breaks": m.get("num_graph_breaks"),
                "entire_frame_compile_time_s": m.get("entire_frame_compile_time_s"),
            }
            (self.compiles if key == "compilation_metrics" else self.bwd_compiles).append(row)
        elif "dynamo_start" in md:
            self.starts += 1
        elif "optimize_ddp_split_child" in md or "optimize_ddp_split_graph" in md:
            key = "optimize_ddp_split_child" if "optimize_ddp_split_child" in md else "optimize_ddp_split_graph"
            self.artifacts.setdefault(key, []).append({"compile_id": _cid(md), "step": self.step})
        elif "artifact" in md and isinstance(md["artifact"], dict):
            name = md["artifact"].get("name")
            if name in _CACHE_ARTIFACTS or name in ("recompile_reasons", "dynamo_graph_break_reason"):
                self.artifacts.setdefault(name, []).append({"compile_id": _cid(md), "step": self.step})

    # --- the script's loop
    def steps(self, n: int) -> Iterator[int]:
        """Yield 0..n-1, marking each as the current step (the recompile user context says ``step=N``)."""
        start = self.step + 1
        for s in range(start, start + n):
            self.step = s
            yield s

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Add the wall time of the ``with`` body to the current step (the call stays on the scenario's own line,
        so the compile's user stack names the scenario, not this file)."""
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            self.call_ns[self.step] = self.call_ns.get(self.step, 0) + time.perf_counter_ns() - t0

    def reset(self) -> None:
        """``torch._dynamo.reset()``: a new generation of compile ids starts."""
        torch._dynamo.reset()
        self.generation += 1

    def expect(self, kind: str, tag: str | None = None, **fields: Any) -> None:
        """Declare an event the script caused in the current step (``tag`` names its ``# CAUSE:`` line)."""
        ev = {"kind": kind, "step": self.step, "rank": _rank(), **fields}
        if tag is not None:
            ev["file"], ev["line"] = SCRIPT.name, cause_line(tag)
        self.expected.append(ev)

    # --- output
    def _baseline(self) -> int | None:
        busy = {c["step"] for c in self.compiles + self.bwd_compiles} | {e["step"] for e in self.expected}
        quiet = [ns for s, ns in self.call_ns.items() if s not in busy]
        return int(statistics.median(quiet)) if quiet else None

    def observed_counts(self) -> dict[str, Any]:
        """What torch reported in-process, counted: frame compiles (failed ones apart), graph-break and
        recompile-reason reports, cache artifacts."""
        arts = {k: len(v) for k, v in self.artifacts.items()}
        return {
            "compiles": len(self.compiles),
            "failed_compiles": sum(1 for c in self.compiles if c["fail_type"]),
            "bwd_compiles": len(self.bwd_compiles),
            "graph_break_reports": arts.get("dynamo_graph_break_reason", 0),
            "recompile_reason_reports": arts.get("recompile_reasons", 0),
            "cache": {k: v for k, v in arts.items() if "cache" in k},
            "ddp_split_graphs": arts.get("optimize_ddp_split_graph", 0),
            "ddp_split_children": arts.get("optimize_ddp_split_child", 0),
        }

    def finish(self, counts: dict[str, Any], eager_steps: list[int] | None = None, **extra: Any) -> None:
        """Write ``expected.json`` (``expected_rank<N>.json`` under torch.distributed) and return."""
        base = self._baseline()
        for ev in self.expected:
            ns = self.call_ns.get(ev["step"])
            ev["step_ns"] = ns
            ev["cost_ns"] = None if ns is None or base is None else ns - base
        out: dict[str, Any] = {
            "class": self.cls, "torch_version": torch.__version__, "supported": True,
            "script": f"scripts/compile_matrix/scenarios/{SCRIPT.name}", "backend": self.backend,
            "step_marker": "recompile_user_context" if self.context_hook else "none (hook not in this torch)",
            "rank": _rank(), "counts": counts, "observed_counts": self.observed_counts(), "events": self.expected,
            "baseline_step_ns": base, "step_ns": {str(k): v for k, v in sorted(self.call_ns.items())},
            "observed": {"compiles": self.compiles, "bwd_compiles": self.bwd_compiles,
                         "dynamo_starts": self.starts,
                         "artifacts": {k: len(v) for k, v in sorted(self.artifacts.items())},
                         "artifact_steps": self.artifacts},
            "notes": self.notes, **self.info, **extra,
        }
        if eager_steps:
            eager = [self.call_ns[s] for s in eager_steps if s in self.call_ns]
            out["eager_step_ns"] = int(statistics.median(eager)) if eager else None
            out["eager_steps"] = eager_steps
        write(out)


def write(out: dict[str, Any]) -> None:
    r = out.get("rank")
    name = "expected.json" if r is None else f"expected_rank{r}.json"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps(out, indent=1, default=str) + "\n")


def unsupported(cls: str, why: str, rank: int | None = None) -> None:
    """Record that this class does not exist on this torch, and exit."""
    write({"class": cls, "torch_version": torch.__version__, "supported": False, "why": why, "rank": rank,
           "script": f"scripts/compile_matrix/scenarios/{SCRIPT.name}"})
    sys.exit(0)


def compiled_count(rec: Recorder, *, failed: bool | None = None) -> int:
    """How many frame compiles torch reported in-process (only failed / only clean ones when asked)."""
    rows = rec.compiles
    if failed is not None:
        rows = [c for c in rows if bool(c["fail_type"]) == failed]
    return len(rows)


def init_distributed() -> tuple[int, int]:
    """gloo process group from RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, before any compile (so the trace file
    is named with the rank)."""
    import torch.distributed as dist
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()
