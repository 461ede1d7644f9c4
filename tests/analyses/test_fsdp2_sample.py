"""The collectives of ``sample_traces/cpu-gloo-fsdp2`` (``examples/cpu_gloo_fsdp.py``) against FSDP2's schedule.

5 FSDP2 units (4 blocks + the root holding the head), ``reshard_after_forward`` on the blocks, the root keeping
its parameters after forward: per step 5 all-gathers in forward, 4 re-gathers in backward and 5 gradient
reduce-scatters. Gloo runs ``reduce_scatter_tensor`` as an all-reduce (its work is ``gloo:all_reduce``; the c10d op
is ``c10d::_reduce_scatter_base_``), so COLLECTIVES names those ``allreduce``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.collectives import collective_findings, collective_instances, match_collectives

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "cpu-gloo-fsdp2"
pytestmark = pytest.mark.skipif(not (SAMPLE / "run.json").is_file(), reason="sample_traces/cpu-gloo-fsdp2 not recorded")


def test_fsdp2_collectives_per_step():
    run = workbench.open(SAMPLE)
    c = run.collectives.with_columns(pl.col("collective").cast(pl.String), pl.col("backend").cast(pl.String))
    assert set(c["backend"].to_list()) == {"gloo"}
    per = c.group_by("rank", "step", "collective").len()
    assert sorted(per["rank"].unique().to_list()) == [0, 1]
    assert (per.filter(pl.col("collective") == "allgather")["len"] == 9).all()
    assert (per.filter(pl.col("collective") == "allreduce")["len"] == 5).all()
    assert set(per["collective"].to_list()) == {"allgather", "allreduce"}
    instances = collective_instances(match_collectives(run.collectives))
    assert instances["complete"].all() and instances["consistent"].all() and not instances["p2p"].any()
    assert [f for f in collective_findings(instances) if f.kind == "collective_mismatch"] == []
