"""Findings from the cross-rank critical path: the rank that held the others back, in which steps, doing what.

:func:`late_rank_findings` turns a :class:`~workbench.analyses.critical_path.CriticalPath` into ``straggler``
findings, one per late rank: its steps and per-step lateness (the time it held the others back: the sum of its
layers), what it was doing (the activity with the largest share of that time, with its label and ``file:line``
where known, else the call site of the collective it arrived late at), and every other rank's wait for it. The
cost is the most any one other rank waited for it (the wall time the job lost, summed over steps).

A rank is named only when it held the others back in some step by at least :data:`CLEAR_NOISE` times the noise of
the noisiest collective of its process groups (:func:`noise_bar`), or by more than the noise in at least
:data:`PERSISTENT_STEPS` steps and half of the judged steps (a persistent lateness); its steps are those where it
did by more than the noise. Not made
into a straggler: the run's first step (first compiles, set-up), lateness that is compiling where a compile finding
already names that rank and step and costs at least half of it (that finding is the cause; the waits are its
symptoms; one that could not measure the wait — a step outside the profiler's windows, a recompile in every step —
leaves it to the straggler, whose reason is then the compile), the profiler's own trace export between steps (the
collector's cost, not the user's: beyond the rank's usual lateness, which it keeps in the steps an export
overlaps) and time inside a collective's own call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from workbench.analyses.activities import WORDS
from workbench.analyses.critical_path import EXPORT_UNTRACED, CriticalPath, warmup_steps
from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, format_ns, make_finding, ranks_text
from workbench.analyses.kinds import (
    CollectiveWaitEvidence, CompileSkewEvidence, CompilingEvidence, DivergentRecompileEvidence, Kind,
    StragglerEvidence,
)

#: Categories never made a straggler's reason: the collector's own work, and time inside a collective's own call
#: (a rank still in the group's previous collective after it completed — a host thread waking up late on a busy
#: machine — is communication, not work of its own; a collective of another group is its own sync point).
NOT_A_STRAGGLER = ("profiler", "collective")
#: Activities listed in a finding's evidence (largest first).
TOP_ACTIVITIES = 5
#: A late rank is a finding only if it held the others back in some step by this many times the noise of the
#: noisiest collective of its groups (the run's own spread: a rank late by a little now and then, in a quiet
#: collective of a noisy run, is the tail of that noise, not a straggler).
CLEAR_NOISE = 2.0
#: ... or when it held them back by more than the noise in at least this many steps and in at least half of the
#: judged steps (a lateness that persists is no tail of the noise: a rank past one noise unit, three spreads, in
#: half the steps by chance is next to impossible).
PERSISTENT_STEPS = 4


def _profiler_dominated(a: pl.DataFrame) -> pl.DataFrame:
    """``a`` without the untraced time during a profiler export (what its GIL time does not explain) where the
    profiler's own stop and export made the same rank later than that, in that step or the one before: there it is
    the profiler's disturbance (the export also takes CPU), not the user's work."""
    during = a.filter(pl.col("label") == EXPORT_UNTRACED)
    if during.is_empty():
        return a
    prof = a.filter(pl.col("category") == "profiler").group_by("culprit", "step").agg(_p=pl.col("ns").sum())
    near = pl.concat([prof, prof.with_columns(pl.col("step") + 1)]).group_by("culprit", "step").agg(pl.col("_p").sum())
    d = during.group_by("culprit", "step").agg(_d=pl.col("ns").sum()).join(near, on=["culprit", "step"], how="left")
    drop = d.filter(pl.col("_d") <= pl.col("_p").fill_null(0)).select("culprit", "step")
    if drop.is_empty():
        return a
    return pl.concat([a.filter(pl.col("label").fill_null("") != EXPORT_UNTRACED),
                      during.join(drop, on=["culprit", "step"], how="anti")])


def _usual_lateness_kept(a: pl.DataFrame, judged: Iterable[int]) -> pl.DataFrame:
    """``a`` with a rank's usual lateness kept in the steps the profiler's stop or export overlapped: there up to
    its median lateness over the ``judged`` steps nothing of the profiler's was in (zeros where it was not late)
    is taken back from the profiler's time (``profiler`` rows, untraced time during an export) as plain untraced
    time. A rank late by 37 ms every step is still late by them in the step its background export overlaps; the
    export explains only what goes beyond that."""
    prof = (pl.col("category") == "profiler") | (pl.col("label").fill_null("") == EXPORT_UNTRACED)
    own = ~prof & ~pl.col("category").is_in(list(NOT_A_STRAGGLER))
    per = a.drop_nulls("step").group_by("culprit", "step").agg(
        _own=pl.col("ns").filter(own).sum(), _prof=pl.col("ns").filter(prof).sum())
    disturbed = per.filter(pl.col("_prof") > 0)
    if disturbed.is_empty():
        return a
    judged = set(judged)
    own_by = {(int(c), int(st)): int(n) for c, st, n, _ in per.iter_rows()}
    bad: dict[int, set[int]] = {}
    for c, st, _, _ in disturbed.iter_rows():
        bad.setdefault(int(c), set()).add(int(st))
    usual = {c: _median([own_by.get((c, st), 0) for st in sorted(judged - b)]) if judged - b else 0
             for c, b in bad.items()}
    back = disturbed.with_columns(_f=pl.struct("culprit", "step", "_own", "_prof").map_elements(
        lambda r: min(1.0, max(0, usual[int(r["culprit"])] - r["_own"]) / r["_prof"]), return_dtype=pl.Float64)
    ).filter(pl.col("_f") > 0).select("culprit", "step", "_f")
    if back.is_empty():
        return a
    hit = a.join(back, on=["culprit", "step"], how="left").with_columns(_f=pl.when(prof).then(
        pl.col("_f").fill_null(0.0)).otherwise(0.0))
    scaled = [(pl.col(c) * (1 - pl.col("_f"))).round().cast(pl.Int64).alias(c) for c in ("ns", "excess_ns")]
    taken = [(pl.col(c) * pl.col("_f")).round().cast(pl.Int64).alias(c) for c in ("ns", "excess_ns")]
    kept = hit.with_columns(*scaled).select(a.columns)
    moved = hit.filter(pl.col("_f") > 0).with_columns(*taken, category=pl.lit("untraced"),
                                                      label=pl.lit(None, pl.String)).select(a.columns)
    return pl.concat([kept, moved])


def _compile_steps(found: Iterable[Finding[Any]], bounds: Mapping[int, list[tuple[int, int, int]]] | None = None
                   ) -> dict[tuple[int, int], int]:
    """(rank, step) of every compile a compile finding already blames (its waits are that finding's), with the most
    such a finding costs there: divergent recompiles (the frames of one step share its wait: their costs add up),
    a start-up compile skew, compiles inside a profiler window (``compiling``; their steps from the ranks' step
    ``bounds``)."""
    out: dict[tuple[int, int], int] = {}
    shared: dict[tuple[int, int], int] = {}

    def put(k: tuple[int, int], cost: int) -> None:
        out[k] = max(out.get(k, 0), int(cost))

    for f in found:
        ev = f.evidence
        if isinstance(ev, DivergentRecompileEvidence) and ev.step is not None:
            for r in ev.compiling_ranks:
                k = (int(r), int(ev.step))
                shared[k] = shared.get(k, 0) + int(f.cost_ns)
                put(k, shared[k])
        elif isinstance(ev, CompileSkewEvidence) and ev.step is not None and f.cost_ns > 0:
            put((int(ev.slowest_rank), int(ev.step)), f.cost_ns)
        elif isinstance(ev, CompilingEvidence):
            for r in f.ranks:
                for a, b, step in (bounds or {}).get(int(r), []):
                    if any(s < b and e > a for s, e in ev.spans):
                        put((int(r), int(step)), f.cost_ns)
    return out


def noise_bar(cp: CriticalPath, groups: Iterable[str] | None = None) -> int | None:
    """The run's noise bar: the noise of its noisiest collective slot (``cp.noise``; of ``groups`` only when
    given), ns; None where none was measured. A rank is a straggler only where it held the others back by at
    least :data:`CLEAR_NOISE` times it in some step; the bench (``bench/attribution.py``) calls a planted culprit
    undetectable when its truth is below that in every step."""
    n = cp.noise if groups is None or cp.noise.is_empty() else cp.noise.filter(pl.col("pg_name").is_in(list(groups)))
    if n.is_empty():
        return None
    v = n["noise_ns"].max()
    return int(v) if v is not None else None


def _steps_text(steps: Sequence[int]) -> str:
    s = sorted(steps)
    if not s:
        return "no step"
    if len(s) == 1:
        return f"step {s[0]}"
    if s == list(range(s[0], s[-1] + 1)):
        return f"steps {s[0]}-{s[-1]}"
    if len(s) <= 6:
        return "steps " + ", ".join(map(str, s[:-1])) + f" and {s[-1]}"
    return f"{len(s)} steps ({s[0]}-{s[-1]})"


def _median(v: list[int]) -> int:
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2


def late_rank_findings(cp: CriticalPath, *, wall_ns: Mapping[int, int] | None = None,
                       found: Iterable[Finding[Any]] = (), steps: pl.DataFrame | None = None
                       ) -> list[Finding[StragglerEvidence]]:
    """One ``straggler`` finding per rank the critical path charges (module docstring), most costly first
    (``found``: the compile findings that already explain some of its time; ``steps``: the run's steps)."""
    a = cp.attribution
    if a.is_empty():
        return []
    from workbench.analyses.activities import step_spans

    steps_frame = steps
    bounds = {int(r): step_spans(steps, int(r))[1] for r in a["culprit"].unique()} if steps is not None else {}
    compiled = _compile_steps(found, bounds)
    warm = warmup_steps(cp.instances, steps)
    a = _profiler_dominated(_usual_lateness_kept(a, {int(x) for x in cp.instances["step"].drop_nulls().unique()
                                                     .to_list()} - warm))
    a = a.filter(~pl.col("category").is_in(list(NOT_A_STRAGGLER)) & ~pl.col("step").is_in(list(warm))
                 & ~pl.col("wait_step").is_in(list(warm)))
    if compiled:   # a layer that is mostly a compile a compile finding costs (half of it at least) is that finding's
        lay = a.group_by("culprit", "pg_name", "seq").agg(
            _c=pl.col("ns").filter(pl.col("category") == "compile").sum(), _all=pl.col("ns").sum(),
            _steps=pl.col("step").filter(pl.col("category") == "compile").unique())
        drop = [(c, pg, q) for c, pg, q, cns, tot, sts in lay.iter_rows()
                if cns * 2 >= tot and any(2 * compiled.get((int(c), int(x)), -1) >= cns
                                          for x in (sts or []) if x is not None)]
        if drop:
            d = pl.DataFrame(drop, schema={"culprit": pl.Int32, "pg_name": pl.String, "seq": pl.Int64}, orient="row")
            a = a.join(d, on=["culprit", "pg_name", "seq"], how="anti")
    out = []
    for (c,), mine in a.group_by(["culprit"], maintain_order=True):
        c = int(c)
        judged_layers = cp.layers.filter(pl.col("culprit") == c).join(
            mine.select("pg_name", "seq").unique(), on=["pg_name", "seq"], how="semi")
        noise = int(judged_layers["noise_ns"].median()) if judged_layers.height else None
        per_step = {int(s): int(n) for s, n in mine.drop_nulls("step").group_by("step").agg(
            pl.col("ns").sum()).sort("step").iter_rows()}
        floor = noise or 0
        steps = sorted(s for s, n in per_step.items() if n >= floor)
        widest = noise_bar(cp, judged_layers["pg_name"].unique().to_list())
        clear = bool(steps) and max(per_step[s] for s in steps) >= CLEAR_NOISE * max(floor, widest or 0)
        judged_steps = _judged_steps(cp, judged_layers["pg_name"].unique().to_list(), warm)
        persistent = len(steps) >= PERSISTENT_STEPS and 2 * len(steps) >= len(judged_steps)
        if not (clear or persistent):
            continue    # never clearly above the run's noise: its waits stay in the matrix, not a finding
        total = int(mine["ns"].sum())
        by_act = mine.group_by("category", "label", "site").agg(pl.col("ns").sum()).sort(
            ["ns", "category", "label"], descending=[True, False, False], nulls_last=True)
        by_cat = mine.group_by("category").agg(pl.col("ns").sum()).sort(["ns", "category"], descending=[True, False])
        reason = by_cat["category"][0]
        top = by_act.filter(pl.col("category") == reason).row(0, named=True)
        layers = cp.layers.filter(pl.col("culprit") == c)
        own_site = top["site"] is not None          # the activity's own line, else the late collective's call
        site = top["site"] or _late_call_site(layers)
        # each victim's wait through a layer, by the share of that layer kept here (not the profiler's, a compile
        # finding's, a collective's own): the others' waits and the cost then count the same time
        kept = mine.group_by("pg_name", "seq").agg(_kept=pl.col("ns").sum()).join(
            layers.group_by("pg_name", "seq").agg(_layer=pl.col("layer_ns").sum()), on=["pg_name", "seq"])
        waits = cp.waits.filter(pl.col("culprit") == c).join(kept, on=["pg_name", "seq"]).with_columns(
            ns=(pl.col("ns") * pl.min_horizontal(pl.lit(1.0), pl.col("_kept") / pl.col("_layer").clip(1))).round()
            .cast(pl.Int64))
        wait_by = {int(v): int(n) for v, n in waits.group_by("victim").agg(pl.col("ns").sum()).sort("victim")
                   .iter_rows()}
        cost = min(total, max(wait_by.values())) if wait_by else total
        traced = _window_reason(mine)
        lat = [per_step[s] for s in steps]
        own_wait, others_wait = _data_waits(steps_frame, c)
        ev = StragglerEvidence(
            rank=c, signal="critical_path", events=int(layers.height), held_count=int(layers.height),
            held_back_ns=total, held_share_pct=None, typical_share_pct=None, first_step=steps[0],
            trend=None, held_steps=tuple(steps), data_wait_median_ns=own_wait, others_data_wait_median_ns=others_wait,
            reason=reason, what=top["label"], site=site.partition(" in ")[0] if site else None,
            lateness_by_step={s: per_step[s] for s in steps},
            wait_by_rank=wait_by,
            activities=tuple({"category": r["category"], "label": r["label"], "site": r["site"], "ns": int(r["ns"])}
                             for r in by_act.head(TOP_ACTIVITIES).iter_rows(named=True)),
            noise_ns=noise)
        wall = (wall_ns or {}).get(c) or (max((wall_ns or {}).values()) if wall_ns else None)
        symptoms = _wait_symptoms(c, waits, wall_ns)
        out.append(make_finding(
            Kind.STRAGGLER, _message(c, steps, lat, reason, top["label"], site, wait_by, traced, cost, own_site),
            ev,
            Cost.measured(cost, "the longest any other rank waited for it at the collectives it arrived at late "
                                "(the layers of the critical path it was charged, every step, Flight Recorder)"),
            ranks=[c], steps=steps, wall_ns=wall, source="critical_path", symptoms=symptoms))
    return sorted(out, key=lambda f: -f.cost_ns)


def _judged_steps(cp: CriticalPath, groups: list[str], warm: set[int]) -> set[int]:
    """The steps of these groups' collectives that are judged for lateness (not the warm-up)."""
    i = cp.instances.filter(pl.col("pg_name").is_in(groups))["step"].drop_nulls().unique().to_list()
    return {int(x) for x in i} - set(warm)


def _wait_symptoms(culprit: int, waits: pl.DataFrame, wall_ns: Mapping[int, int] | None
                   ) -> list[Finding[CollectiveWaitEvidence]]:
    """Each other rank's wait for ``culprit`` (``waits``: the critical path's, judged instances only), as a
    ``collective_wait`` symptom of it: that rank's time blocked in its collectives, the late rank's doing."""
    out = []
    for (v,), g in sorted(waits.group_by(["victim"]), key=lambda kv: kv[0][0]):
        ns = int(g["ns"].sum())
        if ns <= 0:
            continue
        steps = sorted({int(s) for s in g["step"].drop_nulls().to_list()})
        out.append(make_finding(
            Kind.COLLECTIVE_WAIT,
            f"Rank {int(v)} waited {format_ns(ns)} in its collectives for rank {culprit} "
            f"({len(steps)} step{'s' if len(steps) != 1 else ''}).",
            CollectiveWaitEvidence({int(v): ns}, int(g.height), tuple(steps)),
            Cost.measured(ns, f"its waits for rank {culprit} at the collectives rank {culprit} reached late"),
            ranks=[int(v)], steps=steps, wall_ns=(wall_ns or {}).get(int(v)), source="critical_path",
            key=f"for-r{culprit}"))
    return sorted(out, key=lambda f: f.ranks)


def _data_waits(steps: pl.DataFrame | None, rank: int) -> tuple[int | None, int | None]:
    """(this rank's median data wait per step, the median of the other ranks' medians), from the collector steps."""
    from workbench.analyses.metrics import data_wait_median_ns

    med = data_wait_median_ns(steps) if steps is not None and not steps.is_empty() else {}
    others = sorted(v for r, v in med.items() if r != rank)
    return med.get(rank), (_median(others) if others else None)


def _late_call_site(layers: pl.DataFrame) -> str | None:
    sites = layers["call_site"].drop_nulls() if "call_site" in layers.columns else pl.Series([], dtype=pl.String)
    return sites.mode().sort()[0] if sites.len() else None


def _window_reason(mine: pl.DataFrame) -> str | None:
    """What a profiler window showed of it (the top traced activity in window steps), when its overall reason is
    untraced time outside the windows."""
    w = mine.filter(pl.col("in_window") & ((pl.col("category") != "untraced") | pl.col("label").is_not_null())
                    & (pl.col("label").fill_null("") != EXPORT_UNTRACED))
    if w.is_empty():
        return None
    r = w.group_by("category", "label").agg(pl.col("ns").sum()).sort(
        ["ns", "category", "label"], descending=[True, False, False], nulls_last=True).row(0, named=True)
    if r["category"] == "untraced":    # a gap the window names by the host events around it
        return f"idle, no op or frame recorded, {r['label']}"
    return f"{WORDS.get(r['category'], r['category'])} ({r['label']})" if r["label"] else WORDS.get(r["category"])


def _short_site(site: str | None) -> str | None:
    if not site:
        return None
    head, _, tail = site.partition(" in ")
    parts = head.rsplit("/", 2)
    short = "/".join(parts[-2:]) if len(parts) > 2 else head
    return f"{short} in {tail}" if tail else short


def _message(rank: int, steps: list[int], lat: list[int], reason: str, label: str | None, site: str | None,
             wait_by: dict[int, int], traced: str | None, cost: int, own_site: bool = True) -> str:
    doing = WORDS.get(reason, reason)
    if label and reason not in ("untraced", "data"):
        doing += f": {label}"
    where = _short_site(site)
    called = reason == "untraced" or not own_site     # the site is the late collective's call, not the activity's
    at = f" at {where}" if where and not called else ""
    before = f" before the collective called from {where}" if where and called else ""
    seen = f" (in a profiler window it was {traced})" if traced and reason == "untraced" else ""
    others = ", ".join(f"rank {v} {format_ns(n)}" for v, n in sorted(wait_by.items()))
    return (f"Rank {rank} held the other ranks back in {_steps_text(steps)}: {format_ns(_median(lat))} per step "
            f"(median; {format_ns(sum(lat))} in all), {doing}{at}{before}{seen}. "
            f"The others waited for it in their collectives ({others}); {ranks_text(wait_by)} "
            f"{'was' if len(wait_by) == 1 else 'were'} not slow themselves. Cost: {format_ns(cost)}.")


__all__ = ["CLEAR_NOISE", "PERSISTENT_STEPS", "late_rank_findings", "noise_bar", "with_traced"]


@register_detector(Kind.STRAGGLER, needs=("hangs", "steps", "collectives", "compiles", "ranks", "traced", "found",
                                           "fingerprints", "critical_path"),
                   order=95, replaces=("workbench.analyses.stragglers._detect",))
def _detect(x: Inputs) -> list[Finding[StragglerEvidence]]:
    """:func:`late_rank_findings` of the run's critical path (Flight Recorder entries every step, the profiler's
    collectives in its windows, the compiles its traces show); it replaces the step-start heuristic's detector
    (``analyses/stragglers.py``) and runs after the compile detectors, whose findings keep their compiles."""
    from workbench.analyses.critical_path import critical_path, crowded_ranks, export_costs
    from workbench.analyses.metrics import wall_ns

    cp = x.critical_path
    if cp is None:
        cp = critical_path(x.hangs.entries, x.collectives, x.steps, with_traced(x.compiles, x.traced), None,
                           x.ranks, export_costs(x.hangs.trace_exports, crowded_ranks(x.fingerprints)),
                           x.hangs.gc_pauses)
    return late_rank_findings(cp, wall_ns=wall_ns(x.steps), found=x.found, steps=x.steps)


def with_traced(compiles: pl.DataFrame, traced: Mapping[int, list[tuple[int, int]]]) -> pl.DataFrame:
    """``compiles`` plus a row per compile range the traces show (``(dynamo_timed)``), for runs without compile
    logs: the critical path then knows that time is compiling."""
    rows = [{"rank": r, "start": a, "end": b, "compile_id": "trace", "co_name": "torch.compile (trace)"}
            for r, spans in (traced or {}).items() for a, b in spans]
    if not rows:
        return compiles
    extra = pl.DataFrame(rows, schema={"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "compile_id": pl.String,
                                       "co_name": pl.String})
    if compiles is None or compiles.is_empty():
        return extra.with_columns(co_filename=pl.lit(None, pl.String), co_firstlineno=pl.lit(None, pl.Int32))
    return pl.concat([compiles, extra], how="diagonal_relaxed")
