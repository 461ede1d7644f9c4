"""Synthetic KERNELS frames for the timeline tests and bench/app_speed.py (no trace files needed)."""

from __future__ import annotations

import numpy as np
import polars as pl

from workbench.schema import KERNELS, STEPS, conform


def synthetic_kernels(n: int = 1_000_000, *, ranks: int = 8, streams: int = 2, seed: int = 0,
                      origin: int = 1_700_000_000_000_000_000) -> pl.DataFrame:
    """``n`` kernels spread over ``ranks`` × ``streams`` lanes, back to back with small gaps, KERNELS schema."""
    rng = np.random.default_rng(seed)
    lanes = ranks * streams
    per = n // lanes
    frames = []
    for lane in range(lanes):
        dur = rng.integers(2_000, 50_000, per)
        gap = rng.integers(500, 5_000, per)
        start = origin + np.cumsum(gap + dur) - dur
        cls = np.where(rng.random(per) < 0.15, "communication", "compute")
        frames.append(pl.DataFrame({
            "rank": np.full(per, lane // streams, dtype=np.int32),
            "stream": np.full(per, 7 + lane % streams, dtype=np.int64),
            "start": start, "end": start + dur, "dur": dur,
            "kernel_class": cls,
            "name": np.where(cls == "compute", "triton_poi_fused_add_0", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            "kind": "kernel",
        }))
    return conform(pl.concat(frames), KERNELS)


def synthetic_steps(kernels: pl.DataFrame, *, steps: int = 50) -> pl.DataFrame:
    rows = []
    for rank, part in kernels.group_by("rank"):
        lo, hi = int(part["start"].min()), int(part["end"].max())
        w = (hi - lo) // steps
        for s in range(steps):
            rows.append({"rank": rank[0], "step": s, "source": "profiler", "start": lo + s * w,
                         "end": lo + (s + 1) * w, "dur": w, "profiled": True})
    return conform(pl.DataFrame(rows), STEPS)


def synthetic_run(n: int = 1_000_000, *, ranks: int = 8, streams: int = 2, steps: int = 50, name: str = "synthetic"):
    """A :class:`workbench.Run` with ``n`` synthetic kernels and profiler steps; other tables empty."""
    from pathlib import Path

    from workbench import schema
    from workbench.run import Run

    k = synthetic_kernels(n, ranks=ranks, streams=streams)
    st = synthetic_steps(k, steps=steps)
    # each kernel belongs to the step whose range holds its start (as the launch step would be)
    k = k.sort("start").join_asof(st.select("rank", pl.col("start").alias("_s"), pl.col("step").alias("_step"))
                                  .sort("_s"), left_on="start", right_on="_s", by="rank", strategy="backward",
                                  check_sortedness=False)
    k = k.with_columns(pl.col("_step").cast(pl.Int32).alias("step")).drop("_s", "_step")
    k = conform(k, KERNELS)
    rk = schema.conform(pl.DataFrame({"rank": list(range(ranks)), "world_size": [ranks] * ranks}), schema.RANKS)
    return Run(path=Path(name), ranks=rk, events=schema.empty(schema.EVENTS), kernels=k,
               collectives=schema.empty(schema.COLLECTIVES), steps=st, compiles=schema.empty(schema.COMPILES),
               fingerprints=schema.empty(schema.FINGERPRINTS), skipped=schema.empty(schema.SKIPPED))
