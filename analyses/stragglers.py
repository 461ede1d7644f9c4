"""Stragglers: which rank holds the others back, since when, steady or growing, and what it costs.

Synchronous training makes every rank wait for the slowest at each collective, so step *durations* look alike on
every rank; what differs is when each rank gets to the synchronisation points. Two signals:

* steps (STEPS, ``source="collector"`` for every step, or ``"profiler"``): a rank that starts its steps late
  (slow data loading, a slow previous step outside the collectives) is late at every collective that follows.
  Per step, ``lateness_ns`` = own start - median start over ranks; the latest rank *holds the others back* by
  ``held_back_ns`` = its start - the second-latest start.
* collectives (profiled steps): the rank arriving last at a collective holds it back by last - second-to-last
  arrival (:mod:`workbench.analyses.collectives`).

A rank is a straggler when it is the one holding back in at least half of the steps (or collectives) and the time
it holds back is at least ``min_share`` of the step time. Its cost is the summed ``held_back_ns``: the step time
the job would save if that rank kept up with the next-slowest.
"""

from __future__ import annotations

import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, make_finding
from workbench.analyses.kinds import Kind, StragglerEvidence
from workbench.analyses.metrics import NOISE_Z, STEP_NS, consistency_z, robust_upper
from workbench.format import duration


def step_times(steps: pl.DataFrame, source: str | None = None) -> pl.DataFrame:
    """Step time per rank over time, compared with the other ranks.

    Columns: ``rank``, ``source``, ``step``, ``start``, ``end``, ``dur``, ``data_wait_ns``, ``device_ns``,
    ``step_ns`` (the step time, :mod:`~workbench.analyses.metrics`' definition: duration + data wait),
    ``ranks`` (ranks with this step), ``median_step_ns`` (over ranks), ``excess_ns`` (step_ns - median_step_ns),
    ``lateness_ns`` (start - median start over ranks), ``is_latest`` (this rank started the step last),
    ``held_back_ns`` (for the latest rank: its start - the second-latest start; 0 for the others).
    """
    s = steps.with_columns(pl.col("source").cast(pl.String))
    if source is not None:
        s = s.filter(pl.col("source") == source)
    key = ["source", "step"]
    second = pl.col("start").sort(descending=True).slice(1, 1).first().over(key)
    out = s.with_columns(step_ns=STEP_NS).with_columns(
        ranks=pl.col("rank").n_unique().over(key),
        median_step_ns=pl.col("step_ns").median().over(key),
        _median_start=pl.col("start").median().over(key),
        _latest=pl.col("start").max().over(key),
        _second=second,
    ).with_columns(
        excess_ns=(pl.col("step_ns") - pl.col("median_step_ns")).cast(pl.Int64),
        lateness_ns=(pl.col("start") - pl.col("_median_start")).cast(pl.Int64),
        is_latest=(pl.col("start") == pl.col("_latest")) & (pl.col("ranks") > 1),
    ).with_columns(
        held_back_ns=pl.when(pl.col("is_latest")).then(pl.col("start") - pl.col("_second")).otherwise(0)
        .fill_null(0).cast(pl.Int64),
    )
    return out.select(
        "rank", "source", "step", "start", "end", "dur", "data_wait_ns", "device_ns", "step_ns", "ranks",
        "median_step_ns",
        "excess_ns", "lateness_ns", "is_latest", "held_back_ns",
    ).sort("source", "step", "rank")


def _trend(per_step: pl.DataFrame, value: str) -> pl.DataFrame:
    """Least-squares slope of ``value`` against ``step`` per rank, and steady / growing / shrinking."""
    x, y = pl.col("step").cast(pl.Float64), pl.col(value).cast(pl.Float64)
    cov = ((x - x.mean()) * (y - y.mean())).mean()
    var = ((x - x.mean()) ** 2).mean()
    return per_step.group_by("rank").agg(
        slope_ns_per_step=pl.when(var > 0).then(cov / var).otherwise(0.0),
        _span=(x.max() - x.min()),
        _mean=y.mean(),
    ).with_columns(
        change_ns=pl.col("slope_ns_per_step") * pl.col("_span"),
    ).with_columns(
        trend=pl.when(pl.col("change_ns") > 0.5 * pl.col("_mean").abs()).then(pl.lit("growing"))
        .when(pl.col("change_ns") < -0.5 * pl.col("_mean").abs()).then(pl.lit("shrinking"))
        .otherwise(pl.lit("steady"))
    ).drop("_span", "_mean")


def _after_warmup(steps: pl.DataFrame, warmup_steps: int) -> pl.DataFrame:
    """``steps`` without each source's first ``warmup_steps`` steps (first compiles, set-up), when enough remain."""
    first = pl.col("step").min().over("source")
    n = pl.col("step").n_unique().over("source")
    return steps.filter((n < 3 * warmup_steps) | (pl.col("step") >= first + warmup_steps))


def straggler_ranks(
    steps: pl.DataFrame, matched: pl.DataFrame | None = None, min_hold_ns: int = 0, *,
    warmup_steps: int = 1, use_step_starts: bool = True, exclude_steps: frozenset[int] | set[int] = frozenset(),
) -> pl.DataFrame:
    """Per rank and signal, how often and how much it holds the others back.

    The first ``warmup_steps`` steps (compiles, set-up) are left out when at least three times as many exist.
    ``use_step_starts=False`` ignores step starts (pipeline stages start their steps at offsets set by the
    schedule; that time is a bubble, not a straggler) and keeps the collective signal. ``exclude_steps``: steps
    left out of both signals (steps where some rank compiled: that rank's lateness is the compile, a cause of its
    own, not a straggler).

    Columns: ``rank``, ``signal`` (``"collector_steps"``, ``"profiler_steps"`` or ``"collectives"``), ``events``
    (steps or collective instances seen), ``held_count`` (times it was the one holding back), ``held_pct``,
    ``held_back_ns`` (total), ``step_time_ns`` (summed median step time over the same steps, or summed collective
    time for collectives), ``held_share_pct`` (held_back / step time), ``first_step`` (first step where it held
    back more than ``min_hold_ns``), ``mean_data_wait_ns`` (collector steps), ``slope_ns_per_step``,
    ``change_ns``, ``trend`` (``steady`` / ``growing`` / ``shrinking`` of its per-step held-back time),
    ``typical_held_ns`` (median held-back time when it held back × times it held back), ``typical_share_pct``,
    ``median_data_wait_ns``, ``held_steps`` (steps where it held the others back), ``held_since_pct`` (share of
    the events since ``first_step`` where it held back), ``events_since`` (events since ``first_step``),
    ``held_z`` (:func:`~workbench.analyses.metrics.consistency_z` of its per-step lateness since ``first_step``:
    its step start, or median collective arrival, minus the median over ranks; large when it is late step after
    step, steady or growing, small when it is late now and then by chance).
    """
    parts = []
    if exclude_steps:
        steps = steps.filter(~pl.col("step").is_in(sorted(exclude_steps)))
        if matched is not None and not matched.is_empty():
            matched = matched.filter(~pl.col("step").is_in(sorted(exclude_steps)))
    if not steps.is_empty():
        steps = _after_warmup(steps.with_columns(pl.col("source").cast(pl.String)), warmup_steps)
    for source, signal in (("collector", "collector_steps"), ("profiler", "profiler_steps")):
        if not use_step_starts or (source == "profiler" and parts):
            break  # profiler steps are a subset of the collector's: one step signal, the fuller one
        st = step_times(steps, source) if not steps.is_empty() else pl.DataFrame()
        if st.is_empty() or st["ranks"].max() < 2:
            continue
        st = st.filter(pl.col("ranks") > 1)
        # step time per step (``metrics``' definition), median over ranks
        steps_total = st.group_by("step").agg(pl.col("step_ns").median()).get_column("step_ns").sum()
        agg = st.group_by("rank").agg(
            events=pl.len(),
            held_count=pl.col("is_latest").sum().cast(pl.UInt32),
            held_back_ns=pl.col("held_back_ns").sum(),
            typical_held_ns=pl.col("held_back_ns").filter(pl.col("is_latest")).median().fill_null(0)
            * pl.col("is_latest").sum(),
            first_step=pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min(),
            _since=(pl.col("step") >= pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min()).sum(),
            _held_since=((pl.col("step") >= pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min())
                         & pl.col("is_latest")).sum(),
            mean_data_wait_ns=pl.col("data_wait_ns").mean(),
            median_data_wait_ns=pl.col("data_wait_ns").median(),
            held_steps=pl.col("step").filter(pl.col("is_latest") & (pl.col("held_back_ns") > min_hold_ns)).sort(),
            _seq=pl.col("lateness_ns").sort_by("step"), _seq_steps=pl.col("step").sort(),
        ).with_columns(step_time_ns=pl.lit(int(steps_total), pl.Int64), signal=pl.lit(signal))
        parts.append(agg.join(_trend(st, "held_back_ns"), on="rank", how="left"))
    if matched is not None and not matched.is_empty():
        m = matched.filter(~pl.col("p2p") & pl.col("complete") & (pl.col("ranks_seen") > 1))
        if not m.is_empty():
            key = ["pg_name", "pg_ranks", "step", "order"]
            inst = m.group_by(key).agg(
                last_rank=pl.col("rank").sort_by("arrival").last(),
                held=pl.col("arrival").sort().tail(2).diff().last().fill_null(0),
                dur=pl.col("dur_ns").min(),
            )
            ranks = m.select("rank").unique()
            per_step = (
                ranks.join(inst.select("step").unique(), how="cross")
                .join(inst.group_by("last_rank", "step").agg(held_back_ns=pl.col("held").sum(), n=pl.len()),
                      left_on=["rank", "step"], right_on=["last_rank", "step"], how="left")
                .with_columns(pl.col("held_back_ns").fill_null(0), pl.col("n").fill_null(0))
                .join(inst.group_by("step").agg(total_n=pl.len()), on="step", how="left")
                .join(m.with_columns(_late=pl.col("arrival") - pl.col("arrival").median().over(key))
                      .group_by("rank", "step").agg(lateness_ns=pl.col("_late").median()),
                      on=["rank", "step"], how="left")
            )
            total = int(inst["dur"].sum() + inst["held"].sum())
            agg = per_step.group_by("rank").agg(
                held_count=pl.col("n").sum().cast(pl.UInt32),
                held_back_ns=pl.col("held_back_ns").sum(),
                typical_held_ns=pl.col("held_back_ns").filter(pl.col("n") > 0).median().fill_null(0)
                * (pl.col("n") > 0).sum(),
                first_step=pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min(),
                held_steps=pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).unique().sort(),
                _since=pl.col("total_n").filter(
                    pl.col("step") >= pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min()).sum(),
                _held_since=pl.col("n").filter(
                    pl.col("step") >= pl.col("step").filter(pl.col("held_back_ns") > min_hold_ns).min()).sum(),
                _seq=pl.col("lateness_ns").sort_by("step"), _seq_steps=pl.col("step").sort(),
            ).with_columns(
                events=pl.lit(inst.height, pl.UInt32), step_time_ns=pl.lit(total, pl.Int64),
                mean_data_wait_ns=pl.lit(None, pl.Float64), median_data_wait_ns=pl.lit(None, pl.Float64),
                signal=pl.lit("collectives"),
            )
            parts.append(agg.join(_trend(per_step.drop_nulls("step"), "held_back_ns"), on="rank", how="left"))
    if not parts:
        return pl.DataFrame()
    cols = ["rank", "signal", "events", "held_count", "held_back_ns", "typical_held_ns", "step_time_ns", "first_step",
            "mean_data_wait_ns", "median_data_wait_ns", "held_steps", "slope_ns_per_step", "change_ns", "trend",
            "_seq", "_seq_steps", "_since", "_held_since"]
    out = pl.concat([p.select(cols).cast({"events": pl.UInt32, "held_back_ns": pl.Int64, "typical_held_ns": pl.Int64,
                                          "median_data_wait_ns": pl.Float64, "held_steps": pl.List(pl.Int32),
                                          "_seq": pl.List(pl.Float64), "_seq_steps": pl.List(pl.Int32)})
                     for p in parts])
    z = [consistency_z([v for v, st in zip(seq or [], steps_ or []) if first is not None and st >= first])
         for seq, steps_, first in zip(out["_seq"].to_list(), out["_seq_steps"].to_list(), out["first_step"].to_list())]
    out = out.with_columns(held_z=pl.Series(z, dtype=pl.Float64)).drop("_seq", "_seq_steps")
    share = pl.when(pl.col("step_time_ns") > 0)
    return out.with_columns(
        held_pct=100.0 * pl.col("held_count") / pl.col("events"),
        held_since_pct=pl.when(pl.col("_since") > 0).then(100.0 * pl.col("_held_since") / pl.col("_since")),
        events_since=pl.col("_since").cast(pl.UInt32),
        held_share_pct=share.then(100.0 * pl.col("held_back_ns") / pl.col("step_time_ns")),
        typical_share_pct=share.then(100.0 * pl.col("typical_held_ns") / pl.col("step_time_ns")),
    ).drop("_since", "_held_since").sort("signal", "held_back_ns", descending=[False, True])


#: With at least this many other ranks, a straggler may stand out of the other ranks instead of its own steps.
MIN_PEERS = 4


def _stands_out(ranks: pl.DataFrame, rank: int, signal: str, z: float | None, min_z: float) -> bool:
    """The rank's holding back is not noise: it is late consistently step after step (``held_z`` ≥ ``min_z``),
    or, with ≥ ``MIN_PEERS`` other ranks, its held-back share is above the top of theirs
    (:func:`~workbench.analyses.metrics.robust_upper`)."""
    if z is None or z >= min_z:
        return True
    peers = ranks.filter((pl.col("signal") == signal) & (pl.col("rank") != rank))["held_share_pct"].fill_null(0)
    mine = ranks.filter((pl.col("signal") == signal) & (pl.col("rank") == rank))["held_share_pct"].fill_null(0)
    return peers.len() >= MIN_PEERS and mine.len() > 0 and float(mine[0]) > robust_upper(peers.to_list())


def straggler_findings(ranks: pl.DataFrame, min_share_pct: float = 1.0, min_held_pct: float = 50.0,
                       min_events: int = 5, min_z: float = NOISE_Z) -> list[Finding]:
    """Findings of kind ``straggler``: one per straggling rank, with the evidence of every signal that names it.

    A rank must hold back in at least ``min_held_pct`` % of the events and, since its first step holding back
    (at least ``min_events`` steps or collectives), at least halfway between chance (1/n with n ranks) and always
    (75 % with 2 ranks, 67 % with 3); both its total and its typical (median held time × events) share of the step
    time must reach ``min_share_pct``, so one long stall does not make a straggler; and its held-back time must
    stand out of the run's own noise (:func:`_stands_out`): its lateness' ``held_z`` is at least ``min_z`` over the
    steps, or, with ≥ 4 other ranks, its held-back share tops theirs, so a rank that is late now and then under CPU
    contention is not one. Cost, measured: the signal's
    ``typical_held_ns`` (median held-back time × times it held back), the largest among its signals. Slow data
    loading is named when the rank's median data wait is far above the others' median.
    """
    if ranks is None or ranks.is_empty():
        return []
    # being last by chance happens 1/n of the time: require at least halfway from chance to always
    n = pl.col("rank").n_unique().over("signal").cast(pl.Float64)
    chance_pct = 100.0 * (1.0 / n + 0.5 * (1.0 - 1.0 / n))
    hits = ranks.filter((pl.col("events_since") >= min_events) & (pl.col("held_pct") >= min_held_pct)
                        & (pl.col("held_since_pct").fill_null(0) >= chance_pct)
                        & (pl.col("held_share_pct") >= min_share_pct)
                        & (pl.col("typical_share_pct") >= min_share_pct))
    hits = hits.filter(pl.Series([_stands_out(ranks, r, sig, z, min_z) for r, sig, z in
                                  hits.select("rank", "signal", "held_z").iter_rows()], dtype=pl.Boolean))
    out = []
    for rank in sorted(set(hits["rank"].to_list())):
        ev = hits.filter(pl.col("rank") == rank).sort("typical_held_ns", descending=True)
        best = ev.row(0, named=True)
        wait = best["median_data_wait_ns"]
        others = ranks.filter((pl.col("rank") != rank) & (pl.col("signal") == best["signal"]))
        other_wait = others["median_data_wait_ns"].drop_nulls().median() if not others.is_empty() else None
        why = ""
        if wait is not None and other_wait is not None and wait > 2 * max(other_wait, 1) and wait - other_wait > 1e6:
            why = (f" Its data loading wait is {duration(wait)} per step (median) vs {duration(other_wait)} on "
                   "the others: slow data loading.")
        since = f" since step {best['first_step']}" if best["first_step"] is not None else ""
        out.append(make_finding(
            Kind.STRAGGLER,
            f"Rank {rank} holds the other ranks back{since} ({best['trend']}): it was last in "
            f"{best['held_pct']:.0f}% of {best['events']} {best['signal'].replace('_', ' ')}, typically costing "
            f"{duration(best['typical_held_ns'])} in all ({best['typical_share_pct'] or 0:.1f}% of the "
            f"{'step' if best['signal'] != 'collectives' else 'collective'} time).{why}",
            StragglerEvidence(
                rank=int(rank), signal=best["signal"], events=int(best["events"]), held_count=int(best["held_count"]),
                held_back_ns=int(best["held_back_ns"]), held_share_pct=best["held_share_pct"],
                typical_share_pct=best["typical_share_pct"], first_step=best["first_step"], trend=best["trend"],
                held_steps=tuple(best["held_steps"] or ()),
                data_wait_median_ns=None if wait is None else int(wait),
                others_data_wait_median_ns=None if other_wait is None else int(other_wait),
                signals=tuple(ev.to_dicts())),
            Cost.measured(best["typical_held_ns"], "median time it held the others back (its step start or "
                          "collective arrival minus the second-latest) × the times it did, so one stall does not "
                          "count as straggling"),
            ranks=[rank], steps=[best["first_step"]] if best["first_step"] is not None else [],
            source="stragglers"))
    return out


@register_detector(Kind.STRAGGLER, needs=("stragglers",), order=30)
def _detect(x: Inputs) -> list[Finding[StragglerEvidence]]:
    return straggler_findings(x.tables["stragglers"])
