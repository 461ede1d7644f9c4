"""Sync points: one row per rank and collective instance, from what a run recorded (issue 30 req 1).

* Flight Recorder entries (every step, the collector's periodic dumps): the host's call of each collective
  (``time_created_ns``), per process group and sequence id, stepped by the rank's ``steps.jsonl``; NCCL's timed
  entries also give the device start and completion;
* a profiler window's collectives (``gloo:*`` spans, NCCL kernels): the execution start and completion of the same
  rank's same call (its group's sequence aligned with the Flight Recorder's by call time and operation), or,
  without any Flight Recorder entry, the sync points themselves;
* without either for a step, each collector step's start (:func:`step_points`).

Point-to-point calls are left out (their waits are a pipeline's bubble).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import polars as pl

#: One row per rank and collective instance (``seq``: the group's sequence id; from Kineto alone: the order of the
#: call in its group and step, with ``key_step`` the step it is matched in, else -1).
SYNC_POINTS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "pg_name": pl.String,
    "key_step": pl.Int32,
    "seq": pl.Int64,
    "op": pl.String,
    "step": pl.Int32,          # the training step of the instance (the earliest over its ranks)
    "arrival": pl.Int64,       # the host's call (ns)
    "start": pl.Int64,         # execution start on the device (an NCCL kernel), null where unknown; on gloo
    #                            null: a rank's arrival is its host's call, as the others' wait for it is (its
    #                            gloo thread starting later on a busy host is the collective's own queueing)
    "complete": pl.Int64,      # completion, null where unknown
    "source": pl.String,       # fr | kineto | fr+kineto
    "call_site": pl.String,    # file:line in function of the user's call (Flight Recorder stacks), else null
}

_P2P = ("send", "recv", "sendrecv", "isend", "irecv", "p2p")


def _empty(schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=dict(schema))


def _fr_points(entries: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    from workbench.analyses.hangs import entry_steps

    e = entries.filter(~pl.col("is_p2p").fill_null(False) & pl.col("seq").is_not_null()
                       & pl.col("created_ns").is_not_null())
    if e.is_empty():
        return _empty(SYNC_POINTS)
    e = e.sort("rank", "pg_name", "seq").unique(["rank", "pg_name", "seq"], keep="first", maintain_order=True)
    e = entry_steps(e, steps) if steps is not None and not steps.is_empty() else e.with_columns(
        step=pl.lit(None, pl.Int32))
    site = pl.col("call_site") if "call_site" in e.columns else pl.lit(None, pl.String)
    return e.select(
        "rank", "pg_name", key_step=pl.lit(-1, pl.Int32), seq="seq", op=pl.col("op").cast(pl.String),
        step=pl.col("step").min().over("pg_name", "seq"), arrival="created_ns",
        start=pl.when(pl.col("backend").cast(pl.String) == "nccl").then(pl.col("started_ns")),
        complete="completed_ns", source=pl.lit("fr"), call_site=site,
    ).cast(SYNC_POINTS)  # type: ignore[arg-type]


def _kineto_points(collectives: pl.DataFrame) -> pl.DataFrame:
    c = collectives.filter(~pl.col("collective").cast(pl.String).str.to_lowercase().is_in(_P2P))
    if c.is_empty():
        return _empty(SYNC_POINTS)
    gloo = pl.col("backend").cast(pl.String).fill_null("") == "gloo"     # its "kernel" is the gloo thread's span
    return c.with_columns(pl.col("pg_name").fill_null(""), pl.col("step").fill_null(-1)).sort("start").select(
        "rank", "pg_name", key_step="step",
        seq=(pl.col("start").rank("ordinal").over("rank", "pg_name", "step") - 1).cast(pl.Int64),
        op=pl.col("collective").cast(pl.String), step="step", arrival="start",
        start=pl.when(~gloo).then(pl.col("kernel_start")),
        complete=pl.coalesce("kernel_end", "end"), source=pl.lit("kineto"), call_site=pl.lit(None, pl.String),
    ).cast(SYNC_POINTS)  # type: ignore[arg-type]


#: The process group name of the step starts used as sync points where no collective was recorded.
STEP_STARTS = "steps"


def step_points(steps: pl.DataFrame, covered: set[int]) -> pl.DataFrame:
    """Each collector step not in ``covered`` as a sync point of group :data:`STEP_STARTS`: its start (after the
    batch wait) is the arrival and the rank's end of the step before is its exit. Without any collective recorded
    there, a rank that starts a step late (its data, code between steps) is the one the others wait for in that
    step's collectives (as long as every step has one)."""
    s = steps.filter(pl.col("source").cast(pl.String) == "collector") if "source" in steps.columns else steps
    s = s.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null()).sort("rank", "step")
    s = s.with_columns(_prev_end=pl.col("end").shift(1).over("rank"), _prev_step=pl.col("step").shift(1).over("rank"))
    s = s.filter(~pl.col("step").is_in(sorted(covered)) & (pl.col("_prev_step") == pl.col("step") - 1))
    if s.is_empty():
        return _empty(SYNC_POINTS)
    # the exit of instance k is recorded as the completion of instance k-1 (the rank's end of the step before)
    nxt = s.select("rank", step=pl.col("step") - 1, complete="_prev_end")
    out = s.select("rank", "step", arrival="start").join(nxt, on=["rank", "step"], how="full", coalesce=True)
    return out.select(
        "rank", pg_name=pl.lit(STEP_STARTS), key_step=pl.lit(-1, pl.Int32), seq=pl.col("step").cast(pl.Int64),
        op=pl.lit("step start"), step="step", arrival="arrival", start=pl.lit(None, pl.Int64), complete="complete",
        source=pl.lit("steps"), call_site=pl.lit(None, pl.String),
    ).filter(pl.col("arrival").is_not_null()).cast(SYNC_POINTS)  # type: ignore[arg-type]


def sync_points(entries: pl.DataFrame | None, collectives: pl.DataFrame | None,
                steps: pl.DataFrame | None) -> pl.DataFrame:
    """One row per rank and collective instance (schema :data:`SYNC_POINTS`), point-to-point calls left out.

    From the Flight Recorder entries when there are any (every step); a profiler window's collective gives the
    entry it is (:func:`align_calls`: the two sequences aligned in order by call time and operation) its execution
    start and completion. Without entries, the profiler's collectives alone, and for the
    steps with no collective recorded the collector's step starts (:func:`step_points`)."""
    fr = _fr_points(entries, steps) if entries is not None and not entries.is_empty() else _empty(SYNC_POINTS)
    kt = _kineto_points(collectives) if collectives is not None and not collectives.is_empty() else \
        _empty(SYNC_POINTS)
    if fr.is_empty():
        if steps is not None and not steps.is_empty() and not kt.is_empty():   # a window shows a collective a step
            covered = set(kt["step"].drop_nulls().unique().to_list())
            kt = pl.concat([kt, step_points(steps, covered)])
        return kt.sort("pg_name", "key_step", "seq", "rank")
    if kt.is_empty():
        return fr.sort("pg_name", "key_step", "seq", "rank")
    pairs = align_calls(fr, kt).with_columns(_matched=pl.lit(True))
    j = fr.join(pairs, on=["rank", "pg_name", "seq"], how="left")
    ok = pl.col("_matched").fill_null(False)
    return j.with_columns(
        start=pl.when(ok).then(pl.coalesce("start", "_kstart")).otherwise("start"),
        complete=pl.when(ok).then(pl.coalesce("complete", "_kcomplete")).otherwise("complete"),
        source=pl.when(ok).then(pl.lit("fr+kineto")).otherwise(pl.col("source")),
    ).select(list(SYNC_POINTS)).sort("pg_name", "key_step", "seq", "rank")


#: Aligning a profiler window's collectives with the Flight Recorder's: leaving a window's collective unmatched
#: costs this much (ns); a pair whose calls are further apart than this, or whose operations differ, is never made.
UNMATCHED_NS = 50_000_000


def _op_key(op: str | None) -> str:
    """An operation name both sources agree on: ``all_reduce``, ``allreduce``, ``gloo:all_reduce`` → ``allreduce``."""
    o = (op or "").lower().rpartition(":")[2]
    return "".join(ch for ch in o if ch.isalnum())


def align_calls(fr: pl.DataFrame, kt: pl.DataFrame) -> pl.DataFrame:
    """Which Flight Recorder entry each profiler collective is, per rank and process group: the two sequences are
    aligned in order over the whole run (not step by step: under load a gloo span can be stepped into the
    neighbouring step), each profiler collective matched to at most one entry of the same operation, keeping both
    orders, minimising the summed distance between the profiler's start and the entry's call, with
    :data:`UNMATCHED_NS` for a profiler collective left unmatched. Columns: ``rank``,
    ``pg_name``, ``seq`` (the entry's), ``_kstart``, ``_kcomplete``."""
    schema = {"rank": pl.Int32, "pg_name": pl.String, "seq": pl.Int64, "_kstart": pl.Int64, "_kcomplete": pl.Int64}
    rows: list[tuple[int, str, int, int | None, int | None]] = []
    fr_by = {k: g for k, g in fr.sort("seq").group_by(["rank", "pg_name"], maintain_order=True)}
    for (rank, pg), g in kt.sort("arrival").group_by(["rank", "pg_name"], maintain_order=True):
        f = fr_by.get((rank, pg))
        if f is None or f.is_empty():
            continue
        lo, hi = int(g["arrival"].min()) - UNMATCHED_NS, int(g["arrival"].max()) + UNMATCHED_NS
        f = f.filter((pl.col("arrival") >= lo) & (pl.col("arrival") <= hi))
        if f.is_empty():
            continue
        k_at = g["arrival"].to_numpy().astype(np.int64)
        f_at = f["arrival"].to_numpy().astype(np.int64)
        same = np.array([[_op_key(a) == _op_key(b) for b in f["op"].to_list()] for a in g["op"].to_list()])
        cost = np.where(same, np.abs(k_at[:, None] - f_at[None, :]), UNMATCHED_NS + 1)
        for i, jx in _monotone_match(cost, UNMATCHED_NS):
            rows.append((int(rank), str(pg), int(f["seq"][jx]), g["start"][i], g["complete"][i]))
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def _monotone_match(cost: np.ndarray, skip: int) -> list[tuple[int, int]]:
    """The order-keeping one-to-one matching of rows (all to be matched, or left out at ``skip`` each) to columns
    (any may be left out) of least summed ``cost``; pairs costing more than ``skip`` are never made."""
    n, m = cost.shape
    big = np.iinfo(np.int64).max // 4
    c = np.where(cost > skip, big, cost).astype(np.int64)
    f = np.zeros((n + 1, m + 1), dtype=np.int64)     # f[i, j]: the first i rows against the first j columns
    for i in range(1, n + 1):
        take = np.concatenate(([big], np.minimum(f[i - 1, :-1] + c[i - 1], big)))
        f[i] = np.minimum.accumulate(np.minimum(f[i - 1] + skip, take))
    out = []
    i, j = n, m
    while i > 0 and j >= 0:
        if j > 0 and f[i, j] == f[i, j - 1]:
            j -= 1
        elif f[i, j] == f[i - 1, j] + skip:
            i -= 1
        else:
            out.append((i - 1, j - 1))
            i, j = i - 1, j - 1
    return out[::-1]


__all__ = ["STEP_STARTS", "SYNC_POINTS", "align_calls", "step_points", "sync_points"]
