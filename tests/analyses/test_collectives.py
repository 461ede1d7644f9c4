import polars as pl
import pytest
from conftest import collectives_frame

from workbench.analyses.collectives import (
    clock_offsets, collective_drift, collective_findings, collective_instances, collective_wait_by_rank,
    match_collectives,
)
from workbench.schema import RANKS, conform


def _calls(n_ranks=3, late_rank=2, late_ns=1000, offsets=None, bytes_on=None):
    rows = []
    offsets = offsets or {}
    for i in range(4):
        t = 10_000 * i
        for r in range(n_ranks):
            arrive = t + (late_ns if r == late_rank else 10 * r) + offsets.get(r, 0)
            end = t + late_ns + 500 + offsets.get(r, 0)
            rows.append({"rank": r, "seq": i, "step": 1, "group_size": n_ranks, "start": arrive - 50, "end": arrive,
                         "kernel_start": arrive, "kernel_end": end,
                         "in_elems": (bytes_on or {}).get((r, i), 1024)})
    return collectives_frame(rows)


def test_skew_last_rank_wait_and_bandwidth():
    m = match_collectives(_calls())
    inst = collective_instances(m)
    assert inst.height == 4 and inst["consistent"].all() and inst["complete"].all()
    first = inst.row(0, named=True)
    assert first["last_rank"] == 2 and first["skew_ns"] == 1000 and first["held_back_ns"] == 1000 - 10
    assert first["transfer_ns"] == 500
    assert first["algbw_gbps"] == pytest.approx(4096 / 500)
    assert first["busbw_gbps"] == pytest.approx(4096 / 500 * 2 * 2 / 3)
    w = collective_wait_by_rank(m)
    assert w.filter(pl.col("rank") == 0)["wait_ns"][0] == 4 * 1000
    assert w.filter(pl.col("rank") == 2)["last_pct"][0] == 100.0


def test_mismatched_size_is_a_finding_not_a_crash():
    inst = collective_instances(match_collectives(_calls(bytes_on={(1, 2): 2048})))
    bad = inst.filter(~pl.col("consistent"))
    assert bad.height == 1 and "bytes" in bad["mismatch"][0] and "1=8192" in bad["mismatch"][0]
    f = collective_findings(inst)
    assert [x.kind for x in f] == ["collective_mismatch"] and f[0].severity == "high"  # a hang risk
    assert f[0].evidence.what == "disagree" and f[0].cost.ns == 0


def test_missing_call_on_one_rank():
    c = _calls().filter(~((pl.col("rank") == 1) & (pl.col("seq") == 3)))
    inst = collective_instances(match_collectives(c))
    assert inst.filter(~pl.col("complete")).height == 1
    assert [(x.kind, x.evidence.what) for x in collective_findings(inst)] == [("collective_mismatch", "missing")]


def test_clock_offsets_from_collective_ends_and_alignment_across_hosts():
    c = _calls(late_rank=None, offsets={1: 5_000_000})
    off = clock_offsets(c)
    assert off.filter(pl.col("rank") == 1)["offset_ns"][0] == 5_000_000
    ranks = conform(pl.DataFrame({"rank": [0, 1, 2], "host": ["a", "b", "b"]}), RANKS)
    aligned = collective_instances(match_collectives(c, ranks))
    assert aligned["skew_ns"].max() == 20  # 10 ns per rank once the clocks are aligned
    same_host = collective_instances(match_collectives(c))
    assert same_host["skew_ns"].max() > 4_000_000
    f = collective_findings(aligned, clock_offsets(c, ranks), aligned=True)
    assert [x.kind for x in f] == ["clock_offset"] and f[0].severity == "info"


def test_gloo_without_kernels_uses_host_times():
    c = _calls().with_columns(kernel_start=None, kernel_end=None, backend=pl.lit("gloo").cast(pl.Categorical))
    inst = collective_instances(match_collectives(c))
    assert inst["last_rank"].to_list() == [2, 2, 2, 2]


def test_drift_of_a_rank_that_arrives_later_and_later():
    rows = []
    for i in range(10):
        for r in range(3):
            arrive = 1_000_000_000 * i + (300_000 * i if r == 1 else 0)
            rows.append({"rank": r, "seq": i, "step": i, "group_size": 3, "start": arrive, "end": arrive + 10,
                         "kernel_start": arrive, "kernel_end": 1_000_000_000 * i + 3_000_000})
    d = collective_drift(match_collectives(collectives_frame(rows)))
    r1 = d.filter(pl.col("rank") == 1).row(0, named=True)
    assert r1["slope_ns_per_s"] == pytest.approx(300_000, rel=0.05)
    f = collective_findings(pl.DataFrame(), None, d)
    assert [x.kind for x in f] == ["collective_drift"] and f[0].ranks == (1,)
    assert f[0].evidence.rank == 1 and f[0].severity == "info"  # a trend costs no time by itself
