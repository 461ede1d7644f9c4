"""Clock alignment across hosts, from the collectives themselves: the ranks of a collective leave it at nearly the
same instant, so the difference of two hosts' completion times, over many collectives, is their clock offset.

:func:`host_offsets` — per host (ranks on one host share its clock): ``offset_ns`` (the median over instances of
the host's completion minus the reference host's, the host of the lowest rank; subtract it to move the host onto
the reference clock), ``residual_ns`` (the median absolute difference left after that: how far one collective's
completions still disagree, i.e. how well the clocks are aligned), ``p90_residual_ns``, ``samples`` and
``method``. Completions come from the sync points (a profiler window's collective end, NCCL's Flight Recorder with
timing). Without completions on two hosts no offset can be told from a rank that is late: the clocks are then left
as they are and a note says so.

:func:`align` — the sync points on the reference clock, the offsets and the notes.
"""

from __future__ import annotations

import polars as pl

CLOCK: dict[str, pl.DataType] = {
    "host": pl.String, "ranks": pl.List(pl.Int32), "offset_ns": pl.Int64, "residual_ns": pl.Int64,
    "p90_residual_ns": pl.Int64, "samples": pl.Int32, "method": pl.String,
}


def _hosts(sync: pl.DataFrame, ranks: pl.DataFrame | None) -> pl.DataFrame:
    """``rank`` → ``host`` for the ranks of ``sync`` (each rank its own host where the RANKS table names none)."""
    r = sync.select("rank").unique()
    if ranks is not None and not ranks.is_empty() and "host" in ranks.columns:
        r = r.join(ranks.select("rank", "host").unique("rank"), on="rank", how="left")
    else:
        r = r.with_columns(host=pl.lit(None, pl.String))
    return r.with_columns(host=pl.coalesce(pl.col("host").cast(pl.String),
                                           pl.lit("rank ") + pl.col("rank").cast(pl.String)))


def host_offsets(sync: pl.DataFrame, ranks: pl.DataFrame | None) -> pl.DataFrame:
    """Per host: offset and residual (module docstring; schema :data:`CLOCK`). One host: offset 0, and the residual
    of its ranks' completions (what one clock shows)."""
    if sync.is_empty():
        return pl.DataFrame(schema=CLOCK)
    hosts = _hosts(sync, ranks)
    members = hosts.group_by("host").agg(pl.col("rank").sort().alias("ranks"))
    ref_rank = int(sync["rank"].min())
    ref_host = hosts.filter(pl.col("rank") == ref_rank)["host"][0]
    done = sync.filter(pl.col("complete").is_not_null() & (pl.col("source") != "steps")).join(hosts, on="rank")
    key = ["pg_name", "key_step", "seq"]
    per = done.group_by([*key, "host"]).agg(c=pl.col("complete").median())
    ref = per.filter(pl.col("host") == ref_host).select(*key, ref="c")
    d = per.join(ref, on=key).with_columns(diff=pl.col("c") - pl.col("ref"))
    rows = []
    for host, rk in members.sort("host").iter_rows():
        mine = d.filter(pl.col("host") == host)["diff"]
        if host == ref_host:
            within = done.filter(pl.col("host") == host).with_columns(
                r=(pl.col("complete") - pl.col("complete").median().over(key)).abs())["r"]
            rows.append({"host": host, "ranks": rk, "offset_ns": 0,
                         "residual_ns": int(within.median()) if within.len() else None,
                         "p90_residual_ns": int(within.quantile(0.9)) if within.len() else None,
                         "samples": int(within.len()), "method": "reference"})
            continue
        if mine.len() == 0:
            rows.append({"host": host, "ranks": rk, "offset_ns": None, "residual_ns": None, "p90_residual_ns": None,
                         "samples": 0, "method": "none: no completion times shared with the reference host"})
            continue
        off = float(mine.median())
        res = (mine - off).abs()
        rows.append({"host": host, "ranks": rk, "offset_ns": int(round(off)), "residual_ns": int(res.median()),
                     "p90_residual_ns": int(res.quantile(0.9)), "samples": int(mine.len()),
                     "method": "collective completions"})
    return pl.DataFrame(rows, schema=CLOCK)


def align(sync: pl.DataFrame, ranks: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """(``sync`` on the reference host's clock, :func:`host_offsets`, notes). Ranks on the reference host are not
    moved; a host without an offset is left as it is (a note names it)."""
    clock = host_offsets(sync, ranks)
    notes: list[str] = []
    if clock.height <= 1:
        return sync, clock, notes
    hosts = _hosts(sync, ranks).join(clock.select("host", "offset_ns"), on="host", how="left")
    missing = clock.filter(pl.col("offset_ns").is_null())["host"].to_list()
    if missing:
        notes.append(f"clock of host(s) {', '.join(missing)} not aligned: no collective completion times there "
                     "(a profiler window, or NCCL's Flight Recorder with TORCH_NCCL_ENABLE_TIMING=1, gives them)")
    off = pl.col("offset_ns").fill_null(0)
    out = sync.join(hosts.select("rank", "offset_ns"), on="rank", how="left").with_columns(
        arrival=pl.col("arrival") - off, start=pl.col("start") - off, complete=pl.col("complete") - off,
    ).drop("offset_ns")
    return out, clock, notes


__all__ = ["CLOCK", "align", "host_offsets"]
