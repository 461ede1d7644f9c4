"""Collectives across ranks: matching, consistency, clock offsets, arrival skew, waits and bandwidth.

Matching: the calls of one process group (``pg_name`` + ``pg_ranks``) are matched across ranks by order. Kineto
writes no sequence number (FACTS §1), so the n-th call of a group inside profiler step ``s`` on one rank is matched
with the n-th call of that group in step ``s`` on every other rank (calls outside every step use their order in
the trace). Keying by step keeps profiler windows that start at different calls on different ranks matched.

Per instance, on each rank:

* ``arrival``: when the rank reached the collective: the device start of its NCCL kernel (the kernel starts when
  the stream gets there and then waits for its peers), or for gloo the start of the ``gloo:*`` execution, falling
  back to the host call start.
* ``wait_ns`` = last arrival - own arrival: time the rank spent waiting for the slowest peer.
* ``held_back_ns`` (instance): last arrival - second-to-last arrival: how much later the collective completed
  because of the last rank alone.
* ``transfer_ns``: the last-arriving rank's own duration (it never waits), robust to clock offsets.
* ``algbw`` = bytes / transfer time (GB/s), ``busbw`` = algbw × the nccl-tests factor (allreduce 2(n-1)/n,
  allgather / reduce_scatter / alltoall (n-1)/n, others 1).

Clock offsets: collectives end at nearly the same instant on every rank, so the median over instances of
``end(rank) - end(lowest rank)`` estimates each rank's clock offset. It is always reported; it is subtracted
before the skew is computed only when the ranks run on more than one host (``align="auto"``), since ranks on one
host share the clock (FACTS §1).

Point-to-point calls (send, recv, sendrecv) are listed but left out of the skew statistics and findings: their
order does not pair them across ranks.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, make_finding
from workbench.analyses.kinds import (
    CLOCK_OFFSET_NS, DRIFT_NS, ClockOffsetEvidence, CollectiveDriftEvidence, CollectiveMismatchEvidence, Kind,
)
from workbench.format import duration

P2P = ("send", "recv", "sendrecv", "isend", "irecv", "p2p")

_BUS_FACTOR = {
    "allreduce": "2*(n-1)/n", "all_reduce": "2*(n-1)/n",
    "allgather": "(n-1)/n", "all_gather": "(n-1)/n", "_allgather_base": "(n-1)/n", "allgather_into_tensor_coalesced": "(n-1)/n",
    "reduce_scatter": "(n-1)/n", "reducescatter": "(n-1)/n", "_reduce_scatter_base": "(n-1)/n",
    "reduce_scatter_tensor_coalesced": "(n-1)/n",
    "alltoall": "(n-1)/n", "all_to_all": "(n-1)/n", "alltoall_base": "(n-1)/n",
}


def _bus_factor(collective: pl.Expr, n: pl.Expr) -> pl.Expr:
    n = n.cast(pl.Float64)
    c = collective.cast(pl.String).str.to_lowercase()
    two = c.is_in([k for k, v in _BUS_FACTOR.items() if v.startswith("2")])
    one_less = c.is_in([k for k, v in _BUS_FACTOR.items() if v == "(n-1)/n"])
    return (
        pl.when(n <= 1).then(1.0)
        .when(two).then(2.0 * (n - 1) / n)
        .when(one_less).then((n - 1) / n)
        .otherwise(1.0)
    )


def _instance_keys(collectives: pl.DataFrame) -> pl.DataFrame:
    return collectives.with_columns(
        pg_ranks=pl.col("pg_ranks").fill_null(""),
        pg_name=pl.col("pg_name").fill_null(""),
        _stepkey=pl.col("step").fill_null(-1),
    ).with_columns(
        order=pl.col("seq").rank("ordinal").over("rank", "pg_name", "pg_ranks", "_stepkey").cast(pl.Int64) - 1,
        arrival=pl.coalesce("kernel_start", "start"),
        finish=pl.coalesce("kernel_end", "end"),
        p2p=pl.col("collective").cast(pl.String).str.to_lowercase().is_in(P2P),
    )


def clock_offsets(collectives: pl.DataFrame, hosts: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per-rank clock offset estimated from collective ends.

    Columns: ``rank``, ``offset_ns`` (median over matched non-p2p instances of this rank's end minus the lowest
    rank's end; subtract it to move the rank onto the lowest rank's clock), ``spread_ns`` (median absolute
    deviation of those differences: how trustworthy the estimate is), ``samples``, ``host``. ``hosts`` is the RANKS
    table (only ``rank`` and ``host`` are read); without it hosts are null.
    """
    schema = {"rank": pl.Int32, "offset_ns": pl.Int64, "spread_ns": pl.Int64, "samples": pl.UInt32, "host": pl.String}
    if collectives.is_empty():
        return pl.DataFrame(schema=schema)
    c = _instance_keys(collectives).filter(~pl.col("p2p"))
    if c.is_empty():
        return pl.DataFrame(schema=schema)
    ref_rank = c["rank"].min()
    ref = c.filter(pl.col("rank") == ref_rank).select("pg_name", "pg_ranks", "_stepkey", "order", ref_finish="finish")
    d = c.join(ref, on=["pg_name", "pg_ranks", "_stepkey", "order"]).with_columns(
        diff=pl.col("finish") - pl.col("ref_finish")
    )
    out = d.group_by("rank").agg(
        offset_ns=pl.col("diff").median().cast(pl.Int64),
        spread_ns=(pl.col("diff") - pl.col("diff").median()).abs().median().cast(pl.Int64),
        samples=pl.len(),
    )
    if hosts is not None and "host" in hosts.columns:
        out = out.join(hosts.select("rank", "host"), on="rank", how="left")
    else:
        out = out.with_columns(host=pl.lit(None, pl.String))
    return out.select(list(schema)).cast(schema).sort("rank")


def spans_hosts(ranks: pl.DataFrame | None) -> bool:
    """True when the RANKS table names more than one host."""
    if ranks is None or ranks.is_empty() or "host" not in ranks.columns:
        return False
    return ranks["host"].drop_nulls().n_unique() > 1


def match_collectives(
    collectives: pl.DataFrame,
    ranks: pl.DataFrame | None = None,
    align: Literal["auto", "always", "never"] = "auto",
) -> pl.DataFrame:
    """One row per rank and collective instance, with the instance's cross-rank numbers.

    Columns: ``rank``, ``backend``, ``pg_name``, ``pg_ranks``, ``step``, ``order`` (n-th call of the group in the
    step), ``seq``, ``collective``, ``dtype``, ``bytes``, ``group_size``, ``p2p``, ``arrival`` / ``finish`` (ns,
    clock-aligned when aligned), ``dur_ns`` (finish - arrival), ``aligned`` (clock offsets were applied),
    ``ranks_seen`` (ranks with this instance), ``expected_ranks`` (loaded ranks of the group), ``complete``,
    ``last_arrival``, ``last_rank``, ``is_last``, ``wait_ns`` (last arrival - own arrival).
    """
    if collectives.is_empty():
        return pl.DataFrame()
    c = _instance_keys(collectives)
    aligned = align == "always" or (align == "auto" and spans_hosts(ranks))
    if aligned:
        off = clock_offsets(collectives).select("rank", "offset_ns")
        c = c.join(off, on="rank", how="left").with_columns(
            arrival=pl.col("arrival") - pl.col("offset_ns").fill_null(0),
            finish=pl.col("finish") - pl.col("offset_ns").fill_null(0),
        ).drop("offset_ns")
    key = ["pg_name", "pg_ranks", "_stepkey", "order"]
    # loaded ranks of each group: members named in pg_ranks that are loaded, else every rank that used the group
    members = c.group_by("pg_name", "pg_ranks").agg(expected_ranks=pl.col("rank").n_unique())
    c = c.join(members, on=["pg_name", "pg_ranks"], how="left")
    last_arrival = pl.col("arrival").max().over(key)
    out = c.with_columns(
        ranks_seen=pl.col("rank").n_unique().over(key),
        last_arrival=last_arrival,
        last_rank=pl.col("rank").sort_by("arrival").last().over(key),
        dur_ns=pl.col("finish") - pl.col("arrival"),
        aligned=pl.lit(aligned),
    ).with_columns(
        complete=pl.col("ranks_seen") >= pl.col("expected_ranks"),
        is_last=pl.col("rank") == pl.col("last_rank"),
        wait_ns=(pl.col("last_arrival") - pl.col("arrival")).clip(lower_bound=0),
    )
    return out.select(
        "rank", "backend", "pg_name", "pg_ranks", "step", "order", "seq", "collective", "dtype", "bytes",
        "group_size", "p2p", "arrival", "finish", "dur_ns", "aligned", "ranks_seen", "expected_ranks", "complete",
        "last_arrival", "last_rank", "is_last", "wait_ns",
    ).sort("pg_name", "pg_ranks", "step", "order", "rank", nulls_last=True)


def collective_instances(matched: pl.DataFrame) -> pl.DataFrame:
    """One row per collective instance (process group, step, order).

    Columns: ``pg_name``, ``pg_ranks``, ``step``, ``order``, ``collective`` (the lowest rank's), ``dtype``,
    ``bytes``, ``p2p``, ``ranks_seen``, ``complete``, ``consistent`` (every rank agrees on name, dtype and size),
    ``mismatch`` (what disagrees, e.g. ``"bytes: 0=4096 1=8192"``; null when consistent), ``first_arrival``,
    ``last_arrival``, ``last_rank``, ``skew_ns`` (last - first arrival), ``held_back_ns`` (last - second-to-last
    arrival), ``max_wait_ns``, ``total_wait_ns`` (sum of every rank's wait), ``transfer_ns`` (last rank's
    duration), ``algbw_gbps``, ``busbw_gbps``.
    """
    if matched.is_empty():
        return pl.DataFrame()
    key = ["pg_name", "pg_ranks", "step", "order"]
    m = matched.with_columns(collective=pl.col("collective").cast(pl.String))

    def describe(col: str) -> pl.Expr:
        pairs = pl.concat_str([pl.col("rank").cast(pl.String), pl.col(col).cast(pl.String).fill_null("?")], separator="=")
        return pl.when(pl.col(col).n_unique() > 1).then(
            pl.lit(f"{col}: ") + pairs.sort_by("rank").str.join(" ")
        )

    out = m.group_by(key).agg(
        collective=pl.col("collective").sort_by("rank").first(),
        dtype=pl.col("dtype").sort_by("rank").first(),
        bytes=pl.col("bytes").max(),
        group_size=pl.col("group_size").max(),
        p2p=pl.col("p2p").any(),
        ranks_seen=pl.col("rank").n_unique(),
        complete=pl.col("complete").all(),
        _m1=describe("collective"),
        _m2=describe("dtype"),
        _m3=describe("bytes"),
        first_arrival=pl.col("arrival").min(),
        last_arrival=pl.col("arrival").max(),
        last_rank=pl.col("rank").sort_by("arrival").last(),
        held_back_ns=pl.col("arrival").sort().tail(2).diff().last().fill_null(0),
        max_wait_ns=pl.col("wait_ns").max(),
        total_wait_ns=pl.col("wait_ns").sum(),
        transfer_ns=pl.col("dur_ns").sort_by("arrival").last(),
    )
    n = pl.coalesce("group_size", "ranks_seen")
    algbw = pl.when(pl.col("transfer_ns") > 0).then(pl.col("bytes") / pl.col("transfer_ns"))
    return (
        out.with_columns(
            mismatch=pl.concat_str([pl.col("_m1"), pl.col("_m2"), pl.col("_m3")], separator="; ", ignore_nulls=True),
            skew_ns=pl.col("last_arrival") - pl.col("first_arrival"),
            algbw_gbps=algbw,
        )
        .with_columns(
            mismatch=pl.when(pl.col("mismatch") == "").then(None).otherwise(pl.col("mismatch")),
            busbw_gbps=pl.col("algbw_gbps") * _bus_factor(pl.col("collective"), n),
        )
        .with_columns(consistent=pl.col("mismatch").is_null())
        .drop("_m1", "_m2", "_m3")
        .sort("pg_name", "pg_ranks", "step", "order", nulls_last=True)
    )


def collective_wait_by_rank(matched: pl.DataFrame, by: tuple[str, ...] = ("rank",)) -> pl.DataFrame:
    """Collective waiting per rank (add ``"step"`` to ``by`` for per step), non-p2p complete instances only.

    Columns: ``by...``, ``instances``, ``wait_ns`` (total time waiting for the last rank), ``last_count``
    (instances where this rank arrived last), ``last_pct``, ``comm_ns`` (total collective duration).
    """
    if matched.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "instances": pl.UInt32, "wait_ns": pl.Int64,
                                    "last_count": pl.UInt32, "last_pct": pl.Float64, "comm_ns": pl.Int64})
    m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1))
    return (
        m.group_by(list(by))
        .agg(instances=pl.len(), wait_ns=pl.col("wait_ns").sum(), last_count=pl.col("is_last").sum().cast(pl.UInt32),
             comm_ns=pl.col("dur_ns").sum())
        .with_columns(last_pct=100.0 * pl.col("last_count") / pl.col("instances"))
        .sort(list(by))
    )


def collective_drift(matched: pl.DataFrame) -> pl.DataFrame:
    """How each rank's arrival at collectives moves relative to the others over time.

    For every complete non-p2p instance, a rank's offset is its arrival minus the instance's median arrival.
    Columns: ``rank``, ``instances``, ``mean_offset_ns``, ``first_offset_ns`` / ``last_offset_ns`` (first and last
    instance), ``steps`` (distinct steps), ``slope_ns_per_s`` (least-squares slope of
    the offset against the instance's median arrival, the same x for every rank, so two ranks' slopes mirror:
    positive = this rank arrives later and later), ``drift_ns`` (median offset over the last third of the
    instances minus that over the first third: how far it moved, robust to a one-off late arrival).
    """
    if matched.is_empty():
        return pl.DataFrame()
    key = ["pg_name", "pg_ranks", "step", "order"]
    m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1)).with_columns(
        offset=(pl.col("arrival") - pl.col("arrival").median().over(key)),
        # every rank is placed at the instance's time (its median arrival), so with two ranks the slopes mirror
        t=(pl.col("arrival").median().over(key) - pl.col("arrival").min()).cast(pl.Float64) / 1e9,
    )
    if m.is_empty():
        return pl.DataFrame()
    cov = ((pl.col("t") - pl.col("t").mean()) * (pl.col("offset") - pl.col("offset").mean())).mean()
    var = ((pl.col("t") - pl.col("t").mean()) ** 2).mean()
    third = (pl.len() / 3).ceil().cast(pl.Int64)
    return (
        m.sort("t", "arrival")
        .group_by("rank")
        .agg(
            instances=pl.len(),
            steps=pl.col("step").n_unique(),
            mean_offset_ns=pl.col("offset").mean(),
            first_offset_ns=pl.col("offset").first(),
            last_offset_ns=pl.col("offset").last(),
            slope_ns_per_s=pl.when(var > 0).then(cov / var),
            drift_ns=pl.col("offset").tail(third).median() - pl.col("offset").head(third).median(),
        )
        .sort("rank")
    )


def collective_findings(
    instances: pl.DataFrame, offsets: pl.DataFrame | None = None, drift: pl.DataFrame | None = None,
    aligned: bool = False,
) -> list[Finding]:
    """Findings: ``collective_mismatch`` (ranks disagree on name, dtype or size of a matched call, or a call is
    missing on some ranks), ``clock_offset`` (ranks span hosts and their clocks differ by > 100 µs),
    ``collective_drift`` (the rank whose arrival moved most, when by > 1 ms over ≥ 8 instances in ≥ 3 steps)."""
    out: list[Finding] = []
    if instances is not None and not instances.is_empty():
        bad = instances.filter(~pl.col("consistent") & ~pl.col("p2p"))
        if not bad.is_empty():
            first = bad.row(0, named=True)
            out.append(make_finding(
                Kind.COLLECTIVE_MISMATCH,
                f"{bad.height} collective call{'s disagree' if bad.height != 1 else ' disagrees'} across ranks, first in step {first['step']}: "
                f"{first['mismatch']} (process group {first['pg_name'] or '?'}, call {first['order']}).",
                CollectiveMismatchEvidence("disagree", bad.height, tuple(bad.head(5).select(
                    "pg_name", "step", "order", "collective", "mismatch").to_dicts())),
                Cost.none("none (ranks calling different collectives hang or corrupt data)"),
                steps=sorted(set(bad["step"].drop_nulls().to_list())), source="collectives", key="disagree"))
        missing = instances.filter(~pl.col("complete") & ~pl.col("p2p"))
        if not missing.is_empty():
            out.append(make_finding(
                Kind.COLLECTIVE_MISMATCH,
                f"{missing.height} collective call{'s were' if missing.height != 1 else ' was'} not found on every loaded rank of their process group "
                "(different call counts per rank: a divergent code path, or profiler windows that cover "
                "different calls).",
                CollectiveMismatchEvidence("missing", missing.height, tuple(missing.head(5).select(
                    "pg_name", "step", "order", "collective", "ranks_seen").to_dicts())),
                Cost.none("none (a call missing on some ranks hangs them, unless the windows differ)"),
                steps=sorted(set(missing["step"].drop_nulls().to_list())), source="collectives", key="missing"))
    if offsets is not None and not offsets.is_empty() and aligned:
        big = offsets.filter(pl.col("offset_ns").abs() > CLOCK_OFFSET_NS)
        if not big.is_empty():
            out.append(make_finding(
                Kind.CLOCK_OFFSET,
                "Ranks run on several hosts whose clocks differ (up to "
                f"{duration(big['offset_ns'].abs().max())}); times were aligned using collective ends.",
                ClockOffsetEvidence(tuple(offsets.to_dicts())), Cost.none("none (a fact about the clocks)"),
                ranks=big["rank"].to_list(), source="collectives"))
    if drift is not None and not drift.is_empty():
        d = drift.filter((pl.col("drift_ns").abs() > DRIFT_NS) & (pl.col("instances") >= 8) & (pl.col("steps") >= 3))
        for r in d.sort(pl.col("drift_ns").abs(), descending=True).head(1).iter_rows(named=True):
            out.append(make_finding(
                Kind.COLLECTIVE_DRIFT,
                f"Rank {r['rank']} reaches collectives {'later' if r['drift_ns'] > 0 else 'earlier'} and "
                f"{'later' if r['drift_ns'] > 0 else 'earlier'} relative to the other ranks: "
                f"{duration(r['drift_ns'], signed=True)} over the window.",
                CollectiveDriftEvidence(int(r["rank"]), int(r["instances"]), int(r["steps"]), int(r["drift_ns"]),
                                        r["slope_ns_per_s"], r["mean_offset_ns"]),
                Cost.none("none (a trend in arrival times, not time lost by itself)"),
                ranks=[r["rank"]], source="collectives"))
    return out


@register_detector(Kind.COLLECTIVE_MISMATCH, Kind.CLOCK_OFFSET, Kind.COLLECTIVE_DRIFT,
                   needs=("collective_instances", "clock_offsets", "collective_drift", "ranks"), order=20)
def _detect(x: Inputs) -> list[Finding]:
    """:func:`collective_findings` of the matched collectives (clock offsets only when ranks span hosts)."""
    return collective_findings(x.tables["collective_instances"], x.tables["clock_offsets"],
                               x.tables["collective_drift"], aligned=spans_hosts(x.ranks))


#: At most this many collective instances (the latest) go into the skew heatmap.
MAX_SKEW_INSTANCES = 400


def skew_cells(matched: pl.DataFrame, *, max_instances: int = MAX_SKEW_INSTANCES) -> pl.DataFrame:
    """Long rank × instance frame of each rank's wait (``wait_ns``) at each complete, non-p2p collective instance.

    ``matched`` is :func:`workbench.analyses.collectives.match_collectives` output; instances are numbered in
    time order (``instance``), the latest ``max_instances`` kept.
    """
    if matched is None or matched.is_empty():
        return pl.DataFrame()
    m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1))
    if m.is_empty():
        return m
    key = ["pg_name", "pg_ranks", "step", "order"]
    inst = (m.group_by(key).agg(pl.col("arrival").min().alias("_first"), pl.col("collective").first().cast(pl.String))
            .sort("_first").tail(max_instances).with_row_index("instance"))
    return m.join(inst.select(*key, "instance", pl.col("collective").alias("_name")), on=key, how="inner",
                  nulls_equal=True).with_columns(
        pl.concat_str([pl.col("_name"), pl.lit(" · step "), pl.col("step").cast(pl.String).fill_null("?"),
                       pl.lit(" · last rank "), pl.col("last_rank").cast(pl.String)]).alias("text"))


def arrival_offsets(matched: pl.DataFrame) -> pl.DataFrame:
    """Per rank and complete non-p2p collective instance: ``offset_ns`` = the rank's arrival minus the median
    arrival of all ranks at that instance (positive: it arrives *later* than the others), with ``t_s`` (seconds
    since the first instance), ``step`` and ``collective``."""
    if matched is None or matched.is_empty():
        return pl.DataFrame()
    key = ["pg_name", "pg_ranks", "step", "order"]
    m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1))
    if m.is_empty():
        return pl.DataFrame()
    return m.with_columns(
        offset_ns=pl.col("arrival") - pl.col("arrival").median().over(key),
        t_s=(pl.col("arrival").min().over(key) - pl.col("arrival").min()).cast(pl.Float64) / 1e9,
    ).select("rank", "t_s", "step", pl.col("collective").cast(pl.String), "offset_ns").sort("rank", "t_s")
