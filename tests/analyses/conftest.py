"""Builders of small schema-conformant tables with known answers for the analyses tests."""

from __future__ import annotations

import polars as pl
import pytest

from workbench.schema import COLLECTIVES, EVENTS, KERNELS, STEPS, conform


def kernels_frame(rows: list[dict]) -> pl.DataFrame:
    """KERNELS from dicts; defaults: rank 0, stream 7, class compute, step 1, kind by class, launch 0."""
    out = []
    for i, r in enumerate(rows):
        r = dict(r)
        r.setdefault("rank", 0)
        r.setdefault("stream", 7)
        r.setdefault("kernel_class", "compute")
        r.setdefault("step", 1)
        r.setdefault("name", f"k{i}" if r["kernel_class"] != "communication" else "ncclDevKernel_AllReduce")
        r.setdefault("kind", r["kernel_class"] if r["kernel_class"] in ("memcpy", "memset") else "kernel")
        r.setdefault("launch_start", 0)
        r.setdefault("launch_end", r["launch_start"] + 1)
        r.setdefault("correlation", i)
        r["dur"] = r["end"] - r["start"]
        out.append(r)
    return conform(pl.DataFrame(out, strict=False), KERNELS)


def steps_frame(rows: list[dict]) -> pl.DataFrame:
    """STEPS from dicts; defaults: rank 0, source profiler."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("rank", 0)
        r.setdefault("source", "profiler")
        r["dur"] = r["end"] - r["start"]
        out.append(r)
    return conform(pl.DataFrame(out, strict=False), STEPS)


def collectives_frame(rows: list[dict]) -> pl.DataFrame:
    """COLLECTIVES from dicts; defaults: nccl, pg "0", allreduce, float, 1024 elems, group of 2."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("backend", "nccl")
        r.setdefault("pg_name", "0")
        r.setdefault("pg_desc", "default_pg")
        r.setdefault("group_size", 2)
        r.setdefault("pg_ranks", "[" + ", ".join(str(i) for i in range(r["group_size"])) + "]")
        r.setdefault("collective", "allreduce")
        r.setdefault("dtype", "Float")
        r.setdefault("in_elems", 1024)
        r.setdefault("out_elems", r["in_elems"])
        r.setdefault("bytes", 4 * max(r["in_elems"], r["out_elems"]))
        out.append(r)
    return conform(pl.DataFrame(out, strict=False), COLLECTIVES)


def events_frame(rows: list[dict]) -> pl.DataFrame:
    """EVENTS from dicts; defaults: rank 0, kind annotation, cat user_annotation."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("rank", 0)
        r.setdefault("kind", "annotation")
        r.setdefault("cat", "user_annotation")
        r["dur"] = r["end"] - r["start"]
        out.append(r)
    return conform(pl.DataFrame(out, strict=False), EVENTS)


@pytest.fixture
def two_steps() -> pl.DataFrame:
    """Three profiler steps on rank 0 (the steady window keeps steps 1 and 2)."""
    return steps_frame([
        {"step": 1, "start": 0, "end": 1000},
        {"step": 2, "start": 1000, "end": 2000},
        {"step": 3, "start": 2000, "end": 3000},
    ])
