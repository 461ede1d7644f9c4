"""The cross-rank critical path: at every collective, who waited for whom, and what the late rank was doing.

Layers (docs/critical-path.md):

* :func:`workbench.analyses.sync_points.sync_points` — one row per rank and collective instance: the host's call
  (Flight Recorder ``time_created_ns``, every step), the device's execution start where known (an NCCL kernel;
  NCCL's Flight Recorder with timing) and the completion (those, or a profiler window's ``gloo:*`` span: a gloo
  rank arrives at its call), matched across ranks by process
  group and sequence id, and stepped by the rank's ``steps.jsonl``.
* :func:`workbench.analyses.clock.align` — every time on one clock (per-host offsets from the completions).
* :func:`instance_table` — per rank and instance: its *effective arrival* (the execution start where known, else
  the later of its call and its exit from the group's previous collective: a collective cannot start before the
  one before it ended, so a burst of calls is not counted as several waits), its wait (last arrival minus its
  own), its lateness over the on-time rank (the lower median arrival) and its own time since the previous exit.
* :func:`noise_table` — the run's own noise per slot (process group and position in the step): ``NOISE_Z`` ×
  the median over ranks of each rank's own step-to-step spread of its arrival relative to the on-time rank (the
  width of its tightest half), so a rank late every step is not noise, and nor is one late now and then.
* :func:`blame` — the layered counterfactual: walking down from the last arrival, the latest rank is charged
  its arrival minus the next one's, the next the same, down to the first rank whose lateness is within noise;
  every rank that arrived before a layer waited through it. Waits in noise stay unattributed.
* :func:`attribute` — what each charged rank did in the time that made it late: its interval since the previous
  exit is cut into activities (:mod:`workbench.analyses.activities`), so is every on-time rank's, and the layer is
  split over the categories (and labels) in proportion to the charged rank's excess over the on-time median.

:func:`critical_path` runs them all on a run (:class:`CriticalPath`: the tables, the who-held-whom matrix, the
per-rank lateness). The findings are built in :mod:`workbench.analyses.late_ranks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from workbench.analyses import activities as act
from workbench.analyses.metrics import NOISE_Z
from workbench.analyses.sync_points import SYNC_POINTS, sync_points

#: Below this the noise threshold is never put (ns): arrival differences under it are not blamed on anyone.
MIN_NOISE_NS = 200_000
#: On-time ranks compared with a late one (their median): at most this many, the closest to the on-time arrival.
MAX_ON_TIME = 8
#: An untraced gap this long inside a profiler window is named after the host events around it.
NAMED_GAP_NS = 1_000_000
#: The label of untraced time during a profiler export beyond what the export's CPU time explains.
EXPORT_UNTRACED = "during the profiler's trace export"
#: A gloo rank's time between its call of a collective and the backend thread's start of it: inside its own call.
QUEUED_LABEL = "called, queued for the backend's thread"
#: Activities whose excess is below this share of a layer's total excess are left out of its split.
MIN_SHARE = 0.05


def _empty(schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=dict(schema))


# ---------------------------------------------------------------------------------------------- instances
#: Per rank and instance (:func:`instance_table`).
INSTANCES: dict[str, pl.DataType] = {
    "rank": pl.Int32, "pg_name": pl.String, "key_step": pl.Int32, "seq": pl.Int64, "op": pl.String,
    "step": pl.Int32, "slot": pl.Int32,
    "exit_prev": pl.Int64,     # when the rank left the group's previous collective (its completion, else the
    #                            previous instance's last arrival); null for the group's first instance
    "exit_first": pl.Int64,    # the earliest exit of any rank from that previous collective: its data was there;
    #                            a rank that left later spent the rest on its own (its completion callback
    #                            waiting for the interpreter lock its main thread held)
    "eff_arrival": pl.Int64,   # effective arrival (module docstring)
    "call": pl.Int64,          # the host's own call of it (aligned); before eff_arrival where execution began later
    "last_arrival": pl.Int64,
    "on_time": pl.Int64,       # the lower median of the instance's effective arrivals
    "wait_ns": pl.Int64,       # last arrival - own effective arrival
    "lateness_ns": pl.Int64,   # own effective arrival - on_time (0 for the on-time ranks and those before)
    "own_ns": pl.Int64,        # own time since the previous exit (effective arrival - exit_prev)
    "position": pl.Int32,      # 0 = first to arrive
    "ranks_seen": pl.Int32,
    "complete_ns": pl.Int64,   # own completion where known
    "call_site": pl.String,
}


def instance_table(sync: pl.DataFrame) -> pl.DataFrame:
    """Per rank and instance: effective arrival, wait, lateness, own time since the previous exit (schema
    :data:`INSTANCES`). Instances not seen on every rank of their group are left out (nothing is blamed there)."""
    if sync.is_empty():
        return _empty(INSTANCES)
    rows: list[pl.DataFrame] = []
    for (pg,), g in sync.group_by(["pg_name"], maintain_order=True):
        rows.append(_group_instances(str(pg), g))
    out = pl.concat(rows, how="vertical_relaxed") if rows else _empty(INSTANCES)
    out = out.select(list(INSTANCES)).cast(INSTANCES)  # type: ignore[arg-type]
    return out.sort("pg_name", "key_step", "seq", "rank")


def _group_instances(pg: str, g: pl.DataFrame) -> pl.DataFrame:
    """:func:`instance_table` for one process group (a matrix of instances × ranks, walked in order)."""
    ranks = sorted(set(g["rank"].to_list()))
    col = {r: i for i, r in enumerate(ranks)}
    keys = g.select("key_step", "seq").unique().sort("key_step", "seq")
    kidx = {(a, b): i for i, (a, b) in enumerate(keys.iter_rows())}
    n_k, n_r = keys.height, len(ranks)
    base = int(g.select(pl.min_horizontal(pl.col("arrival").min())).item())
    nan = np.full((n_k, n_r), np.nan)
    arr, start, comp = nan.copy(), nan.copy(), nan.copy()
    for r, ks, sq, a, s, c in g.select("rank", "key_step", "seq", "arrival", "start", "complete").iter_rows():
        i, j = kidx[(ks, sq)], col[r]
        arr[i, j] = (a - base) if a is not None else np.nan
        start[i, j] = (s - base) if s is not None else np.nan
        comp[i, j] = (c - base) if c is not None else np.nan
    seen = ~np.isnan(arr)
    full = seen.all(axis=1)
    eff = np.full((n_k, n_r), np.nan)
    exit_prev = np.full((n_k, n_r), np.nan)
    exit_first = np.full(n_k, np.nan)
    last = np.full(n_k, np.nan)
    prev_full = False
    for i in range(n_k):
        if i > 0 and prev_full:
            xp = np.where(np.isnan(comp[i - 1]), last[i - 1], comp[i - 1])
            exit_prev[i] = xp
            exit_first[i] = np.nanmin(xp)
            base_eff = np.fmax(arr[i], xp)
        else:
            base_eff = arr[i]
        eff[i] = np.where(np.isnan(start[i]), base_eff, start[i])
        eff[i][~seen[i]] = np.nan
        last[i] = np.nanmax(eff[i]) if seen[i].any() else np.nan
        prev_full = bool(full[i])
    # per instance: order, on-time (lower median), lateness
    order = np.argsort(np.where(np.isnan(eff), np.inf, eff), axis=1, kind="stable")
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(n_r)[None, :].repeat(n_k, axis=0), axis=1)
    n_seen = seen.sum(axis=1)
    srt = np.take_along_axis(eff, order, axis=1)
    m = np.maximum(0, (n_seen - 1) // 2)
    on_time = srt[np.arange(n_k), m]
    inst = keys.with_columns(pl.Series("_i", range(n_k)))
    meta = g.group_by("key_step", "seq").agg(pl.col("op").first(), pl.col("step").min())
    inst = inst.join(meta, on=["key_step", "seq"], how="left")
    slot = inst.with_columns(   # the k-th call of this op in its step: steps with extra calls keep their slots
        slot=(pl.col("seq").rank("ordinal").over("step", "op") - 1).cast(pl.Int32)).sort("_i")["slot"].to_numpy()
    site = {(r, ks, sq): cs for r, ks, sq, cs in g.select("rank", "key_step", "seq", "call_site").iter_rows()}
    ii, jj = np.nonzero(seen & full[:, None])
    keys_l = keys.rows()
    steps_l = inst.sort("_i")["step"].to_list()
    ops_l = inst.sort("_i")["op"].to_list()

    def back(x: float) -> int | None:
        return None if math.isnan(x) else int(round(x)) + base

    data = {
        "rank": [ranks[j] for j in jj], "pg_name": [pg] * len(ii),
        "key_step": [keys_l[i][0] for i in ii], "seq": [keys_l[i][1] for i in ii],
        "op": [ops_l[i] for i in ii], "step": [steps_l[i] for i in ii], "slot": [int(slot[i]) for i in ii],
        "exit_prev": [back(exit_prev[i, j]) for i, j in zip(ii, jj)],
        "exit_first": [back(exit_first[i]) for i in ii],
        "eff_arrival": [back(eff[i, j]) for i, j in zip(ii, jj)],
        "call": [back(arr[i, j]) for i, j in zip(ii, jj)],
        "last_arrival": [back(last[i]) for i in ii],
        "on_time": [back(on_time[i]) for i in ii],
        "wait_ns": [int(round(last[i] - eff[i, j])) for i, j in zip(ii, jj)],
        "lateness_ns": [max(0, int(round(eff[i, j] - on_time[i]))) for i, j in zip(ii, jj)],
        "own_ns": [None if math.isnan(exit_prev[i, j]) else int(round(eff[i, j] - exit_prev[i, j]))
                   for i, j in zip(ii, jj)],
        "position": [int(pos[i, j]) for i, j in zip(ii, jj)],
        "ranks_seen": [int(n_seen[i]) for i in ii],
        "complete_ns": [back(comp[i, j]) for i, j in zip(ii, jj)],
        "call_site": [site.get((ranks[j], keys_l[i][0], keys_l[i][1])) for i, j in zip(ii, jj)],
    }
    return pl.DataFrame(data, schema=INSTANCES)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- noise
def shorth_sigma(values: Iterable[float]) -> float:
    """A robust spread of ``values``: the length of the shortest interval that holds half of them, over 1.349
    (the standard deviation for a normal sample). It measures the width of the tightest cluster, not where it is,
    so a rank late in every step, or in half of them, does not widen it; 0 with fewer than 4 values."""
    v = np.sort(np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float))
    n = v.size
    if n < 4:
        return 0.0
    h = n // 2 + 1
    return float(np.min(v[h - 1:] - v[:n - h + 1]) / 1.349)


#: A rank's arrivals in a slot are one series when it has at least this many (4: a shortest half of 3).
SERIES_MIN = 4
#: A slot with fewer samples than this takes its noise from every slot of its group together.
MIN_NOISE_SAMPLES = 12
#: With fewer samples than this even together, the noise is this share of the ranks' median time between two
#: collectives (a profiler window of three steps cannot tell its own noise).
MIN_SHORTH = 8
FEW_SAMPLES_SHARE = 0.1


def noise_table(inst: pl.DataFrame, skip_steps: Iterable[int] = ()) -> pl.DataFrame:
    """The lateness each slot (process group, op and its k-th call in the step) tolerates as noise: ``noise_ns`` =
    max(:data:`MIN_NOISE_NS`, NOISE_Z × the median over the slot's ranks of each rank's own :func:`shorth_sigma`).

    A relative arrival is the arrival minus the instance's on-time (lower median) arrival, for the on-time rank its
    arrival minus the one before it (:func:`_relative_to_the_others`; with two ranks: the higher rank's arrival
    minus the lower's): it takes out what every rank shares (a slow step). Each rank's relative arrivals in a slot
    (at least :data:`SERIES_MIN`) are one series; its spread is the
    width of its tightest half (the shortest-half σ), so a rank late by the same amount every step, in most steps or
    in half of them, does not widen it (its late or its quiet values are one tight half), and the slot's noise is
    the median of its ranks' spreads. A slot with fewer than :data:`MIN_NOISE_SAMPLES` arrivals in its series takes
    the median over every series of its group (fewer than :data:`MIN_SHORTH` even so: :data:`FEW_SAMPLES_SHARE` of
    the ranks' median time between two collectives). (Pooling every rank's residuals from its lower quartile into
    one shortest half failed where one rank of two was late in most steps by varying amounts: its late values were
    half the pool and set the noise at the lateness itself. Leaving the on-time rank out of each instance failed
    where one rank of three was late by 0.5-1.3 s in three of seven steps: in its quiet steps it was often the
    on-time rank itself, so its series held mostly its late values, another rank's series was too short to count,
    and the median of the two left read 622 ms. Measuring every rank against the lower median of the *others*
    failed the other way: with two late ranks of four that reference is a late rank, and the bar rose 2-8x.)
    ``skip_steps``: steps left out (warm-up). Columns: ``pg_name``, ``slot``, ``op``, ``noise_ns``, ``samples``,
    ``pooled``."""
    schema = {"pg_name": pl.String, "slot": pl.Int32, "op": pl.String, "noise_ns": pl.Int64, "samples": pl.Int32,
              "pooled": pl.Boolean}
    x = inst.filter(pl.col("step").is_not_null() & pl.col("exit_prev").is_not_null()
                    & ~pl.col("step").is_in(list(skip_steps)))
    if x.is_empty():
        return pl.DataFrame(schema=schema)
    key = ["pg_name", "key_step", "seq"]
    x = x.with_columns(_rel=(pl.col("eff_arrival") - pl.col("on_time")).cast(pl.Float64),
                       _m=((pl.col("ranks_seen") - 1) // 2).cast(pl.Int32))
    two = x.filter(pl.col("ranks_seen") == 2).with_columns(
        _rel=(pl.col("eff_arrival") - pl.col("eff_arrival").sort_by("rank").first().over(key)).cast(pl.Float64),
    ).filter(pl.col("rank") != pl.col("rank").min().over(key))
    many = _relative_to_the_others(x.filter(pl.col("ranks_seen") > 2))
    cols = ["pg_name", "slot", "op", "rank", "_rel"]
    pool = pl.concat([two.select(cols), many.select(cols)])
    got = _noise_pass(x, pool)
    rows = [{"pg_name": pg, "slot": sl, "op": op, "noise_ns": int(n), "samples": k, "pooled": pooled}
            for (pg, sl, op), (n, k, pooled) in got.items()]
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


def _relative_to_the_others(x: pl.DataFrame) -> pl.DataFrame:
    """``x`` (instances of three ranks or more) with ``_rel``: each rank's arrival minus the instance's on-time
    (lower median) arrival, and for the on-time rank itself, whose difference is 0 by definition, its arrival minus
    the one just before it. Every rank then has a value in every step: a rank late in some steps and on time (in the
    middle) in the others keeps its quiet values in its series, and no late rank is ever the reference."""
    key = ["pg_name", "key_step", "seq"]
    before = x.select(*key, position=pl.col("position") + 1, _before="eff_arrival")
    y = x.join(before, on=[*key, "position"], how="left")
    on_time_rank = pl.col("position") == pl.col("_m")
    return y.with_columns(_rel=pl.when(on_time_rank & pl.col("_before").is_not_null())
                          .then(pl.col("eff_arrival") - pl.col("_before"))
                          .otherwise(pl.col("eff_arrival") - pl.col("on_time")).cast(pl.Float64)).drop("_before")


def _noise_pass(x: pl.DataFrame, pool: pl.DataFrame) -> dict[tuple[str, int, str], tuple[float, int, bool]]:
    """:func:`noise_table`'s numbers: per (group, slot, op), (noise, samples, pooled)."""
    pool = pool.with_columns(_n=pl.len().over("pg_name", "slot", "op", "rank")).filter(pl.col("_n") >= SERIES_MIN)
    spread: dict[tuple[str, int, str], list[float]] = {}     # per slot: each rank's own step-to-step spread
    count: dict[tuple[str, int, str], int] = {}
    for (pg, slot, op, _r), g in pool.group_by(["pg_name", "slot", "op", "rank"]):
        spread.setdefault((pg, slot, op), []).append(shorth_sigma(g["_rel"].to_list()))
        count[(pg, slot, op)] = count.get((pg, slot, op), 0) + g.height
    group: dict[str, list[float]] = {}
    group_n: dict[str, int] = {}
    for (pg, _s, _o), v in spread.items():
        group.setdefault(pg, []).extend(v)
        group_n[pg] = group_n.get(pg, 0) + count[(pg, _s, _o)]
    out: dict[tuple[str, int, str], tuple[float, int, bool]] = {}
    for (pg, slot, op), g in x.group_by(["pg_name", "slot", "op"], maintain_order=True):
        k = (pg, slot, op)
        pooled = count.get(k, 0) < MIN_NOISE_SAMPLES
        values, n = (group.get(pg, []), group_n.get(pg, 0)) if pooled else (spread[k], count[k])
        if n >= MIN_SHORTH and values:
            noise = NOISE_Z * float(np.median(values))
        else:   # too few to tell the run's noise: a share of the ranks' own time between collectives
            own = g["own_ns"].drop_nulls()
            noise = FEW_SAMPLES_SHARE * float(own.median()) if own.len() else 0.0
        out[k] = (max(float(MIN_NOISE_NS), noise), n, pooled)
    return out


def warmup_steps(inst: pl.DataFrame, steps: pl.DataFrame | None = None) -> set[int]:
    """The run's first step (its first compiles and lazy set-up; from ``steps`` when given, else the first step
    with a collective): not judged for lateness or noise."""
    if steps is not None and not steps.is_empty():
        st = steps["step"].drop_nulls()
    else:
        st = inst["step"].drop_nulls()
    return {int(st.min())} if st.len() else set()


# ---------------------------------------------------------------------------------------------- blame
#: The layers of the critical path (:func:`blame`): one row per charged rank and instance.
LAYERS: dict[str, pl.DataType] = {
    "culprit": pl.Int32, "pg_name": pl.String, "key_step": pl.Int32, "seq": pl.Int64, "step": pl.Int32,
    "op": pl.String, "layer_start": pl.Int64, "layer_end": pl.Int64, "layer_ns": pl.Int64,
    "lateness_ns": pl.Int64, "noise_ns": pl.Int64, "victims": pl.Int32, "call_site": pl.String,
}
#: Every wait, split by whom it was for (``culprit`` null: the part of the wait in noise, attributed to nobody).
WAITS: dict[str, pl.DataType] = {
    "victim": pl.Int32, "culprit": pl.Int32, "pg_name": pl.String, "key_step": pl.Int32, "seq": pl.Int64,
    "step": pl.Int32, "start": pl.Int64, "end": pl.Int64, "ns": pl.Int64,
}


def late_from(arrivals: list[int], noise: int) -> int:
    """The first late position (``arrivals`` sorted; ``len(arrivals)``: nobody is late). The arrivals fall into
    clusters where each follows the one before within ``noise``; the on-time ranks are the earliest clusters that
    hold at least a third of the ranks (so one rank early by itself does not make the others late, and when two of
    three ranks are late the third is the on-time one); every rank after them is late."""
    n = len(arrivals)
    need = -(-n // 3)
    for k in range(1, n):
        if k >= need and arrivals[k] - arrivals[k - 1] > noise:
            return k
    return n


def blame(inst: pl.DataFrame, noise: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(layers, waits): the layered counterfactual at every instance (module docstring). A layer is charged to a
    rank whose lateness over the on-time arrival is above its slot's noise; each rank that arrived before it
    waited through it. Waits below the first charged layer are unattributed (``culprit`` null)."""
    if inst.is_empty():
        return _empty(LAYERS), _empty(WAITS)
    nmap = {(p, s, o): n for p, s, o, n in noise.select("pg_name", "slot", "op", "noise_ns").iter_rows()} \
        if not noise.is_empty() else {}
    layers: list[dict[str, Any]] = []
    waits: list[dict[str, Any]] = []
    cols = ["rank", "pg_name", "key_step", "seq", "step", "slot", "op", "eff_arrival", "lateness_ns", "position",
            "call_site", "exit_prev"]
    for key, g in inst.select(cols).group_by(["pg_name", "key_step", "seq"], maintain_order=True):
        pg, ks, sq = key
        rows = sorted(g.iter_rows(named=True), key=lambda r: r["position"])
        if len(rows) < 2 or rows[0]["exit_prev"] is None and rows[0]["step"] is None:
            continue
        step, slot, op = rows[0]["step"], rows[0]["slot"], rows[0]["op"]
        thr = nmap.get((pg, slot, op), MIN_NOISE_NS)
        n = len(rows)
        charged_from = late_from([r["eff_arrival"] for r in rows], thr)   # positions >= charged_from are charged
        for j in range(charged_from, n):
            a, b = rows[j - 1]["eff_arrival"], rows[j]["eff_arrival"]
            if b - a <= 0:
                continue
            on_time = rows[max(0, (charged_from - 1) // 2)]["eff_arrival"]
            tie = [j]
            while tie[-1] + 1 < n and rows[tie[-1] + 1]["eff_arrival"] - rows[tie[-1]]["eff_arrival"] <= thr:
                tie.append(tie[-1] + 1)
            share = (b - a) // len(tie)
            for t in tie:
                layers.append({"culprit": rows[t]["rank"], "pg_name": pg, "key_step": ks, "seq": sq, "step": step,
                               "op": op, "layer_start": a, "layer_end": b, "layer_ns": share,
                               "lateness_ns": rows[t]["eff_arrival"] - on_time, "noise_ns": thr, "victims": j,
                               "call_site": rows[t]["call_site"]})
                for v in rows[:j]:
                    waits.append({"victim": v["rank"], "culprit": rows[t]["rank"], "pg_name": pg, "key_step": ks,
                                  "seq": sq, "step": step, "start": a, "end": b, "ns": share})
        # the rest of each rank's wait (in noise), up to the first charged layer's start
        top = rows[charged_from - 1]["eff_arrival"] if charged_from < n else rows[-1]["eff_arrival"]
        for v in rows:
            if v["eff_arrival"] < top:
                waits.append({"victim": v["rank"], "culprit": None, "pg_name": pg, "key_step": ks, "seq": sq,
                              "step": step, "start": v["eff_arrival"], "end": top, "ns": top - v["eff_arrival"]})
    lf = pl.DataFrame(layers, schema=LAYERS) if layers else _empty(LAYERS)
    wf = pl.DataFrame(waits, schema=WAITS) if waits else _empty(WAITS)
    return lf, wf


# ---------------------------------------------------------------------------------------------- attribution
#: What the charged ranks were doing: one row per culprit, layer and activity (ns of the layer it explains).
ATTRIBUTION: dict[str, pl.DataType] = {
    "culprit": pl.Int32, "step": pl.Int32, "wait_step": pl.Int32, "pg_name": pl.String, "seq": pl.Int64,
    "category": pl.String, "label": pl.String, "site": pl.String, "ns": pl.Int64, "excess_ns": pl.Int64,
    "in_window": pl.Boolean,
}


@dataclass
class RankActivity:
    """One rank's labelled spans and step bounds, in its own clock; ``offset``: its clock minus the aligned one."""

    spans: list[act.Span]
    bounds: list[tuple[int, int, int]]
    offset: int = 0
    windows: list[tuple[int, int]] = field(default_factory=list)   # profiler windows (own clock)
    exports: list[tuple[int, int, int | None]] = field(default_factory=list)   # (start, end, CPU) own clock
    traced: bool = False                   # the windows' host events are among the spans

    def pieces(self, t0: int, t1: int) -> list[act.Piece]:
        """``[t0, t1]`` (aligned clock) cut into activities; an untraced gap of :data:`NAMED_GAP_NS` or more inside a
        profiler window is labelled with the host events around it (``between <op> and <op>``)."""
        out = act.resolve(self.spans, t0 + self.offset, t1 + self.offset, self.bounds)
        if not self.windows or not self.traced:
            return out
        return [self._named_gap(p) if p.category == "untraced" and p.ns >= NAMED_GAP_NS and self.in_window(
            p.start - self.offset, p.end - self.offset) else p for p in out]

    def _named_gap(self, p: act.Piece) -> act.Piece:
        """``p`` labelled with the host events around it (the step's own ops; the step start where none is
        before it in its step)."""
        step = next(((a, b) for a, b, _ in self.bounds if a <= p.start < b), None)
        lo = step[0] if step else None
        ops = [s for s in self.spans if s.label and s.category not in ("data", "outside_step", "profiler")]
        before = max((s for s in ops if s.end <= p.start and (lo is None or s.end > lo)), key=lambda s: s.end,
                     default=None)
        after = min((s for s in ops if s.start >= p.end), key=lambda s: s.start, default=None)
        label = f"between {before.label if before else 'the step start'} and {after.label if after else 'the end'}"
        return act.Piece(p.start, p.end, p.category, label, p.site, p.step)

    def export_ns(self, t0: int, t1: int) -> int:
        """How much the profiler's background exports that overlap ``[t0, t1]`` (aligned clock) slowed this rank:
        their cost (:func:`export_costs`), else (not recorded) their length."""
        a, b = t0 + self.offset, t1 + self.offset
        return sum((cpu if cpu is not None else e - s) for s, e, cpu in self.exports if s < b and e > a)

    def in_window(self, t0: int, t1: int) -> bool:
        a, b = t0 + self.offset, t1 + self.offset
        return any(s < b and e > a for s, e in self.windows)


def _interval_totals(row: Mapping[str, Any], ra: RankActivity, t0: int, step: int | None,
                     queued: bool) -> dict[tuple[str, str | None, int], int]:
    """What a rank did from ``t0`` to its effective arrival (:func:`activities.totals`); with ``queued`` (its
    collectives run on a host thread: gloo), the time from its own call to the execution start is its collective's
    own (:data:`QUEUED_LABEL`): the host had called and was blocked in it while the backend's thread had not begun."""
    end, call = row["eff_arrival"], row.get("call")
    if not queued or call is None or not t0 < call < end:
        return act.totals(ra.pieces(t0, end), rel_step=step)
    out = act.totals(ra.pieces(t0, call), rel_step=step)
    key = ("collective", QUEUED_LABEL, 0)
    out[key] = out.get(key, 0) + (end - call)
    return out


def attribute(layers: pl.DataFrame, inst: pl.DataFrame, activity: Mapping[int, RankActivity],
              queued_ranks: Iterable[int] = ()) -> pl.DataFrame:
    """Each layer split over what its culprit did (schema :data:`ATTRIBUTION`): the culprit's time since the
    previous exit and the on-time ranks' (those not late, :func:`late_from`; at most :data:`MAX_ON_TIME`, the
    nearest the median), cut into activities; the layer goes to
    the culprit's activities in proportion to their excess over the on-time median (per category, label and
    step), or, for a layer above another late rank's, over that rank's (what the culprit did beyond it); ``step``
    is the step the activity ran in, ``wait_step`` the step of the collective. ``queued_ranks``:
    ranks whose collectives run on a host thread (gloo), where the time between a call and its execution start is
    the collective's own (:func:`_interval_totals`)."""
    queued_ranks = set(queued_ranks)
    if layers.is_empty():
        return _empty(ATTRIBUTION)
    by_inst = {k: g for k, g in inst.group_by(["pg_name", "key_step", "seq"], maintain_order=True)}
    out: list[dict[str, Any]] = []
    for lay in layers.iter_rows(named=True):
        g = by_inst.get((lay["pg_name"], lay["key_step"], lay["seq"]))
        c = lay["culprit"]
        if g is None or c not in activity:
            out.append(_row(lay, "untraced", None, None, lay["layer_ns"], lay["layer_ns"], lay["step"], False))
            continue
        rows = {r["rank"]: r for r in g.iter_rows(named=True)}
        me = rows[c]
        ordered = sorted(rows.values(), key=lambda r: r["position"])
        late = late_from([r["eff_arrival"] for r in ordered], lay["noise_ns"])
        m = max(0, (late - 1) // 2)           # the on-time ranks: those not late, the nearest the median first
        on_time = sorted((r for r in ordered[:late] if r["rank"] in activity),
                         key=lambda r: abs(r["position"] - m))[:MAX_ON_TIME]
        # the layer is what the culprit did beyond the rank that arrived just before it where that rank was late
        # too (a stall both had is that rank's layer, not this one's), else beyond the on-time ranks
        below = ordered[me["position"] - 1] if me["position"] - 1 >= max(late, 1) else None
        base = [below] if below is not None and below["rank"] in activity else on_time
        step = lay["step"]
        ra = activity[c]
        t0 = _since(me, ra, step)
        if t0 is None or not base:
            out.append(_row(lay, "untraced", None, None, lay["layer_ns"], lay["layer_ns"], lay["step"], False))
            continue
        mine = _interval_totals(me, ra, t0, step, c in queued_ranks)
        theirs = []
        for r in base:
            a = _since(r, activity[r["rank"]], step)
            if a is not None:
                theirs.append(_interval_totals(r, activity[r["rank"]], a, step, r["rank"] in queued_ranks))
        sites: dict[tuple[str, str | None], str | None] = {}
        for p in ra.pieces(t0, me["eff_arrival"]):
            sites.setdefault((p.category, p.label), p.site)
        excess = {}
        for key, ns in mine.items():
            other = float(np.median([t.get(key, 0) for t in theirs])) if theirs else 0.0
            if ns - other > 0:
                excess[key] = ns - other
        _cap_exports(excess, ra, [activity[r["rank"]] for r in base], t0, me["eff_arrival"],
                     [(_since(r, activity[r["rank"]], step), r["eff_arrival"]) for r in base])
        total = sum(excess.values())
        excess = {k: v for k, v in excess.items() if v >= MIN_SHARE * total}
        total = sum(excess.values())
        window = ra.in_window(t0, me["eff_arrival"])
        if total <= 0:
            out.append(_row(lay, "untraced", None, None, lay["layer_ns"], lay["layer_ns"], step, window))
            continue
        for (cat, label, off), ex in sorted(excess.items(), key=lambda kv: -kv[1]):
            share = int(round(lay["layer_ns"] * ex / total))
            if share <= 0:
                continue
            astep = (step + off) if step is not None else None
            out.append(_row(lay, cat, label, sites.get((cat, label)), share, int(ex), astep, window))
    return pl.DataFrame(out, schema=ATTRIBUTION) if out else _empty(ATTRIBUTION)


def _since(row: Mapping[str, Any], ra: RankActivity, step: int | None) -> int | None:
    """Where a rank's interval before an arrival starts (aligned clock): the group's previous collective's earliest
    exit (its data was there; a rank that left it later was busy with its own work, e.g. its completion callback
    waited for the interpreter lock while the main thread collected garbage), else (the first one recorded, e.g.
    a profiler window's first) the start of its step, batch wait included."""
    if row["exit_prev"] is not None:
        first = row.get("exit_first")
        return row["exit_prev"] if first is None else min(row["exit_prev"], first)
    if step is None:
        return None
    ask = next((a for a, _, s in ra.bounds if s == step), None)
    return None if ask is None else ask - ra.offset


def _cap_exports(excess: dict[tuple[str, str | None, int], float], me: RankActivity, others: list[RankActivity],
                 t0: int, t1: int, spans: list[tuple[int | None, int]]) -> None:
    """The profiler's background export overlaps whatever the rank was doing: its excess is at most how much longer
    the late rank's export ran than the on-time ranks' (whole exports overlapping each interval); the rest of it
    is untraced time (in ``excess``, in place)."""
    keys = [k for k in excess if k[0] == "profiler" and k[1] == act.EXPORT_LABEL]
    if not keys:
        return
    mine = me.export_ns(t0, t1)
    theirs = [o.export_ns(a, b) for o, (a, b) in zip(others, spans) if a is not None]
    cap = max(0.0, mine - (float(np.median(theirs)) if theirs else 0.0))
    total = sum(excess[k] for k in keys)
    if total <= cap:
        return
    for k in keys:
        moved = excess[k] * (1 - cap / total)
        excess[k] -= moved
        other = ("untraced", EXPORT_UNTRACED, k[2])
        excess[other] = excess.get(other, 0.0) + moved


def _row(lay: Mapping[str, Any], cat: str, label: str | None, site: str | None, ns: int, excess: int,
         step: int | None, window: bool) -> dict[str, Any]:
    return {"culprit": lay["culprit"], "step": step, "wait_step": lay["step"], "pg_name": lay["pg_name"],
            "seq": lay["seq"], "category": cat, "label": label, "site": site, "ns": ns, "excess_ns": excess,
            "in_window": window}


def rank_activity(ranks: Iterable[int], steps: pl.DataFrame | None, compiles: pl.DataFrame | None,
                  events: pl.DataFrame | None, offsets: Mapping[int, int] | None = None,
                  exports: Mapping[int, list[tuple[int, int, int | None]]] | None = None,
                  gc: Mapping[int, list[tuple[int, int, int | None]]] | None = None) -> dict[int, RankActivity]:
    """:class:`RankActivity` of each rank (``offsets``: each rank's clock minus the aligned clock, ns;
    ``exports``: the profiler's background trace exports per rank; ``gc``: its garbage collections,
    ``HangTables.gc_pauses``)."""
    out = {}
    windows = _windows(steps)
    for r in ranks:
        ex = list((exports or {}).get(int(r), ()))
        spans, bounds = act.rank_spans(int(r), steps, compiles, events, ex, (gc or {}).get(int(r), ()))
        traced = events is not None and not events.is_empty() and int(r) in set(events["rank"].unique().to_list())
        out[int(r)] = RankActivity(spans, bounds, int((offsets or {}).get(int(r), 0)), windows.get(int(r), []), ex,
                                   traced)
    return out


def _windows(steps: pl.DataFrame | None) -> dict[int, list[tuple[int, int]]]:
    if steps is None or steps.is_empty() or "source" not in steps.columns:
        return {}
    p = steps.filter(pl.col("source").cast(pl.String) == "profiler")
    out: dict[int, list[tuple[int, int]]] = {}
    for r, a, b in p.select("rank", "start", "end").iter_rows():
        if a is not None and b is not None:
            out.setdefault(int(r), []).append((int(a), int(b)))
    return out


# ---------------------------------------------------------------------------------------------- the whole path
@dataclass
class CriticalPath:
    """The cross-rank critical path of a run (module docstring): ``sync`` (aligned sync points), ``instances``,
    ``noise``, ``layers``, ``waits``, ``attribution``, ``clock`` (per-host offsets and residuals,
    :func:`workbench.analyses.clock.host_offsets`), ``notes`` (what could not be done, one line each)."""

    sync: pl.DataFrame
    instances: pl.DataFrame
    noise: pl.DataFrame
    layers: pl.DataFrame
    waits: pl.DataFrame
    attribution: pl.DataFrame
    clock: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    queued_ranks: frozenset[int] = frozenset()   # ranks whose collectives run on a host thread (gloo)

    @property
    def empty(self) -> bool:
        return self.instances.is_empty()

    def offsets(self, ranks: pl.DataFrame | None) -> dict[int, int]:
        """Per rank: its clock minus the aligned one (its host's offset; 0 on the reference host)."""
        if self.clock.is_empty() or ranks is None or "host" not in ranks.columns:
            return {}
        per_host = {h: o for h, o in self.clock.select("host", "offset_ns").iter_rows()}
        return {int(r): int(per_host.get(h, 0) or 0) for r, h in ranks.select("rank", "host").iter_rows()}

    def matrix(self, step: int | None = None) -> pl.DataFrame:
        """Who held whom: per step (all steps, or ``step``), victim and culprit, the wait (ns); ``culprit`` null is
        the wait in noise. Columns: ``step``, ``victim``, ``culprit``, ``ns``."""
        w = self.waits if step is None else self.waits.filter(pl.col("step") == step)
        return w.group_by("step", "victim", "culprit").agg(pl.col("ns").sum()).sort(
            "step", "victim", "culprit", nulls_last=True)

    def lateness(self) -> pl.DataFrame:
        """Per culprit and step (the step its late activity ran in): the time it held the others back (ns, the sum
        of its layers' shares) and the top activity. Columns: ``culprit``, ``step``, ``ns``, ``category``,
        ``label``, ``site``."""
        a = self.attribution
        if a.is_empty():
            return pl.DataFrame(schema={"culprit": pl.Int32, "step": pl.Int32, "ns": pl.Int64,
                                        "category": pl.String, "label": pl.String, "site": pl.String})
        top = a.group_by("culprit", "step", "category", "label", "site").agg(pl.col("ns").sum()).sort(
            "ns", descending=True).group_by("culprit", "step", maintain_order=True).first()
        tot = a.group_by("culprit", "step").agg(pl.col("ns").sum())
        return tot.join(top.drop("ns"), on=["culprit", "step"], how="left").sort("culprit", "step")


def critical_path(entries: pl.DataFrame | None, collectives: pl.DataFrame | None, steps: pl.DataFrame | None,
                  compiles: pl.DataFrame | None = None, events: pl.DataFrame | None = None,
                  ranks: pl.DataFrame | None = None,
                  exports: Mapping[int, list[tuple[int, int, int | None]]] | None = None,
                  gc: Mapping[int, list[tuple[int, int, int | None]]] | None = None) -> CriticalPath:
    """Every layer above on the given tables (``entries``: Flight Recorder entries, ``collectives``: the profiler's,
    ``events``: the window events of the ranks to explain, ``ranks``: the RANKS table for hosts, ``exports``: the
    profiler's trace exports per rank, ``HangTables.trace_exports``; ``gc``: the ranks' garbage collections,
    ``HangTables.gc_pauses``)."""
    from workbench.analyses.clock import align

    notes: list[str] = []
    sync = sync_points(entries, collectives, steps)
    if sync.is_empty():
        e = _empty
        return CriticalPath(e(SYNC_POINTS), e(INSTANCES), pl.DataFrame(), e(LAYERS), e(WAITS), e(ATTRIBUTION),
                            pl.DataFrame(), ["no collectives recorded (no Flight Recorder dump, no profiler window)"])
    sync, clock, more = align(sync, ranks)
    notes += more
    inst = instance_table(sync)
    noise = noise_table(inst, warmup_steps(inst, steps))
    layers, waits = blame(inst, noise)
    cp = CriticalPath(sync, inst, noise, layers, waits, _empty(ATTRIBUTION), clock, notes,
                      gloo_ranks(entries, collectives))
    return explain(cp, steps, compiles, events, ranks, exports, gc)


def gloo_ranks(*tables: pl.DataFrame | None) -> frozenset[int]:
    """Ranks whose collectives (Flight Recorder entries, the profiler's collectives) all ran on gloo."""
    seen: dict[int, bool] = {}
    for t in tables:
        if t is None or t.is_empty() or "backend" not in t.columns or "rank" not in t.columns:
            continue
        for r, b in t.select("rank", pl.col("backend").cast(pl.String)).unique().iter_rows():
            seen[int(r)] = seen.get(int(r), True) and b == "gloo"
    return frozenset(r for r, g in seen.items() if g)


def explain(cp: CriticalPath, steps: pl.DataFrame | None, compiles: pl.DataFrame | None,
            events: pl.DataFrame | None, ranks: pl.DataFrame | None = None,
            exports: Mapping[int, list[tuple[int, int, int | None]]] | None = None,
            gc: Mapping[int, list[tuple[int, int, int | None]]] | None = None) -> CriticalPath:
    """``cp`` with its layers split over what the late ranks did (:func:`attribute`), from these tables (``events``:
    the profiler windows' host events, where there are any)."""
    if cp.layers.is_empty():
        return cp
    activity = rank_activity(sorted(cp.instances["rank"].unique().to_list()), steps, compiles, events,
                             cp.offsets(ranks), exports, gc)
    cp.attribution = attribute(cp.layers, cp.instances, activity, cp.queued_ranks)
    return cp


def critical_path_of(run: Any) -> CriticalPath:
    """:func:`critical_path` of a :class:`workbench.Run` (its hang tables' Flight Recorder entries and trace
    exports, its collectives, steps, compiles, and the window events of its ranks)."""
    hang = getattr(run, "hangs", None)
    entries = getattr(hang, "entries", None)
    exports = export_costs(getattr(hang, "trace_exports", None), crowded_ranks(getattr(run, "fingerprints", None)))
    steps = getattr(run, "steps", None)
    compiles = getattr(run, "compiles", None)
    ranks = getattr(run, "ranks", None)
    pauses = getattr(hang, "gc_pauses", None)
    cp = critical_path(entries, getattr(run, "collectives", None), steps, compiles, None, ranks, exports, pauses)
    if cp.layers.is_empty():
        return cp
    return explain(cp, steps, compiles, window_events(run, sorted(cp.instances["rank"].unique().to_list())), ranks,
                   exports, pauses)


def window_events(run: Any, ranks: list[int]) -> pl.DataFrame | None:
    """The host events (CPU ops, annotations, Python frames) of ``ranks``, through the run's own reader (its
    ``scan``: only those ranks' files), else its ``events`` frame; None when it has none."""
    kinds = ["cpu_op", "annotation", "python"]
    scan = getattr(run, "scan", None)
    try:
        if callable(scan):
            return scan("events", ranks=ranks).filter(pl.col("kind").cast(pl.String).is_in(kinds)).collect()
        ev = getattr(run, "events", None)
        if isinstance(ev, pl.DataFrame) and not ev.is_empty():
            return ev.filter(pl.col("rank").is_in(ranks) & pl.col("kind").cast(pl.String).is_in(kinds))
    except Exception:   # a trace that cannot be read again: the attribution goes without its events
        return None
    return None


#: A trace export as recorded: (start, end, CPU time holding the GIL, whole CPU time), ns.
Export = tuple[int, int, "int | None", "int | None"]


def crowded_ranks(fingerprints: pl.DataFrame | None) -> set[int]:
    """Ranks on a host with no more CPUs than ranks (``cpu_count`` of ``fingerprint.json``, ranks counted per host):
    there a background thread's CPU time is taken from the training threads, not only the GIL it holds."""
    if fingerprints is None or fingerprints.is_empty() or "raw" not in fingerprints.columns:
        return set()
    import orjson

    cpus: dict[str, int] = {}
    per_host: dict[str, list[int]] = {}
    for rank, host, raw in fingerprints.select("rank", "host", "raw").iter_rows():
        try:
            n = orjson.loads(raw or "{}").get("cpu_count")
        except orjson.JSONDecodeError:
            n = None
        h = host or f"rank {rank}"
        per_host.setdefault(h, []).append(int(rank))
        if isinstance(n, int) and n > 0:
            cpus[h] = n
    return {r for h, rs in per_host.items() if h in cpus and len(set(rs)) >= cpus[h] for r in rs}


def export_costs(exports: Mapping[int, list[Any]] | None, crowded: set[int] = frozenset()  # type: ignore[assignment]
                 ) -> dict[int, list[tuple[int, int, int | None]]]:
    """Per rank, (start, end, how much the export can have slowed the rank) of each trace export: the CPU time it
    held the GIL, or on a crowded host (:func:`crowded_ranks`) its whole CPU time; the other where one is missing;
    None (its length is used) where neither was recorded."""
    out: dict[int, list[tuple[int, int, int | None]]] = {}
    for rank, rows in (exports or {}).items():
        for e in rows:
            gil, cpu = (e[2], e[3]) if len(e) > 3 else (e[2] if len(e) > 2 else None, None)
            first, second = (cpu, gil) if int(rank) in crowded else (gil, cpu)
            out.setdefault(int(rank), []).append((int(e[0]), int(e[1]), first if first is not None else second))
    return out


#: Who waited for whom, for a trace export (the schema of ``workbench.export.model.WAITS``): times on each rank's
#: own clock; ``on_start``/``on_end``: the culprit's time since it left the previous collective of that group up to
#: its late arrival (what made the others wait).
EXPORT_WAITS: dict[str, pl.DataType] = {
    "rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "step": pl.Int32,
    "on_rank": pl.Int32, "on_start": pl.Int64, "on_end": pl.Int64, "what": pl.String,
}


def export_waits(cp: CriticalPath, ranks: pl.DataFrame | None = None) -> pl.DataFrame:
    """The critical path's attributed waits (victim → culprit; waits in noise left out) as flows for a trace
    export (schema :data:`EXPORT_WAITS`); ``what`` names the collective and the culprit's top activity there."""
    w = cp.waits.filter(pl.col("culprit").is_not_null())
    if w.is_empty():
        return _empty(EXPORT_WAITS)
    off = cp.offsets(ranks)
    inst = cp.instances.select("pg_name", "key_step", "seq", "op", culprit=pl.col("rank"),
                               _from=pl.coalesce("exit_prev", "eff_arrival"), _to=pl.col("eff_arrival"))
    top = cp.attribution.group_by("culprit", "pg_name", "seq", "category", "label").agg(pl.col("ns").sum()).sort(
        "ns", descending=True).group_by("culprit", "pg_name", "seq", maintain_order=True).first() \
        if not cp.attribution.is_empty() else pl.DataFrame(schema={"culprit": pl.Int32, "pg_name": pl.String,
                                                                   "seq": pl.Int64, "category": pl.String,
                                                                   "label": pl.String})
    x = w.join(inst, on=["culprit", "pg_name", "key_step", "seq"], how="left").join(
        top.select("culprit", "pg_name", "seq", "category", "label"), on=["culprit", "pg_name", "seq"], how="left")
    rows = []
    for r in x.iter_rows(named=True):
        ov, oc = off.get(int(r["victim"]), 0), off.get(int(r["culprit"]), 0)
        doing = act.WORDS.get(r["category"] or "untraced", r["category"] or "")
        if r["label"]:
            doing += f": {r['label']}"
        rows.append({"rank": r["victim"], "start": r["start"] + ov, "end": r["end"] + ov, "step": r["step"],
                     "on_rank": r["culprit"], "on_start": (r["_from"] if r["_from"] is not None else r["start"]) + oc,
                     "on_end": (r["_to"] if r["_to"] is not None else r["end"]) + oc,
                     "what": f"{r['op'] or 'collective'} · pg {r['pg_name']} · seq {r['seq']} · step "
                             f"{r['step'] if r['step'] is not None else '-'}: rank {r['culprit']} late, {doing}"})
    return pl.DataFrame(rows, schema=EXPORT_WAITS).sort("rank", "start", "on_rank")


def victim_waits(cp: CriticalPath, ranks: pl.DataFrame | None = None) -> dict[int, list[tuple[int, int]]]:
    """Per rank, the intervals it waited at collectives (for a late rank or in noise), on its own clock: time that
    is waiting, not communication."""
    if cp.waits.is_empty():
        return {}
    off = cp.offsets(ranks)
    out: dict[int, list[tuple[int, int]]] = {}
    for v, a, b in cp.waits.filter(pl.col("ns") > 0).select("victim", "start", "end").iter_rows():
        o = off.get(int(v), 0)
        out.setdefault(int(v), []).append((int(a) + o, int(b) + o))
    return out


__all__ = ["ATTRIBUTION", "EXPORT_WAITS", "INSTANCES", "LAYERS", "MIN_NOISE_NS", "QUEUED_LABEL", "SYNC_POINTS",
           "WAITS", "CriticalPath", "RankActivity", "attribute", "blame", "critical_path", "critical_path_of",
           "crowded_ranks", "explain", "export_costs", "export_waits", "gloo_ranks", "instance_table", "late_from",
           "noise_table", "rank_activity", "shorth_sigma", "sync_points", "victim_waits", "warmup_steps",
           "window_events"]
