"""Hangs, desyncs and dead ranks: which rank, which collective, which line (pure: frames in, findings out).

Inputs are the frames of :class:`workbench.flight_recorder.HangTables` (Flight Recorder ``entries`` and
``status``, the collector's per-rank ``rank_state``, compiled-graph ``graph_collectives``) plus the run's
collector ``steps`` and ``compiles``.

* :func:`entry_steps` — the training step each Flight Recorder entry was issued in (its time inside the rank's
  steps from ``steps.jsonl``; after a rank's last step row: the step it was in when it stopped).
* :func:`rank_status` — per rank: how it ended, the step it reached, its last collective (process group, sequence
  id, op, sizes, dtypes, call site) and its last compile. What ``workbench info`` and the app's Hangs page show.
* :func:`first_mismatch` — the first collective the ranks' Flight Recorders disagree on: a sequence id missing on
  some ranks, or a different op, size or dtype, or the same call issued in different steps.
* :func:`hang_findings` — ``desync`` / ``hang`` / ``rank_died`` findings: the first collective that does not match,
  the step each rank reached, what the odd rank was doing instead (compiling frame X since step N, in an extra
  collective called from file:line, gone after step N) and what to change for this case (the evidence's ``fix``,
  which the hang fixers of ``analyses/recommendations.py`` recommend; the message itself names no fix).
* :func:`compiled_collective_findings` — ``compiled_desync``: a compiled graph whose collectives differ across
  ranks (found in the compile logs, before it hangs).

Costs are ``measured``: the time the healthy ranks spent blocked in the collective that never completed (from
entering it, Flight Recorder ``time_created_ns``, to the error or exit the collector recorded).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, make_finding
from workbench.analyses.kinds import CompiledDesyncEvidence, JobFailureEvidence, Kind, kinds_where
from workbench.format import duration as _fmt_s

#: Kinds that end (or will end) the job: listed first (plain strings, for polars filters).
JOB_FAILURE_KINDS: tuple[str, ...] = tuple(k.value for k in kinds_where(ends_job=True))

_TIMEOUT_WORDS = ("timed out", "timeout", "time out")
_PEER_WORDS = ("connection reset", "closed by peer", "connection closed", "broken pipe", "peer")


# ---------------------------------------------------------------------------------------------- steps
def _collector_steps(steps: pl.DataFrame) -> pl.DataFrame:
    if steps.is_empty():
        return steps
    if "source" in steps.columns:
        mine = steps.filter(pl.col("source").cast(pl.String) == "collector")
        if not mine.is_empty():
            return mine
    return steps


def _step_index(steps: pl.DataFrame) -> dict[int, list[tuple[int, int, int]]]:
    out: dict[int, list[tuple[int, int, int]]] = {}
    for r in _collector_steps(steps).select("rank", "step", "start", "end").sort("rank", "start").iter_rows():
        if None not in r:
            out.setdefault(int(r[0]), []).append((int(r[2]), int(r[3]), int(r[1])))
    return out


def _step_at(index: list[tuple[int, int, int]], t: int | None) -> int | None:
    """The step running at ``t``: a step whose span holds it, else (between steps, or after the last row) the next."""
    if t is None or not index:
        return None
    prev = None
    for start, end, step in index:
        if t < start:
            return step if prev is None else prev[2] + 1
        if t <= end:
            return step
        prev = (start, end, step)
    return prev[2] + 1 if prev else None


def entry_steps(entries: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``entries`` with a ``step`` column: the training step each Flight Recorder entry was issued in."""
    index = _step_index(steps)
    vals = [_step_at(index.get(int(r), []), t) for r, t in
            zip(entries.get_column("rank").to_list(), entries.get_column("created_ns").to_list())]
    return entries.with_columns(pl.Series("step", vals, dtype=pl.Int32))


def collective_arrivals(entries: pl.DataFrame | None, steps: pl.DataFrame | None) -> pl.DataFrame:
    """Each rank's arrival at each collective its Flight Recorder kept (``created_ns``: when the rank issued it),
    every step included (a profiler sees only its windows), in the shape of matched collectives: ``rank``,
    ``pg_name``, ``step``, ``order`` (the sequence id), ``arrival``, ``p2p``, ``ranks_seen``, ``last_arrival``,
    ``last_rank``, ``wait_ns`` (last arrival - own arrival). The ranks' clocks are taken as one (one host)."""
    if entries is None or entries.is_empty() or steps is None or steps.is_empty():
        return pl.DataFrame()
    e = entry_steps(entries.filter(pl.col("created_ns").is_not_null() & pl.col("seq").is_not_null()), steps)
    key = ["pg_name", "seq"]
    e = e.with_columns(
        pl.col("step").min().over(key).alias("step"),
        pl.col("is_p2p").fill_null(False).alias("p2p"),
        pl.col("created_ns").alias("arrival"),
        pl.col("seq").alias("order"),
    ).unique(["rank", *key], keep="first")
    out = e.with_columns(
        ranks_seen=pl.col("rank").n_unique().over(key),
        last_arrival=pl.col("arrival").max().over(key),
        last_rank=pl.col("rank").sort_by("arrival").last().over(key),
    ).with_columns(wait_ns=(pl.col("last_arrival") - pl.col("arrival")).clip(lower_bound=0))
    return out.select("rank", "pg_name", "step", "order", "arrival", "p2p", "ranks_seen", "last_arrival",
                      "last_rank", "wait_ns").sort("pg_name", "order", "rank")


# ---------------------------------------------------------------------------------------------- per rank
RANK_STATUS: dict[str, pl.DataType] = {
    "rank": pl.Int32,
    "state": pl.String,            # finished / timeout / peer_lost / error / aborted / gone / stalled / unknown
    "last_step": pl.Int32,         # last step row in steps.jsonl
    "step_reached": pl.Int32,      # the step the rank was in when it stopped (== last_step when it finished)
    "end_ns": pl.Int64,            # when it stopped: error, exit, else last heartbeat, else last step end
    "pg_name": pl.String,          # its last collective (Flight Recorder)
    "seq": pl.Int64,
    "op": pl.String,
    "sizes": pl.String,
    "dtypes": pl.String,
    "call_site": pl.String,
    "entered_ns": pl.Int64,
    "completed": pl.Boolean,       # that collective completed on this rank (pg_status.last_completed)
    "compile_id": pl.String,       # its last compile
    "co_name": pl.String,
    "compile_status": pl.String,
    "compile_start": pl.Int64,
    "compile_end": pl.Int64,
    "compile_step": pl.Int32,
    "error": pl.String,
    "fatal_call_site": pl.String,
    "fatal_op": pl.String,
    "has_dump": pl.Boolean,
}


def _state(rs: dict[str, Any] | None, finished_steps: bool) -> str:
    if rs is None:
        return "finished" if finished_steps else "unknown"
    err = (rs.get("error") or "").lower()
    if rs.get("fatal"):
        return "aborted"
    if err:
        if any(w in err for w in _TIMEOUT_WORDS):
            return "timeout"
        if any(w in err for w in _PEER_WORDS):
            return "peer_lost"
        return "error"
    reason = rs.get("exit_reason")
    if reason == "closed":
        return "finished"
    if rs.get("stalled_step") is not None:
        return "stalled"
    if reason is None:
        return "gone"
    return "error" if reason == "exception" else str(reason)


def rank_status(entries: pl.DataFrame, status: pl.DataFrame, rank_state: pl.DataFrame, steps: pl.DataFrame,
                compiles: pl.DataFrame, world_size: int | None = None) -> pl.DataFrame:
    """One row per rank (schema :data:`RANK_STATUS`): how it ended, the step it reached, its last collective."""
    cs = _collector_steps(steps)
    last = {int(r): (int(s), int(e) if e is not None else None) for r, s, e in
            cs.group_by("rank").agg(pl.col("step").max(), pl.col("end").max()).iter_rows()} if not cs.is_empty() else {}
    states = {int(r["rank"]): r for r in rank_state.iter_rows(named=True)}
    done = {(int(r["rank"]), r["pg_name"]): r["last_completed"] for r in status.iter_rows(named=True)}
    last_entry: dict[int, dict[str, Any]] = {}
    for r in entries.sort("created_ns", nulls_last=False).iter_rows(named=True):
        last_entry[int(r["rank"])] = r
    last_compile: dict[int, dict[str, Any]] = {}
    if not compiles.is_empty() and "start" in compiles.columns:
        for r in compiles.sort("start", nulls_last=False).iter_rows(named=True):
            if r.get("rank") is not None:
                last_compile[int(r["rank"])] = r
    heard = set(last) | set(states) | set(last_entry)
    index = _step_index(steps)
    rows = []
    heard |= {r for r in last_compile if r < (world_size or 0)}   # a compile alone: a rank of the world
    for rank in sorted(heard):
        rs = states.get(rank)
        state = _state(rs, rank in last)
        last_step, last_end = last.get(rank, (None, None))
        if rs is not None and rs.get("error_step") is not None:
            reached = rs["error_step"]
        elif rs is not None and rs.get("stalled_step") is not None and state == "stalled":
            reached = rs["stalled_step"]
        elif state in ("finished", "unknown"):
            reached = last_step
        else:
            reached = (last_step + 1) if last_step is not None else 0
        end_ns = None
        if rs is not None:
            end_ns = rs.get("error_ns") or rs.get("exit_ns") or rs.get("heartbeat_ns")
        end_ns = end_ns or last_end
        e = last_entry.get(rank)
        c = last_compile.get(rank)
        row = {"rank": rank, "state": state, "last_step": last_step, "step_reached": reached, "end_ns": end_ns,
               "error": rs.get("error") if rs else None,
               "fatal_call_site": rs.get("fatal_call_site") if rs else None,
               "fatal_op": rs.get("fatal_op") if rs else None,
               "has_dump": bool(rs.get("dumps")) if rs else rank in last_entry}
        if e is not None:
            lc = done.get((rank, e["pg_name"]))
            row.update(pg_name=e["pg_name"], seq=e["seq"], op=e["op"], sizes=e["in_sizes"], dtypes=e["in_dtypes"],
                       call_site=e["call_site"], entered_ns=e["created_ns"],
                       # gloo counts a collective that failed as completed: the one an error left did not
                       completed=(e["seq"] is not None and lc is not None and e["seq"] <= lc
                                  and state not in ("timeout", "peer_lost", "error", "stalled")))
            row["has_dump"] = True
        elif rs is not None and rs.get("fatal_op"):
            row.update(op=rs["fatal_op"], call_site=rs.get("fatal_call_site"), completed=False)
        if state == "unknown" and row.get("completed") is False:
            state = row["state"] = "stalled"   # a dump alone: blocked in a collective when it was written
        if c is not None:
            cstep = c.get("step")
            if cstep is None:
                cstep = _step_at(index.get(rank, []), c.get("start"))
            row.update(compile_id=c.get("compile_id"), co_name=c.get("co_name"), compile_status=c.get("status"),
                       compile_start=c.get("start"), compile_end=c.get("end"), compile_step=cstep)
        rows.append(row)
    table = pl.DataFrame(rows, schema=RANK_STATUS) if rows else pl.DataFrame(schema=RANK_STATUS)
    return pl.concat([table, _silent_ranks(world_size or 0, heard)]).sort("rank")


def _silent_ranks(world_size: int, heard: set[int]) -> pl.DataFrame:
    """One row per rank of the world nothing was heard from (no steps, state, dump or compile): state "unknown".
    Built as columns, so a world of a million ranks (or an input claiming one) costs megabytes, not a loop."""
    known = pl.Series("rank", sorted(heard), dtype=RANK_STATUS["rank"])
    silent = pl.int_range(0, world_size, eager=True, dtype=RANK_STATUS["rank"]).alias("rank")
    silent = silent.filter(~silent.is_in(known.implode())) if len(known) else silent
    return pl.DataFrame({"rank": silent}).with_columns(
        pl.lit("unknown").alias("state"), pl.lit(False).alias("has_dump")).select(
        [pl.col(c) if c in ("rank", "state", "has_dump") else pl.lit(None).alias(c) for c in RANK_STATUS]).cast(
        dict(RANK_STATUS))


# ---------------------------------------------------------------------------------------------- matching
@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first collective the ranks' Flight Recorders disagree on."""

    pg_name: str
    pg_desc: str | None
    seq: int
    problem: str                        # missing / extra / op / size / dtype / misaligned
    expected: dict[str, Any]            # the majority's entry
    odd_ranks: tuple[int, ...]
    odd: dict[int, dict[str, Any] | None]   # odd rank -> its entry at seq (None: it has none)
    missing_on: tuple[int, ...]


def _sig(e: dict[str, Any]) -> tuple:
    return (e["op"], e["in_sizes"], e["in_dtypes"])


def _majority(values: dict[int, Any]) -> Any:
    counts = Counter(values.values())
    top = max(counts.values())
    return next(v for r, v in sorted(values.items()) if counts[v] == top)


def first_mismatch(entries: pl.DataFrame, finished: set[int] = frozenset()) -> Mismatch | None:  # type: ignore[assignment]
    """The first (process group, sequence id) whose entries differ across the ranks that have dumps.

    ``entries`` needs a ``step`` column (:func:`entry_steps`) for the ``misaligned`` check. ``finished``: ranks
    that ended normally (when a sequence id is on some ranks only and the split is even, those are not odd).
    """
    coll = entries.filter(~pl.col("is_p2p") & pl.col("seq").is_not_null())
    if coll.is_empty():
        return None
    best: Mismatch | None = None
    best_t: int | None = None
    for (pg,), grp in coll.group_by(["pg_name"], maintain_order=True):
        by_rank: dict[int, dict[int, dict[str, Any]]] = {}
        for r in grp.iter_rows(named=True):
            by_rank.setdefault(int(r["rank"]), {})[int(r["seq"])] = r
        if len(by_rank) < 2:
            continue
        lo = max(min(s) for s in by_rank.values())
        hi = max(max(s) for s in by_rank.values())
        for seq in range(lo, hi + 1):
            have = {r: m[seq] for r, m in by_rank.items() if seq in m}
            lacking = tuple(sorted(set(by_rank) - set(have)))
            sigs = {r: _sig(e) for r, e in have.items()}
            found: Mismatch | None = None
            if len(set(sigs.values())) > 1:
                major = _majority(sigs)
                odd = tuple(sorted(r for r, s in sigs.items() if s != major))
                ref = next(have[r] for r in sorted(have) if sigs[r] == major)
                e = have[odd[0]]
                nxt = by_rank[odd[0]].get(seq + 1)
                if nxt is not None and _sig(nxt) == major:
                    problem = "extra"
                elif e["op"] != ref["op"]:
                    problem = "op"
                elif e["in_sizes"] != ref["in_sizes"]:
                    problem = "size"
                else:
                    problem = "dtype"
                found = Mismatch(str(pg), ref["pg_desc"], seq, problem, ref, odd, {r: have[r] for r in odd}, lacking)
            elif lacking:
                holders = tuple(sorted(have))
                ref = have[holders[0]]
                # the smaller side is odd; on a tie, a rank that finished normally is not the odd one
                if len(holders) < len(lacking) or (len(holders) == len(lacking) and set(lacking) <= set(finished)):
                    found = Mismatch(str(pg), ref["pg_desc"], seq, "extra", ref, holders,
                                     {r: have[r] for r in holders}, lacking)
                else:
                    found = Mismatch(str(pg), ref["pg_desc"], seq, "missing", ref, lacking,
                                     {r: None for r in lacking}, lacking)
            elif "step" in grp.columns:
                steps = {r: e.get("step") for r, e in have.items() if e.get("step") is not None}
                if len(set(steps.values())) > 1:
                    major = _majority(steps)
                    odd = tuple(sorted(r for r, s in steps.items() if s != major))
                    ref = next(have[r] for r in sorted(have) if steps.get(r) == major)
                    found = Mismatch(str(pg), ref["pg_desc"], seq, "misaligned", ref, odd,
                                     {r: have[r] for r in odd}, ())
            if found is not None:
                t = min((e["created_ns"] for e in have.values() if e["created_ns"] is not None), default=None)
                if best is None or (t is not None and (best_t is None or t < best_t)):
                    best, best_t = found, t
                break
    return best


# ---------------------------------------------------------------------------------------------- findings
def _short(site: str | None) -> str:
    if not site:
        return "an unknown line"
    path, _, rest = site.partition(":")
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) + ":" + rest if len(parts) > 2 else site


def _sizes_text(sizes: str | None, dtypes: str | None) -> str:
    try:
        sz = orjson.loads(sizes) if sizes else None
        dt = orjson.loads(dtypes) if dtypes else None
    except orjson.JSONDecodeError:
        return f"{sizes} {dtypes}"
    if isinstance(sz, list) and len(sz) == 1 and isinstance(dt, list) and len(dt) == 1:
        return f"{dt[0]}{sz[0]}"
    return f"{dt} {sz}"


def _ranks_text(ranks: Any) -> str:
    rs = sorted(int(r) for r in ranks)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def short_site(site: str | None) -> str:
    """``"faults/x.py:43 in main"``: a call site with only the last two path parts."""
    return _short(site)


def sizes_text(sizes: str | None, dtypes: str | None) -> str:
    """``"Float[433]"`` for one tensor, else the dtypes and sizes lists."""
    return _sizes_text(sizes, dtypes)


def _in_step(step: Any) -> str:
    return "" if step is None else f" in step {step}"


def _were(ranks: Any) -> str:
    return "was" if len(list(ranks)) == 1 else "were"


def _wall(steps: pl.DataFrame, ranks: list[int]) -> int | None:
    cs = _collector_steps(steps)
    if cs.is_empty():
        return None
    mine = cs.filter(pl.col("rank").is_in(ranks)) if ranks else cs
    if mine.is_empty():
        return None
    return int((mine["end"].max() or 0) - (mine["start"].min() or 0)) or None


def _compile_during(status_row: dict[str, Any], t0: int | None, t1: int | None) -> dict[str, Any] | None:
    """The rank's last compile when it overlaps [t0, t1] (or is still running)."""
    start, end = status_row.get("compile_start"), status_row.get("compile_end")
    if start is None or status_row.get("compile_id") is None:
        return None
    if t0 is None:
        return status_row if status_row.get("compile_status") == "incomplete" else None
    if (end is None or end >= t0) and (t1 is None or start <= t1):
        return status_row
    return None


def hang_findings(entries: pl.DataFrame, status: pl.DataFrame, rank_state: pl.DataFrame, steps: pl.DataFrame,
                  compiles: pl.DataFrame, world_size: int | None = None,
                  compiled: list[Finding] | None = None) -> list[Finding]:
    """The ``desync`` / ``hang`` / ``rank_died`` finding of a job that did not end cleanly (at most one: the first
    thing that went wrong; its consequences are in its evidence). ``compiled``: the ``compiled_desync`` findings
    (:func:`compiled_collective_findings`), which explain a rank that aborted inside a compiled graph."""
    st = rank_status(entries, status, rank_state, steps, compiles, world_size)
    if st.is_empty():
        return []
    rows = {int(r["rank"]): r for r in st.iter_rows(named=True)}
    bad = {r for r, x in rows.items() if x["state"] not in ("finished", "unknown")}
    foreign = rank_state.is_empty() and not entries.is_empty()   # dumps alone (no collector files): compare them
    if not bad and not foreign:
        return []
    if bad and all(rows[r]["state"] == "gone" for r in rows):
        return []   # no rank wrote an exit: still running, or the whole job was killed at once (nothing outlived)
    ent = entry_steps(entries, steps) if not entries.is_empty() else entries
    finished = {r for r, x in rows.items() if x["state"] == "finished"}
    mm = first_mismatch(ent, finished) if not ent.is_empty() else None
    steps_by_rank = {r: x["step_reached"] for r, x in rows.items()}
    state_by_rank = {r: x["state"] for r, x in rows.items()}
    sources = ["steps"]
    if not entries.is_empty():
        sources.append("flight_recorder")
    if not rank_state.is_empty():
        sources.append("collector_exit")

    def waits(ranks: list[int], pg: str | None, seq: int | None) -> dict[int, int]:
        out = {}
        for r in ranks:
            x = rows[r]
            e = None
            if pg is not None and seq is not None and not ent.is_empty():
                hit = ent.filter((pl.col("rank") == r) & (pl.col("pg_name") == pg) & (pl.col("seq") == seq))
                e = hit.row(0, named=True) if hit.height else None
            t0 = e["created_ns"] if e is not None else x.get("entered_ns")
            if t0 is not None and x.get("end_ns") is not None and x["end_ns"] >= t0:
                out[r] = int(x["end_ns"] - t0)
        return out

    def finding(kind: Kind, problem: str, message: str, odd: tuple[int, ...], pg: str | None, pg_desc: str | None,
                seq: int | None, ref: dict[str, Any] | None, odd_text: dict[int, str], odd_site: str | None,
                fix: str, comp: dict[str, Any] | None = None, extra_sources: tuple[str, ...] = ()) -> Finding:
        healthy = [r for r in rows if r not in odd]
        w = waits(healthy, pg, seq)
        cost = Cost.measured(sum(w.values()) / len(w), "healthy ranks' mean time blocked in the collective until "
                             "the job failed (Flight Recorder entry to the error/exit)") if w else \
            Cost.estimated(None, "no Flight Recorder entry times: the blocked time is unknown")
        timeout = None
        if ref is not None and ref.get("timeout_ms") is not None:
            timeout = int(ref["timeout_ms"])
        ev = JobFailureEvidence(
            problem=problem, pg_name=pg, pg_desc=pg_desc, seq=seq,
            op=ref.get("op") if ref else None, sizes=ref.get("in_sizes") if ref else None,
            dtypes=ref.get("in_dtypes") if ref else None, call_site=ref.get("call_site") if ref else None,
            odd_ranks=tuple(odd), odd=odd_text, odd_call_site=odd_site, steps_by_rank=steps_by_rank,
            state_by_rank=state_by_rank, wait_ns_by_rank=w, timeout_ms=timeout,
            compile_id=comp.get("compile_id") if comp else None, co_name=comp.get("co_name") if comp else None,
            compile_ns=(int(comp["compile_end"] - comp["compile_start"]) if comp and comp.get("compile_end")
                        and comp.get("compile_start") else None),
            compile_step=comp.get("compile_step") if comp else None, fix=fix,
            sources=tuple(dict.fromkeys(sources + list(extra_sources))))
        odd_steps = [steps_by_rank.get(r) for r in odd]
        return make_finding(kind, message, ev, cost, ranks=odd,
                            steps=[s for s in odd_steps if s is not None], wall_ns=_wall(steps, list(rows)),
                            source="hangs", key=f"pg{pg}:seq{seq}" if seq is not None else "")

    def where(pg: str | None, pg_desc: str | None, seq: int | None) -> str:
        if pg is None:
            return "a collective"
        return f"process group {pg}" + (f" ({pg_desc})" if pg_desc and pg_desc != "undefined" else "") + \
            (f" sequence {seq}" if seq is not None else "")

    def others_text(odd: tuple[int, ...]) -> str:
        oth = sorted(r for r in rows if r not in odd)
        by_step: dict[Any, list[int]] = {}
        for r in oth:
            by_step.setdefault(steps_by_rank.get(r), []).append(r)
        return "; ".join(f"{_ranks_text(rs)} reached step {s}" for s, rs in by_step.items())

    # 1. the Flight Recorders disagree
    if mm is not None:
        ref = mm.expected
        what = f"{ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])}"
        odd_text: dict[int, str] = {}
        odd_site = None
        for r in mm.odd_ranks:
            e = mm.odd.get(r)
            x = rows.get(r, {})
            if e is not None:
                odd_text[r] = (f"{e['op']} {_sizes_text(e['in_sizes'], e['in_dtypes'])} from {_short(e['call_site'])}"
                               f"{_in_step(e.get('step'))}")
                odd_site = odd_site or e["call_site"]
            elif x.get("fatal_call_site"):
                odd_text[r] = f"aborted in {x.get('fatal_op') or 'a call'} from {_short(x['fatal_call_site'])}"
                odd_site = odd_site or x["fatal_call_site"]
            elif x.get("pg_name") is not None:
                odd_text[r] = (f"its last collective was {where(x['pg_name'], None, x['seq'])} {x['op']} from "
                               f"{_short(x['call_site'])} (state {x['state']}, step {x['step_reached']})")
            else:
                odd_text[r] = f"{x.get('state', 'unknown')}{_in_step(x.get('step_reached'))}"
        ranks_t = _ranks_text(mm.odd_ranks)
        if mm.problem == "extra":
            e = mm.odd[mm.odd_ranks[0]] or {}
            msg = (f"Desync: {ranks_t} issued an extra {e.get('op')} {_sizes_text(e.get('in_sizes'), e.get('in_dtypes'))}"
                   f" from {_short(e.get('call_site'))}{_in_step(e.get('step'))} at {where(mm.pg_name, mm.pg_desc, mm.seq)}"
                   f", where {_ranks_text([r for r in rows if r not in mm.odd_ranks])} "
                   + (f"issued {what} from {_short(ref['call_site'])}{_in_step(ref.get('step'))}."
                      if mm.missing_on != tuple(r for r in rows if r not in mm.odd_ranks) or
                      _sig(e) != _sig(ref) else "issued nothing (they had finished or moved on)."))
            fix = (f"run the collective at {_short(e.get('call_site'))} on every rank of the group, or none "
                   "(a collective under a rank-dependent condition desynchronises the group)")
        elif mm.problem == "missing":
            msg = (f"Desync: {ranks_t} never issued {what} at {where(mm.pg_name, mm.pg_desc, mm.seq)}, which "
                   f"{_ranks_text([r for r in rows if r not in mm.odd_ranks and r in set(ent['rank'].to_list())])} "
                   f"issued from {_short(ref['call_site'])}{_in_step(ref.get('step'))}; instead: "
                   + "; ".join(f"rank {r} {t}" for r, t in odd_text.items()) + ".")
            fix = (f"make every rank reach the collective at {_short(ref['call_site'])} (a rank that skips or "
                   "leaves early, e.g. uneven data, desynchronises the group)")
        elif mm.problem == "misaligned":
            e = mm.odd[mm.odd_ranks[0]] or {}
            msg = (f"Desync: at {where(mm.pg_name, mm.pg_desc, mm.seq)} {ranks_t} issued {e.get('op')} from "
                   f"{_short(e.get('call_site'))}{_in_step(e.get('step'))} while the others issued {what} from "
                   f"{_short(ref['call_site'])}{_in_step(ref.get('step'))}: {ranks_t} is one collective ahead "
                   "(an extra call with the same shape pairs up silently).")
            fix = (f"run the collective at {_short(e.get('call_site'))} on every rank of the group, or none")
        else:
            msg = (f"Desync: at {where(mm.pg_name, mm.pg_desc, mm.seq)} {ranks_t} issued "
                   + "; ".join(odd_text.values()) + f", the others {what} from {_short(ref['call_site'])} "
                   f"(different {mm.problem}).")
            fix = (f"give the tensor at {_short(odd_site or ref['call_site'])} the same {mm.problem} on every rank "
                   "(pad it, or exchange sizes first with all_gather)")
        if any(v is not None for v in steps_by_rank.values()):
            msg += f" Steps: {others_text(mm.odd_ranks)}."
        return [finding(Kind.DESYNC, mm.problem, msg, mm.odd_ranks, mm.pg_name, mm.pg_desc, mm.seq, ref, odd_text,
                        odd_site, fix)]

    if not bad:
        return []

    # the collective the healthy ranks were stuck in: their last one, the earliest that did not complete
    def stuck(ranks: list[int]) -> dict[str, Any] | None:
        cands = [rows[r] for r in ranks if rows[r].get("pg_name") is not None and rows[r].get("seq") is not None]
        if not cands:
            return None
        open_ = [c for c in cands if not c.get("completed")] or cands
        c = min(open_, key=lambda x: (x.get("entered_ns") or 0))
        hit = ent.filter((pl.col("rank") == c["rank"]) & (pl.col("pg_name") == c["pg_name"]) &
                         (pl.col("seq") == c["seq"]))
        return hit.row(0, named=True) if hit.height else None

    gone = sorted(r for r in bad if rows[r]["state"] in ("gone", "aborted", "error") and not rows[r]["has_dump"]
                  or rows[r]["state"] == "aborted")
    # 2. a rank aborted inside a collective: a mismatch gloo caught (its own Flight Recorder died with it)
    aborted = [r for r in gone if rows[r]["state"] == "aborted" and rows[r].get("fatal_op")]
    in_graph = {r: f for f in (compiled or []) for r in f.ranks}
    if aborted and rows[aborted[0]].get("fatal_op") == "compiled graph" and aborted[0] in in_graph:
        r = aborted[0]
        x = rows[r]
        cf = in_graph[r]
        ev_c = cf.evidence
        healthy = [h for h in rows if h not in aborted]
        ref = stuck(healthy)
        odd_text = {r: f"aborted inside compiled graph [{ev_c.compile_id}], which issues an extra or different "
                       f"collective from {_short(ev_c.odd_call_site)}"}
        msg = (f"Desync: rank {r} aborted{_in_step(x.get('step_reached'))} inside compiled graph "
               f"[{ev_c.compile_id}] ({ev_c.graph}), whose collectives differ from the other ranks' at position "
               f"{ev_c.index} (from {_short(ev_c.odd_call_site)})"
               + (f"; {_ranks_text(healthy)} {_were(healthy)} in {where(ref['pg_name'], ref['pg_desc'], ref['seq'])} "
                  f"{ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])} from {_short(ref['call_site'])} "
                  f"in step {ref.get('step')}" if ref else "") + ".")
        return [finding(Kind.DESYNC, "extra", msg, (r,), ref.get("pg_name") if ref else None,
                        ref.get("pg_desc") if ref else None, ref.get("seq") if ref else None, ref, odd_text,
                        ev_c.odd_call_site, ev_c.fix, extra_sources=("fatal_traceback", "compile_log"))]
    if aborted:
        r = aborted[0]
        x = rows[r]
        healthy = [h for h in rows if h not in aborted]
        ref = stuck(healthy)
        same_site = ref is not None and x.get("fatal_call_site") == ref.get("call_site")
        same_step = ref is not None and x.get("step_reached") == ref.get("step")
        if ref is None:
            problem, msg_tail = "contents", ""
        elif same_site and same_step:
            problem = "contents"
            msg_tail = (f"the same call the others made: {where(ref['pg_name'], ref['pg_desc'], ref['seq'])} "
                        f"{ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])}{_in_step(ref.get('step'))} "
                        "— its tensor differs (size or dtype; gloo aborts on a received-size mismatch)")
        else:
            problem = "extra"
            msg_tail = (f"while {_ranks_text(healthy)} {_were(healthy)} in {where(ref['pg_name'], ref['pg_desc'], ref['seq'])} "
                        f"{ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])} from "
                        f"{_short(ref['call_site'])}{_in_step(ref.get('step'))}: an extra or different collective")
        odd_text = {r: f"aborted in {x.get('fatal_op')} from {_short(x.get('fatal_call_site'))} in step "
                       f"{x.get('step_reached')}"}
        msg = (f"Desync: rank {r} aborted in {x.get('fatal_op')} called from {_short(x.get('fatal_call_site'))} "
               f"in step {x.get('step_reached')} (after step {x.get('last_step')}), {msg_tail}.")
        if problem == "extra":
            fix = (f"run the collective at {_short(x.get('fatal_call_site'))} on every rank of the group, or none")
        else:
            fix = (f"give the tensor at {_short(x.get('fatal_call_site'))} the same shape and dtype on every rank "
                   "(pad it, or exchange sizes first with all_gather)")
        return [finding(Kind.DESYNC, problem, msg, (r,), ref.get("pg_name") if ref else None,
                        ref.get("pg_desc") if ref else None, ref.get("seq") if ref else None, ref, odd_text,
                        x.get("fatal_call_site"), fix, extra_sources=("fatal_traceback",))]

    # 3. a rank ended (killed, crashed) while the others waited
    dead = [r for r in gone if rows[r]["state"] in ("gone", "aborted", "error")]
    if dead:
        healthy = [h for h in rows if h not in dead]
        ref = stuck(healthy)
        odd_text = {}
        for r in dead:
            x = rows[r]
            how = {"gone": "gone (killed: no exit, no error recorded)", "aborted": "crashed (fatal signal)",
                   "error": f"raised {x.get('error')}"}[x["state"]]
            odd_text[r] = f"{how}{_in_step(x['step_reached'])}, after step {x['last_step']}"
        msg = (f"Rank died: {_ranks_text(dead)} {odd_text[dead[0]]}"
               + (f"; {_ranks_text(healthy)} waited for it in {where(ref['pg_name'], ref['pg_desc'], ref['seq'])} "
                  f"{ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])} from {_short(ref['call_site'])} "
                  f"in step {ref.get('step')}" if ref else "") + ".")
        fix = ("find why the process ended (its log; dmesg for the OOM killer; preemption): nothing in the "
               "collectives is wrong. Restart from a checkpoint (torchrun --max-restarts) and keep checkpoints "
               "frequent enough")
        return [finding(Kind.RANK_DIED, "died", msg, tuple(dead), ref.get("pg_name") if ref else None,
                        ref.get("pg_desc") if ref else None, ref.get("seq") if ref else None, ref, odd_text, None,
                        fix, extra_sources=("heartbeat",))]

    # 4. timeouts or stalls with no mismatch: who entered late or never, and what was it doing
    waiting = sorted(r for r in bad if rows[r]["state"] in ("timeout", "stalled"))
    if not waiting:
        waiting = sorted(bad)
    ref = stuck(waiting)
    t0 = ref["created_ns"] if ref else None
    late: list[int] = []
    if ref is not None:
        for r, x in rows.items():
            if r in waiting:
                continue
            hit = ent.filter((pl.col("rank") == r) & (pl.col("pg_name") == ref["pg_name"]) &
                             (pl.col("seq") == ref["seq"])) if not ent.is_empty() else ent
            t = hit.row(0, named=True)["created_ns"] if hit.height else None
            tmo = (ref.get("timeout_ms") or 0) * 1_000_000
            if t is None or (t0 is not None and tmo and t - t0 > tmo / 2) or (t0 is not None and not tmo and t > t0):
                late.append(r)
    if not late:
        late = sorted(r for r in rows if r not in waiting) or waiting
    odd_text = {}
    comp = None
    for r in late:
        x = rows[r]
        c = _compile_during(x, t0, max((rows[w].get("end_ns") or 0) for w in waiting) or None)
        if c is not None:
            comp = comp or c
            dur = (c["compile_end"] - c["compile_start"]) if c.get("compile_end") else None
            odd_text[r] = (f"compiling {c.get('co_name') or 'a frame'} [{c['compile_id']}] since step "
                           f"{c.get('compile_step')}" + (f" for {_fmt_s(dur)}" if dur else " (never finished)"))
        else:
            odd_text[r] = (f"in step {x['step_reached']}, last collective "
                           f"{where(x.get('pg_name'), None, x.get('seq'))} {x.get('op')} from {_short(x.get('call_site'))}"
                           if x.get("op") else f"in step {x['step_reached']}")
    w = waits(waiting, ref["pg_name"] if ref else None, ref["seq"] if ref else None)
    timeout_s = (ref.get("timeout_ms") or 0) / 1000 if ref else None
    msg = (f"Hang: {_ranks_text(waiting)} waited {_fmt_s(max(w.values()) if w else None)} in "
           f"{where(ref['pg_name'] if ref else None, ref['pg_desc'] if ref else None, ref['seq'] if ref else None)}"
           + (f" {ref['op']} {_sizes_text(ref['in_sizes'], ref['in_dtypes'])} from {_short(ref['call_site'])} in step "
              f"{ref.get('step')}" if ref else "")
           + (f" (timeout {timeout_s:g} s)" if timeout_s else "")
           + f" for {_ranks_text(late)}, which was " + "; ".join(odd_text.get(r, "?") for r in late) + ".")
    if comp is not None:
        fix = (f"stop the one-rank recompile of {comp.get('co_name')} [{comp['compile_id']}]: the same shapes on "
               "every rank, or mark the changing dim dynamic up front (`workbench recommend` writes the compile "
               "config); warm up every shape before training; a process-group timeout longer than the compile")
    else:
        fix = ("see what the late rank runs between its last collective and this one (its stack: py-spy dump; "
               "its log); a process-group timeout longer than that work")
    return [finding(Kind.HANG, "timeout", msg, tuple(late), ref.get("pg_name") if ref else None,
                    ref.get("pg_desc") if ref else None, ref.get("seq") if ref else None, ref, odd_text, None, fix,
                    comp, extra_sources=("compile_log",) if comp is not None else ())]


# ---------------------------------------------------------------------------------------------- compiled graphs
def _coll_text(r: dict[str, Any]) -> str:
    return f"{r['op']} group {r['group']} {r['dtype'] or ''}{r['shape'] or ''}"


def compiled_collective_findings(graph_collectives: pl.DataFrame) -> list[Finding]:
    """``compiled_desync`` for each compiled graph (compile id and graph kind, present on several ranks) whose
    ordered collectives differ across ranks."""
    if graph_collectives.is_empty():
        return []
    out = []
    gc = graph_collectives.sort("rank", "compile_id", "graph", "index")
    per: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = {}
    ranks_with_cid: dict[str, set[int]] = {}
    for r in gc.iter_rows(named=True):
        per.setdefault((r["compile_id"], r["graph"]), {}).setdefault(int(r["rank"]), []).append(r)
        ranks_with_cid.setdefault(r["compile_id"], set()).add(int(r["rank"]))
    all_ranks = set(gc.get_column("rank").to_list())
    reported: set[str] = set()
    order = {"dynamo_output_graph": 0, "aot_backward_graph": 1, "inductor_output_code": 2}
    for (cid, graph), by_rank in sorted(per.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 9))):
        # a rank that compiled this graph with no collectives at all has no rows: count it as an empty list
        lists = {r: tuple(_coll_text(x) for x in by_rank.get(r, [])) for r in all_ranks}
        if len(set(lists.values())) <= 1 or cid in reported:
            continue
        reported.add(cid)   # one finding per compile id (its forward graph first; the backward repeats it)
        major = _majority(lists)
        odd = tuple(sorted(r for r, v in lists.items() if v != major))
        o = lists[odd[0]]
        idx = next((i for i, (a, b) in enumerate(zip(o, major)) if a != b), min(len(o), len(major)))
        site = None
        rows_o = by_rank.get(odd[0], [])
        if idx < len(rows_o):
            site = rows_o[idx]["call_site"]
        else:
            maj_rank = next(r for r, v in lists.items() if v == major)
            rows_m = by_rank.get(maj_rank, [])
            site = rows_m[idx]["call_site"] if idx < len(rows_m) else None
        fix = (f"make the code at {_short(site)} issue the same collectives on every rank (no rank-dependent "
               "branch around a collective inside a compiled region)")
        ev = CompiledDesyncEvidence(cid, graph, idx, {r: v for r, v in sorted(lists.items())}, odd, site, fix)
        n_coll = f"{len(o)} collective" + ("" if len(o) == 1 else "s")
        msg = (f"Compiled collectives differ: graph [{cid}] ({graph}) issues {n_coll} on "
               f"{_ranks_text(odd)} but {len(major)} on the others; first difference at position {idx} "
               f"({o[idx] if idx < len(o) else 'nothing'} vs {major[idx] if idx < len(major) else 'nothing'}) "
               f"from {_short(site)}.")
        out.append(make_finding(Kind.COMPILED_DESYNC, msg, ev, Cost.none("a hang risk found in the compile logs"),
                                ranks=odd, source="hangs", key=f"{cid}:{graph}"))
    return out


def job_failure_first(findings: list[Finding[Any]]) -> list[Finding[Any]]:
    """``findings`` with the job-ending ones (desync, hang, rank_died) first: they explain why the run stopped."""
    first = [f for f in findings if f.kind in JOB_FAILURE_KINDS]
    return first + [f for f in findings if f.kind not in JOB_FAILURE_KINDS]


def hang_analysis(hang: Any, steps: pl.DataFrame, compiles: pl.DataFrame,
                  world_size: int | None = None) -> tuple[pl.DataFrame, list[Finding]]:
    """(rank status, findings) from a :class:`workbench.flight_recorder.HangTables`-like ``hang``."""
    if hang is None:
        return pl.DataFrame(schema=RANK_STATUS), []
    st = rank_status(hang.entries, hang.status, hang.rank_state, steps, compiles, world_size)
    compiled = compiled_collective_findings(hang.graph_collectives)
    return st, hang_findings(hang.entries, hang.status, hang.rank_state, steps, compiles, world_size,
                             compiled) + compiled


@register_detector(Kind.DESYNC, Kind.HANG, Kind.RANK_DIED, Kind.COMPILED_DESYNC,
                   needs=("hangs", "steps", "compiles", "world_size"), order=100, attributed=False)
def _job_failures(x: Inputs) -> list[Finding[Any]]:
    """Why the job stopped (:func:`hang_analysis` of the run's Flight Recorder and collector exit records)."""
    return hang_analysis(x.hangs, x.steps, x.compiles, x.world_size)[1]
