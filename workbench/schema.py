"""Table schemas: every table the workbench builds, declared once.

All tables are polars frames with every rank stacked and a ``rank`` column. Times are int64
nanoseconds on the absolute wall clock (``baseTimeNanoseconds + ts``); durations are int64 ns.

Bump :data:`SCHEMA_VERSION` whenever a schema below changes: cached parquet tables written
with another version are rebuilt.

Example:
    >>> from workbench.schema import EVENTS, empty
    >>> empty(EVENTS).columns[:3]
    ['rank', 'kind', 'cat']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import polars as pl

SCHEMA_VERSION = 6

KernelClass = Literal["compute", "communication", "memcpy", "memset", "sync"]
KERNEL_CLASSES: tuple[str, ...] = get_args(KernelClass)

EventKind = Literal[
    "kernel", "memcpy", "memset", "gpu_annotation", "cpu_op", "annotation", "runtime",
    "driver", "python", "instant", "trace", "other",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
#: Event kinds that run on a device (GPU) and so belong to the ``kernels`` table.
DEVICE_KINDS: tuple[str, ...] = ("kernel", "memcpy", "memset")
#: Event kinds on a device's timeline: its work and the user's ranges drawn there (``gpu_user_annotation``).
DEVICE_TIMELINE_KINDS: tuple[str, ...] = (*DEVICE_KINDS, "gpu_annotation")

KernelClassType = pl.Enum(list(KERNEL_CLASSES))
EventKindType = pl.Enum(list(EVENT_KINDS))

#: Every Kineto event that has a time (complete ``X`` and instant ``i`` events).
EVENTS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "kind": EventKindType,          # normalised from ``cat``
    "cat": pl.Categorical(),        # Kineto category as written
    "name": pl.Categorical(),
    "start": pl.Int64,              # ns, absolute
    "end": pl.Int64,                # ns, absolute (== start for instants)
    "dur": pl.Int64,                # ns
    "pid": pl.Int64,                # process id, or device index for GPU rows (null when not an int)
    "tid": pl.Int64,                # thread id, or stream for GPU rows (null when not an int)
    "device": pl.Int32,             # GPU index for device events
    "stream": pl.Int64,             # GPU stream for device events
    "correlation": pl.Int64,        # launch <-> kernel link
    "external_id": pl.Int64,        # cpu op <-> kernel link (``External id``)
    "step": pl.Int32,               # ProfilerStep#N the event belongs to (device events: their launch's step)
    "kernel_class": KernelClassType,  # device events only
}

#: Device activity (kernels, memcpy, memset) with the launch that queued it.
KERNELS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "kind": EventKindType,
    "name": pl.Categorical(),
    "kernel_class": KernelClassType,
    "start": pl.Int64,
    "end": pl.Int64,
    "dur": pl.Int64,
    "device": pl.Int32,
    "stream": pl.Int64,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "step": pl.Int32,
    "launch_start": pl.Int64,       # start of the cuda_runtime/cuda_driver launch with the same correlation
    "launch_end": pl.Int64,
    "launch_tid": pl.Int64,
}

#: One row per collective call on a rank (NCCL via ``record_param_comms``, gloo via ``gloo:*``).
COLLECTIVES: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "backend": pl.Categorical(),    # nccl, gloo, rccl, ...
    "pg_name": pl.String,           # process group name ("0", ...)
    "pg_desc": pl.String,           # "default_pg", ...
    "pg_ranks": pl.String,          # "[0, 1]" as Kineto writes it
    "group_size": pl.Int32,
    "seq": pl.Int64,                # order of this call within its process group on this rank, from 0
    "collective": pl.Categorical(),  # allreduce, allgather, reduce_scatter, send, recv, broadcast, barrier, ...
    "dtype": pl.String,
    "in_elems": pl.Int64,
    "out_elems": pl.Int64,
    "bytes": pl.Int64,              # max(in, out) elements times the dtype size
    "start": pl.Int64,              # host call (record_param_comms / c10d op) start
    "end": pl.Int64,
    "kernel_name": pl.String,
    "kernel_start": pl.Int64,       # device (or gloo thread) execution start; null if none was traced
    "kernel_end": pl.Int64,
    "external_id": pl.Int64,
    "step": pl.Int32,
}

#: Training steps: from ``ProfilerStep#N`` ranges and from the collectors' ``steps.jsonl``.
STEPS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "source": pl.Categorical(),     # "profiler" or "collector"
    "start": pl.Int64,
    "end": pl.Int64,
    "dur": pl.Int64,
    "device_ns": pl.Int64,          # device time of the step (collector on CUDA), else null
    "data_wait_ns": pl.Int64,       # time spent waiting for the batch (collector), else null
    "profiled": pl.Boolean,         # inside a profiler window
}

#: One row per rank: where it came from and what it ran on.
RANKS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "world_size": pl.Int32,
    "rank_source": pl.String,       # distributedInfo, file name, --rank, run directory
    "backend": pl.String,
    "host": pl.String,
    "device_name": pl.String,
    "device_count": pl.Int32,
    "torch_version": pl.String,
    "nccl_version": pl.String,
    "base_time_ns": pl.Int64,       # baseTimeNanoseconds, null for old traces
    "clock": pl.String,             # "absolute" or "relative" (no base: ts origin unknown)
    "trace_files": pl.List(pl.String),
    "events": pl.Int64,
    "skipped": pl.Int64,
}

#: Events that were read but not kept as rows, counted per reason.
SKIPPED: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "file": pl.String,
    "reason": pl.String,
    "count": pl.Int64,
}

#: torch.compile events from TORCH_TRACE structured logs; one row per frame compile (``attempt`` = last attempt).
#: A compile id that comes back in one log (several compilations under one id) gives one row each, numbered by
#: ``sequence``: a compilation is (rank, log_file, compile_id, sequence).
COMPILES: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "compile_id": pl.String,        # "0/1" or "0/0_1" (attempt 1), as tlparse writes it
    "frame_id": pl.Int32,
    "frame_compile_id": pl.Int32,
    "attempt": pl.Int32,
    "sequence": pl.Int32,           # 0 for the first compilation under this compile id in its log, then 1, 2, ...
    "compiled_autograd_id": pl.Int32,
    "co_name": pl.String,
    "co_filename": pl.String,
    "co_firstlineno": pl.Int32,
    "start": pl.Int64,              # ns, absolute wall clock
    "end": pl.Int64,
    "duration_ns": pl.Int64,        # null when the log does not say (never 0 for unknown)
    "entire_frame_compile_s": pl.Float64,
    "backend_compile_s": pl.Float64,
    "inductor_compile_s": pl.Float64,
    "bwd_compile_s": pl.Float64,    # backward graph compile (bwd_compilation_metrics), run at the first backward
    "status": pl.String,            # ok, graph_break, skipped_frame, eager_fallback (recompile limit hit), failed, incomplete
    "fail_type": pl.String,         # only for status failed / eager_fallback / skipped_frame (null for a graph break)
    "fail_reason": pl.String,       # only for status failed / eager_fallback / skipped_frame
    "fail_user_frame": pl.String,   # "file:line" of the user code that failed
    "skip_reason": pl.String,       # status skipped_frame: graph_break_in_loop, suppressed_error, no_reason_logged
    "generation": pl.Int32,         # dynamo resets before this compile in its log (0 = none)
    "break_reason": pl.String,      # status graph_break: first line of the first graph-break reason
    "graph_break_count": pl.Int32,  # graph breaks in this compile (0 unless status is graph_break)
    "recompile_reasons": pl.List(pl.String),
    "cause": pl.String,             # see analyses.recompiles.CAUSES: first, shape, stride, dtype, requires_grad, grad_mode, global_state, int_arg, float_arg, global, module, limit, graph_break, backend, ...
    "cause_detail": pl.String,      # sub-type: graph-break type (print, data_dependent_branch, item, ...), limit type, dim
    "cause_source": pl.String,      # e.g. "L['x'] dim 0: 4 -> 8"
    "graph_breaks": pl.List(pl.String),      # dynamo_graph_break_reason payloads
    "restart_reasons": pl.List(pl.String),   # compilation_metrics.restart_reasons
    "collective_schedule": pl.List(pl.String),  # inductor_collective_schedule (collective ops in order)
    "cache_hits": pl.Int32,
    "cache_misses": pl.Int32,
    "cache_bypasses": pl.Int32,     # aotautograd_cache_bypass artifacts (the AOTAutograd cache was not usable)
    "cache_bypass_reason": pl.String,
    "guard_count": pl.Int32,
    "step": pl.Int32,               # training step from the recompile user context (collectors: "step=N")
    "user_context": pl.String,      # recompile_user_contexts as written
    "config_hash": pl.String,       # sha256[:16] of the dynamo + inductor config the compile ran with
    "torch_version": pl.String,
    "log_file": pl.String,
}

#: One row per rank: the environment fingerprint the collectors wrote.
FINGERPRINTS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "host": pl.String,
    "local_rank": pl.Int32,
    "python": pl.String,
    "torch": pl.String,
    "triton": pl.String,
    "cuda": pl.String,
    "cudnn": pl.String,
    "nccl": pl.String,
    "device_name": pl.String,
    "config_hash": pl.String,
    "env": pl.String,               # JSON object of TORCH*/NCCL*/CUDA*/PYTORCH* variables
    "raw": pl.String,               # the whole fingerprint.json
}

#: Problems the analyses found (the polars view of ``analyses.findings.Finding``): root causes most costly first,
#: each followed by its symptoms (``cause_id`` = the root's ``id``).
FINDINGS: dict[str, pl.DataType] = {
    "kind": pl.String,              # e.g. "straggler", "exposed_communication", "divergent_recompile"
    "severity": pl.String,          # "high", "medium", "low", "info"
    "ranks": pl.List(pl.Int32),
    "steps": pl.List(pl.Int32),
    "cost_ns": pl.Int64,            # step time the problem costs over the analysed window (0 if unknown)
    "evidence": pl.String,          # JSON object of the numbers behind the finding
    "message": pl.String,           # one sentence for a person
    "source": pl.String,            # analysis that emitted it
    "id": pl.String,                # stable id: kind:r<ranks>:s<steps>[:key]
    "cost_basis": pl.String,        # "measured" (this run's own timings) or "estimated"
    "cost_method": pl.String,       # how the cost was obtained, e.g. "collective wait in the same step"
    "cause_id": pl.String,          # null for a root cause; the root's id for a symptom
    "is_root": pl.Boolean,
}

#: A compile of one code object made on some ranks only (``analyses.recompiles.divergent_compiles``).
DIVERGENT: dict[str, pl.DataType] = {
    "compile_id": pl.String,
    "co_name": pl.String,
    "location": pl.String,              # co_filename:co_firstlineno
    "ranks": pl.List(pl.Int32),         # ranks that compiled it
    "missing_ranks": pl.List(pl.Int32),  # ranks that did not
    "step": pl.Int32,                   # step of the compile on the compiling ranks (null when unknown)
    "start": pl.Int64,                  # earliest start among the compiling ranks
    "end": pl.Int64,
    "duration_ns": pl.Int64,            # longest compile among the compiling ranks (null when unknown)
    "cause": pl.String,
    "cause_detail": pl.String,
    "cause_source": pl.String,
    "nth": pl.Int32,                    # which compile of the code object (0 = first) on the compiling ranks
    "rank_compile_ids": pl.List(pl.String),  # each compiling rank's own compile id (in the order of ``ranks``)
}

#: DIVERGENT plus the wait each caused the other ranks (``analyses.recompiles.divergence_cost``).
DIVERGENCE_COST: dict[str, pl.DataType] = {
    **DIVERGENT,
    "wait_ns": pl.Int64,                # the others' wait (max over waiting ranks); null when unknown
    "cost_basis": pl.String,            # measured / estimated
    "cost_method": pl.String,           # how wait_ns was obtained
    "waiting_ranks": pl.List(pl.Int32),
    "wait_by_rank": pl.String,          # JSON {rank: ns}
}

#: Every analysis output (``workbench.analyses.summary.AnalysisTables``), declared like the input tables: each
#: function's docstring says what its columns mean. ``analysis_tables`` conforms its outputs to these, so an empty
#: table still has its columns.
ANALYSIS_TABLES: dict[str, dict[str, pl.DataType]] = {
    "divergent": DIVERGENCE_COST,
    "breakdown": {
        "rank": pl.Int32, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64, "activities": pl.UInt32,
        "window_ns": pl.Int64, "busy_ns": pl.Int64, "idle_ns": pl.Int64, "compute_ns": pl.Int64, "comm_ns": pl.Int64,
        "comm_overlapped_ns": pl.Int64, "comm_exposed_ns": pl.Int64, "memcpy_ns": pl.Int64, "memset_ns": pl.Int64,
        "memory_ns": pl.Int64, "memory_exposed_ns": pl.Int64, "non_compute_ns": pl.Int64, "compute_pct": pl.Float64,
        "comm_exposed_pct": pl.Float64, "memory_exposed_pct": pl.Float64, "idle_pct": pl.Float64,
        "non_compute_pct": pl.Float64, "comm_overlap_pct": pl.Float64, "comm_overlap_of_max_pct": pl.Float64,
    },
    "breakdown_by_rank": {
        "rank": pl.Int32, "window_ns": pl.Int64, "busy_ns": pl.Int64, "idle_ns": pl.Int64, "compute_ns": pl.Int64,
        "comm_ns": pl.Int64, "comm_overlapped_ns": pl.Int64, "comm_exposed_ns": pl.Int64, "memcpy_ns": pl.Int64,
        "memset_ns": pl.Int64, "memory_ns": pl.Int64, "memory_exposed_ns": pl.Int64, "non_compute_ns": pl.Int64,
        "steps": pl.UInt32, "start": pl.Int64, "end": pl.Int64, "activities": pl.UInt32, "compute_pct": pl.Float64,
        "comm_exposed_pct": pl.Float64, "memory_exposed_pct": pl.Float64, "idle_pct": pl.Float64,
        "non_compute_pct": pl.Float64, "comm_overlap_pct": pl.Float64, "comm_overlap_of_max_pct": pl.Float64,
    },
    "overlap": {
        "rank": pl.Int32, "step": pl.Int32, "comm_ns": pl.Int64, "compute_ns": pl.Int64, "overlapped_ns": pl.Int64,
        "exposed_ns": pl.Int64, "window_ns": pl.Int64, "overlap_pct": pl.Float64, "overlap_of_max_pct": pl.Float64,
        "exposed_pct": pl.Float64,
    },
    "idle_gaps": {
        "rank": pl.Int32, "stream": pl.Int64, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64,
        "gap_ns": pl.Int64, "category": pl.String, "launch_late_ns": pl.Int64, "host_ns": pl.Int64,
        "name": pl.Categorical(),
    },
    "idle_by_stream": {
        "rank": pl.Int32, "stream": pl.Int64, "host_wait_ns": pl.Int64, "kernel_wait_ns": pl.Int64,
        "other_ns": pl.Int64, "gaps": pl.UInt32, "idle_ns": pl.Int64, "host_wait_pct": pl.Float64,
        "kernel_wait_pct": pl.Float64, "other_pct": pl.Float64, "host_ns": pl.Int64, "host_pct": pl.Float64,
    },
    "idle_by_step": {
        "rank": pl.Int32, "step": pl.Int32, "stream": pl.Int64, "host_wait_ns": pl.Int64, "kernel_wait_ns": pl.Int64,
        "other_ns": pl.Int64, "gaps": pl.UInt32, "idle_ns": pl.Int64, "host_wait_pct": pl.Float64,
        "kernel_wait_pct": pl.Float64, "other_pct": pl.Float64, "host_ns": pl.Int64, "host_pct": pl.Float64,
    },
    "idle_attribution": {   # analyses/idle_causes.py: the main streams' idle time by what the host was doing
        "rank": pl.Int32, "stream": pl.Int64, "step": pl.Int32, "cause": pl.String, "label": pl.String,
        "site": pl.String, "ns": pl.Int64, "gaps": pl.Int64,
    },
    "step_idle": {
        "rank": pl.Int32, "step": pl.Int32, "window_ns": pl.Int64, "idle_ns": pl.Int64, "idle_pct": pl.Float64,
    },
    "bubbles": {
        "rank": pl.Int32, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64, "step_ns": pl.Int64,
        "timeline": pl.String, "forwards": pl.UInt32, "backwards": pl.UInt32, "forward_ns": pl.Int64,
        "backward_ns": pl.Int64, "p2p_wait_ns": pl.Int64, "work_ns": pl.Int64, "bubble_ns": pl.Int64,
        "bubble_pct": pl.Float64, "first_forward_delay_ns": pl.Int64,
    },
    "collectives": {
        "rank": pl.Int32, "backend": pl.Categorical(), "pg_name": pl.String, "pg_ranks": pl.String, "step": pl.Int32,
        "order": pl.Int64, "seq": pl.Int64, "collective": pl.Categorical(), "dtype": pl.String, "bytes": pl.Int64,
        "group_size": pl.Int32, "p2p": pl.Boolean, "arrival": pl.Int64, "finish": pl.Int64, "dur_ns": pl.Int64,
        "aligned": pl.Boolean, "ranks_seen": pl.UInt32, "expected_ranks": pl.UInt32, "complete": pl.Boolean,
        "last_arrival": pl.Int64, "last_rank": pl.Int32, "is_last": pl.Boolean, "wait_ns": pl.Int64,
    },
    "collective_instances": {
        "pg_name": pl.String, "pg_ranks": pl.String, "step": pl.Int32, "order": pl.Int64, "collective": pl.String,
        "dtype": pl.String, "bytes": pl.Int64, "group_size": pl.Int32, "p2p": pl.Boolean, "ranks_seen": pl.UInt32,
        "complete": pl.Boolean, "first_arrival": pl.Int64, "last_arrival": pl.Int64, "last_rank": pl.Int32,
        "held_back_ns": pl.Int64, "max_wait_ns": pl.Int64, "total_wait_ns": pl.Int64, "transfer_ns": pl.Int64,
        "mismatch": pl.String, "skew_ns": pl.Int64, "algbw_gbps": pl.Float64, "busbw_gbps": pl.Float64,
        "consistent": pl.Boolean,
    },
    "collective_wait": {
        "rank": pl.Int32, "instances": pl.UInt32, "wait_ns": pl.Int64, "last_count": pl.UInt32, "comm_ns": pl.Int64,
        "last_pct": pl.Float64,
    },
    "clock_offsets": {
        "rank": pl.Int32, "offset_ns": pl.Int64, "spread_ns": pl.Int64, "samples": pl.UInt32, "host": pl.String,
    },
    "collective_drift": {
        "rank": pl.Int32, "instances": pl.UInt32, "steps": pl.UInt32, "mean_offset_ns": pl.Float64,
        "first_offset_ns": pl.Float64, "last_offset_ns": pl.Float64, "slope_ns_per_s": pl.Float64,
        "drift_ns": pl.Float64,
    },
    "step_times": {
        "rank": pl.Int32, "source": pl.String, "step": pl.Int32, "start": pl.Int64, "end": pl.Int64, "dur": pl.Int64,
        "data_wait_ns": pl.Int64, "device_ns": pl.Int64, "step_ns": pl.Int64, "ranks": pl.UInt32,
        "median_step_ns": pl.Float64, "excess_ns": pl.Int64, "lateness_ns": pl.Int64, "is_latest": pl.Boolean, "held_back_ns": pl.Int64,
    },
    "stragglers": {
        "rank": pl.Int32, "signal": pl.String, "events": pl.UInt32, "held_count": pl.UInt32, "held_back_ns": pl.Int64,
        "typical_held_ns": pl.Int64, "step_time_ns": pl.Int64, "first_step": pl.Int32,
        "mean_data_wait_ns": pl.Float64, "median_data_wait_ns": pl.Float64, "held_steps": pl.List(pl.Int32),
        "slope_ns_per_step": pl.Float64, "change_ns": pl.Float64, "trend": pl.String, "held_pct": pl.Float64,
        "held_share_pct": pl.Float64, "typical_share_pct": pl.Float64,
    },
    "top_kernels": {
        "kernel_class": KernelClassType, "name": pl.String, "count": pl.UInt32, "total_ns": pl.Int64,
        "mean_ns": pl.Float64, "min_ns": pl.Int64, "max_ns": pl.Int64, "pct_of_class": pl.Float64,
        "rank_in_class": pl.UInt32,
    },
    "launch_stats": {
        "rank": pl.Int32, "kernel_class": KernelClassType, "count": pl.UInt32, "launched": pl.UInt32,
        "delay_p50_ns": pl.Float64, "delay_p90_ns": pl.Float64, "delay_p99_ns": pl.Float64, "delay_max_ns": pl.Int64,
        "queue_p50_ns": pl.Float64, "short": pl.UInt32, "short_time_ns": pl.Int64, "mean_dur_ns": pl.Float64,
        "short_pct": pl.Float64,
    },
    "kernel_class_time": {
        "rank": pl.Int32, "kernel_class": pl.String, "count": pl.UInt32, "total_ns": pl.Int64,
    },
    "compiles_by_rank": {
        "rank": pl.Int32, "compiles": pl.UInt32, "recompiles": pl.UInt32, "compile_time_ns": pl.Int64,
    },
    "step_table": {
        "rank": pl.Int32, "step": pl.Int32, "source": pl.String, "start": pl.Int64, "end": pl.Int64, "dur": pl.Int64,
        "data_wait_ns": pl.Int64, "step_ns": pl.Int64, "profiled": pl.Boolean,
    },
}


TABLES: dict[str, dict[str, pl.DataType]] = {
    "compiles_by_rank": {"rank": pl.Int32, "compiles": pl.UInt32, "recompiles": pl.UInt32,
                         "compile_time_ns": pl.Int64},
}

TABLES: dict[str, dict[str, pl.DataType]] = {
    "events": EVENTS,
    "kernels": KERNELS,
    "collectives": COLLECTIVES,
    "steps": STEPS,
    "ranks": RANKS,
    "skipped": SKIPPED,
    "compiles": COMPILES,
    "fingerprints": FINGERPRINTS,
    "findings": FINDINGS,
}


# ---------------------------------------------------------------------------------------------- hang tables
#: One row per Flight Recorder entry (collective or p2p call) per rank.
FR_ENTRIES: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "pg_name": pl.String,            # process group name ("0", "1", ...)
    "pg_desc": pl.String,            # "default_pg", ...
    "seq": pl.Int64,                 # collective_seq_id (per process group; p2p calls: null)
    "p2p_seq": pl.Int64,
    "is_p2p": pl.Boolean,
    "op": pl.String,                 # "all_reduce", "broadcast", ... (backend prefix removed)
    "backend": pl.String,            # "gloo", "nccl", ... (from profiling_name)
    "in_sizes": pl.String,           # JSON, e.g. "[[4096]]"
    "in_dtypes": pl.String,          # JSON, e.g. '["Float"]'
    "out_sizes": pl.String,
    "out_dtypes": pl.String,
    "state": pl.String,              # scheduled / started / completed as torch wrote it
    "retired": pl.Boolean,
    "created_ns": pl.Int64,          # wall clock when the call was enqueued
    "started_ns": pl.Int64,
    "completed_ns": pl.Int64,
    "timeout_ms": pl.Int64,
    "call_site": pl.String,          # "file:line in function": the innermost frame outside torch
    "stack": pl.String,              # JSON list of "file:line in function", innermost first (user frames)
    "record_id": pl.Int64,
    "file": pl.String,
}

#: Per rank and process group: the last enqueued / started / completed sequence ids (``pg_status``).
FR_STATUS: dict[str, pl.DataType] = {
    "rank": pl.Int32, "pg_name": pl.String, "last_enqueued": pl.Int64, "last_started": pl.Int64,
    "last_completed": pl.Int64,
}

#: Per rank: how its process ended, from the collector's hang files (null where the rank left none).
RANK_STATE: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "started_ns": pl.Int64,          # collector start
    "exit_reason": pl.String,        # closed / exception / sigterm / null (no exit written: killed or aborted)
    "exit_ns": pl.Int64,
    "error": pl.String,              # "RuntimeError: ..." of the exception that left a step
    "error_step": pl.Int32,          # the step that exception left
    "error_ns": pl.Int64,
    "stalled_step": pl.Int32,        # a step the watchdog saw run past its stall limit
    "heartbeat_ns": pl.Int64,        # last heartbeat of the watchdog thread (alive until then)
    "heartbeat_step": pl.Int32,
    "fatal": pl.Boolean,             # a fatal signal (abort, segfault) wrote a traceback
    "fatal_call_site": pl.String,    # innermost non-torch frame of the main thread at that signal
    "fatal_op": pl.String,           # the torch.distributed function it was in, if any
    "dumps": pl.Int32,               # Flight Recorder dumps this rank left
    "pg_before_collector": pl.Boolean,  # the process group existed before the collector set the env
}

#: One row per collective op in a rank's compiled graphs (TORCH_TRACE graph payloads).
GRAPH_COLLECTIVES: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "compile_id": pl.String,         # "0/1"
    "graph": pl.String,              # dynamo_output_graph / aot_backward_graph / inductor_output_code
    "index": pl.Int32,               # order within the graph
    "op": pl.String,                 # "all_reduce", "all_gather_into_tensor", ...
    "group": pl.String,              # group name argument ('0')
    "dtype": pl.String,              # "f32"
    "shape": pl.String,              # "[4, 8]"
    "call_site": pl.String,          # "file:line in function" of the user code
    "log_file": pl.String,
}


@dataclass(slots=True)
class HangTables:
    """Everything the hang analysis reads (``workbench.flight_recorder.load_hang_tables``; ``Run.hangs``), as
    frames with the schemas above; ``problems``: unreadable files; ``trace_exports``: per rank, when the collector
    exported its profiler windows, (start, end, CPU time holding the GIL, whole CPU time) ns
    (``rank<R>/trace/exports.jsonl``: the critical path counts that time as the profiler's); ``gc_pauses``: per rank,
    the garbage collections the collector kept, (start, end, generation) ns (``rank<R>/gc.jsonl``: the critical path
    names that time a garbage collection)."""

    entries: pl.DataFrame
    status: pl.DataFrame
    rank_state: pl.DataFrame
    graph_collectives: pl.DataFrame
    problems: list[str] = field(default_factory=list)
    trace_exports: dict[int, list[tuple[int, int, int | None, int | None]]] = field(default_factory=dict)
    gc_pauses: dict[int, list[tuple[int, int, int | None]]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.entries.is_empty() and self.rank_state.is_empty() and self.graph_collectives.is_empty()


def empty_hang_tables() -> HangTables:
    """Hang tables with no rows (a run without Flight Recorder dumps or hang files)."""
    return HangTables(pl.DataFrame(schema=FR_ENTRIES), pl.DataFrame(schema=FR_STATUS),
                      pl.DataFrame(schema=RANK_STATE), pl.DataFrame(schema=GRAPH_COLLECTIVES))


def empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """An empty frame with exactly ``schema``."""
    return pl.DataFrame(schema=schema)


def conform(frame: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """``frame`` with the columns of ``schema`` in order and cast to its types; missing columns are null."""
    columns = [
        (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
        for name, dtype in schema.items()
    ]
    return frame.select(columns)
