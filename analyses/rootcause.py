"""Root causes and their symptoms, attributed by time, so no second is counted twice.

Causes (compiles, a divergent recompile, a straggler) and symptoms (GPU idle, exposed communication, exposed
copies) are both sets of intervals per rank (absolute ns):

* a divergent recompile explains, on every rank it names, the time from the compile's start until the compiling
  rank reached the collectives of that step;
* any other compile finding explains its compiles' time on the rank that compiled;
* a straggler explains the others' wait in the collectives it arrived at last, and its own data-wait time;
* a pipeline bubble explains its stages' point-to-point communication (a stage waiting for its neighbour).

Each symptom's intervals are intersected with the causes' (most costly cause first; time one cause claimed is not
claimed again). The overlap becomes a symptom under that cause (cost measured: the overlapping time); what no
cause explains stays a finding of its own if it still passes its detector's threshold on the rest of the window.
Per rank, the causes' costs then never add up to more than the analysed wall time (each is capped there); a
symptom's cost is shown within its cause's (``findings.within_root``); every severity is the cost's share of the
wall time of the steps it was measured over (:func:`measured_wall_ns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from workbench.analyses import metrics
from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import (
    Cost, Evidence, Finding, count_text, format_ns, kind_spec, make_finding, no_more_severe, ranks_text, rescore,
    sort_findings, within_root,
)
from workbench.analyses.intervals import Spans, intersect, length, merge, subtract
from workbench.analyses.kinds import (
    EXPOSED_COMM_PCT, RECOMPILE_KINDS, CollectiveWaitEvidence, CompileGroupEvidence, CompileSkewEvidence,
    CompilingEvidence, ConfigDivergenceEvidence, DivergentRecompileEvidence, ExposedCommEvidence, Kind,
    PipelineBubbleEvidence, SkippedFrameEvidence, StragglerEvidence, odd_ranks,
)
from workbench.analyses.window import Window, window_steps
from workbench.communication import is_collective_range, is_comm_host_op, is_p2p_kernel, is_p2p_range

#: Symptom time under a cause shorter than this is attributed (taken off the symptom) but not listed.
MIN_SYMPTOM_NS = 1_000_000


# ---------------------------------------------------------------------------------------------- symptom time
@dataclass(slots=True)
class DeviceTime:
    """Per rank: the analysed device window and its idle / exposed-communication / exposed-copy intervals (for CPU
    ranks: the analysed profiler steps and the collectives the host waited for, see :func:`host_time`)."""

    window: dict[int, Spans] = field(default_factory=dict)
    idle: dict[int, Spans] = field(default_factory=dict)
    exposed_comm: dict[int, Spans] = field(default_factory=dict)
    exposed_memory: dict[int, Spans] = field(default_factory=dict)
    comm: dict[int, Spans] = field(default_factory=dict)
    host: dict[int, bool] = field(default_factory=dict)   # ranks timed from the host (no device activity)
    steps: dict[int, list[int]] = field(default_factory=dict)  # the analysed steps of host-timed ranks
    p2p: dict[int, Spans] = field(default_factory=dict)   # point-to-point communication (a pipeline's waits)
    waits: dict[int, Spans] = field(default_factory=dict)  # waiting at collectives (the critical path): not transfer

    def of(self, kind: Kind) -> dict[int, Spans]:
        """The intervals a symptom of ``kind`` is (its ``symptom_time``; none for other kinds)."""
        name = kind_spec(kind).symptom_time
        return getattr(self, name) if name is not None else {}


def without_waits(device: DeviceTime, waits: dict[int, Spans]) -> DeviceTime:
    """``device`` whose exposed communication is transfer time only: each rank's waits at collectives (for a late
    rank, or in noise: the critical path's) taken out of it; ``waits`` kept on it."""
    for rank, w in waits.items():
        w = merge(w)
        device.waits[rank] = w
        if rank in device.exposed_comm:
            device.exposed_comm[rank] = subtract(device.exposed_comm[rank], w)
    return device


def host_time(events: pl.DataFrame | None, steps: pl.DataFrame | None, window: str = "steady",
              skip_ranks: Sequence[int] = ()) -> DeviceTime:
    """For ranks without device activity (CPU runs): the analysed profiler steps as the window, and as exposed
    communication the collectives' execution (``gloo:*`` / ``nccl:*`` ranges) while no host op of the training
    threads runs (the host waited for them); point-to-point send/recv are left out (a pipeline's waits are its
    bubble). ``idle`` is left empty: a CPU rank has no device to idle."""
    from workbench.analyses.window import window_steps

    out = DeviceTime()
    if events is None or events.is_empty() or steps is None or steps.is_empty():
        return out
    ws = window_steps(steps, window)  # type: ignore[arg-type]
    ws = ws.filter(pl.col("in_window") & ~pl.col("rank").is_in(list(skip_ranks)))
    if ws.is_empty():
        return out
    e = events.filter(pl.col("rank").is_in(ws["rank"].unique().implode()) & pl.col("kind").cast(pl.String).is_in(
        ["cpu_op", "annotation"])).select("rank", "tid", pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String),
                                          "start", "end")
    for (rank,), g in ws.group_by(["rank"]):
        rank = int(rank)
        win = merge(zip(g["start"].to_list(), g["end"].to_list()))
        mine = e.filter(pl.col("rank") == rank)
        # point-to-point waits are a pipeline's bubble (pipeline_bubble), not exposed collectives
        comm_ev = mine.filter(is_collective_range(pl.col("name")) & ~is_p2p_range(pl.col("name")))
        if comm_ev.is_empty():
            continue
        comm_tids = set(comm_ev["tid"].drop_nulls().to_list())
        work = mine.filter((pl.col("kind") == "cpu_op") & ~is_comm_host_op(pl.col("name"))
                           & ~pl.col("tid").is_in(list(comm_tids)))
        comm = intersect(merge(zip(comm_ev["start"].to_list(), comm_ev["end"].to_list())), win)
        busy = merge(zip(work["start"].to_list(), work["end"].to_list()))
        out.window[rank] = win
        out.exposed_comm[rank] = metrics.exposed_comm(comm, busy)   # the host's work stands for compute
        out.comm[rank] = comm
        out.host[rank] = True
        out.steps[rank] = sorted(int(x) for x in g["step"].to_list())
    return out


def device_time(window_kernels: pl.DataFrame, events: pl.DataFrame | None = None,
                steps: pl.DataFrame | None = None, window: str = "steady") -> DeviceTime:
    """:class:`DeviceTime` of the analysed window's device activity (KERNELS rows in the window); with ``events``
    and ``steps``, ranks without device activity get their host-side :func:`host_time`."""
    out = DeviceTime()
    if window_kernels is None or window_kernels.is_empty():
        if events is not None:
            return host_time(events, steps, window)
        return out
    k = window_kernels.select("rank", pl.col("kernel_class").cast(pl.String), "start", "end",
                              _p2p=is_p2p_kernel(pl.col("name"))
                              ).drop_nulls(["start", "end"])
    for (rank,), g in k.group_by(["rank"], maintain_order=True):
        rank = int(rank)
        rows = list(zip(g["start"].to_list(), g["end"].to_list(), g["kernel_class"].to_list()))
        p2p = g.filter(pl.col("_p2p") & (pl.col("kernel_class") == "communication"))
        if p2p.height:
            out.p2p[rank] = merge(zip(p2p["start"].to_list(), p2p["end"].to_list()))
        busy = merge((s, e) for s, e, _ in rows)
        if not busy:
            continue
        win = [(busy[0][0], max(e for _, e in busy))]
        compute = merge((s, e) for s, e, c in rows if c == "compute")
        comm = merge((s, e) for s, e, c in rows if c == "communication")
        mem = merge((s, e) for s, e, c in rows if c in ("memcpy", "memset"))
        out.window[rank] = win
        out.idle[rank] = metrics.idle(win, busy)
        out.exposed_comm[rank] = metrics.exposed_comm(comm, compute)
        out.exposed_memory[rank] = metrics.exposed_memory(mem, compute, comm)
        out.comm[rank] = comm
    if events is not None:
        host = host_time(events, steps, window, skip_ranks=sorted(out.window))
        for name in ("window", "exposed_comm", "comm", "host", "steps"):
            getattr(out, name).update(getattr(host, name))
    return out


def host_comm_findings(device: DeviceTime, min_pct: float = EXPOSED_COMM_PCT) -> list[Finding[ExposedCommEvidence]]:
    """``exposed_communication`` for ranks timed from the host (:func:`host_time`): collectives the training
    threads waited for, with no host op running, ≥ ``min_pct`` % of the analysed profiler steps."""
    out = []
    for rank in sorted(device.host):
        win, exp, comm = length(device.window[rank]), length(device.exposed_comm[rank]), length(device.comm[rank])
        if win <= 0 or 100.0 * exp / win < min_pct:
            continue
        row = {"rank": rank, "comm_ns": comm, "comm_exposed_ns": exp, "comm_exposed_pct": 100.0 * exp / win,
               "comm_overlap_pct": 100.0 * (comm - exp) / comm if comm else None, "window_ns": win}
        out.append(make_finding(
            Kind.EXPOSED_COMMUNICATION,
            f"The host waits for communication with nothing else running {row['comm_exposed_pct']:.1f}% of the "
            f"analysed steps on rank {rank} (a CPU run: collectives that the training threads block on; overlap "
            f"{row['comm_overlap_pct'] or 0:.0f}% of communication time).",
            ExposedCommEvidence(per_rank=(row,), timeline="host"),
            Cost.measured(exp, "collective time with no host op running, in the analysed profiler steps"),
            ranks=[rank], steps=device.steps.get(rank, ()), source="rootcause"))
    return out


# ---------------------------------------------------------------------------------------------- cause time
class CauseTables:
    """The tables :func:`cause_spans` reads, each indexed once on first use, so attributing thousands of findings
    stays linear in the tables (a compile log of 100k compilations gives as many recompile findings)."""

    def __init__(self, compiles: pl.DataFrame | None, matched: pl.DataFrame | None,
                 steps: pl.DataFrame | None) -> None:
        self._compiles = compiles if compiles is not None else pl.DataFrame()
        self._matched = matched if matched is not None else pl.DataFrame()
        self._steps = steps if steps is not None else pl.DataFrame()
        self._by_id: dict[tuple[int, str], list[tuple[int, int, str | None]]] | None = None
        self._last: dict[tuple[int, int], int] | None = None

    def compile_spans(self, ranks: Iterable[int], compile_ids: Iterable[str], co_name: str | None) -> Spans:
        """The merged time of the compiles ``compile_ids`` on ``ranks`` (of frame ``co_name`` when given)."""
        if self._by_id is None:
            self._by_id = {}
            if not self._compiles.is_empty():
                for r, cid, s, e, co in self._compiles.select("rank", "compile_id", "start", "end",
                                                               "co_name").iter_rows():
                    if s is not None and e is not None and cid is not None:
                        self._by_id.setdefault((int(r), cid), []).append((int(s), int(e), co))
        ids = set(compile_ids)
        return merge((s, e) for r in set(ranks) for cid in ids for s, e, co in self._by_id.get((r, cid), ())
                     if co_name is None or co == co_name)

    def last_arrival(self, step: int, ranks: Iterable[int]) -> int | None:
        """The latest arrival of any of ``ranks`` at a collective of ``step`` where it arrived last."""
        if self._last is None:
            self._last = {}
            m = self._matched
            if not m.is_empty():
                g = m.drop_nulls(["step", "last_rank"]).group_by("step", "last_rank").agg(pl.col("last_arrival").max())
                self._last = {(int(st), int(r)): int(v) for st, r, v in g.iter_rows() if v is not None}
        got = [self._last[(step, r)] for r in ranks if (step, r) in self._last]
        return max(got) if got else None

    def waits_for(self, rank: int) -> dict[int, Spans]:
        """Per other rank, its waits at the collectives ``rank`` arrived at last (arrival → last arrival)."""
        out: dict[int, list[tuple[int, int]]] = {}
        m = self._matched
        if not m.is_empty():
            m = m.filter((pl.col("last_rank") == rank) & (pl.col("rank") != rank) & ~pl.col("p2p"))
            for r, a, b in m.select("rank", "arrival", "last_arrival").iter_rows():
                if a is not None and b is not None:
                    out.setdefault(int(r), []).append((int(a), int(b)))
        return {r: merge(v) for r, v in out.items()}

    def data_waits(self, rank: int) -> Spans:
        """``rank``'s waits for its batches (collector steps: the ``data_wait_ns`` before each step start)."""
        st = self._steps
        if st.is_empty() or "data_wait_ns" not in st.columns:
            return []
        own = st.filter((pl.col("rank") == rank) & (pl.col("source").cast(pl.String) == "collector"))
        return merge((int(s - w), int(s)) for s, w in own.select("start", "data_wait_ns").iter_rows() if s is not None and w)


def cause_spans(f: Finding[Any], tables: CauseTables, all_ranks: Sequence[int] = (),
                device: DeviceTime | None = None) -> dict[int, Spans]:
    """Per rank, the time ``f`` explains (empty for findings that explain no time). A ``compiling`` finding
    explains its compiles' time on every rank (``all_ranks``): the others wait for the compiling rank."""
    ev = f.evidence
    if isinstance(ev, DivergentRecompileEvidence):
        if ev.compile_start is None:
            return {}
        end = ev.compile_end if ev.compile_end is not None else ev.compile_start
        if ev.step is not None:
            last = tables.last_arrival(ev.step, ev.compiling_ranks)
            if last is not None:
                end = max(end, last)
        return {r: [(ev.compile_start, end)] for r in f.ranks}
    if isinstance(ev, CompilingEvidence):
        spans = merge(ev.spans)
        return {r: spans for r in all_ranks}
    if isinstance(ev, CompileGroupEvidence):
        # the group's compiles on its ranks; every rank of the group waits through any of them (collectives)
        spans = tables.compile_spans(f.ranks, ev.compile_ids, ev.co_name)
        acc: dict[int, list[tuple[int, int]]] = {r: list(spans) for r in f.ranks} if spans else {}
        for sub in f.symptoms:  # recompiles linked under a limit or a graph break
            for r, sp in cause_spans(sub, tables, all_ranks).items():
                acc.setdefault(r, []).extend(sp)
        return {r: merge(v) for r, v in acc.items()}
    if isinstance(ev, SkippedFrameEvidence):   # the frame runs eagerly from the skip on: its profiled steps
        out: dict[int, Spans] = {}
        st = tables._steps
        for r, t in ev.since.items():
            if r not in f.ranks:
                continue
            prof = [] if st.is_empty() or "source" not in st.columns else [
                (int(a), int(b)) for a, b in st.filter((pl.col("rank") == r) & (pl.col("start") >= t)
                                                       & (pl.col("source").cast(pl.String) == "profiler"))
                .select("start", "end").iter_rows() if a is not None and b is not None]
            out[r] = merge(prof) if prof else [(t, 1 << 62)]
        return out
    if isinstance(ev, PipelineBubbleEvidence) and device is not None:
        return {r: device.p2p[r] for r in f.ranks if r in device.p2p}  # a stage waits for its neighbour: bubble
    if isinstance(ev, StragglerEvidence):
        out = tables.waits_for(ev.rank)
        own = tables.data_waits(ev.rank)
        if own:
            out[ev.rank] = merge(out.get(ev.rank, []) + own)
        return out
    return {}


# ---------------------------------------------------------------------------------------------- attribution
def _rank_of(f: Finding[Any]) -> int | None:
    return f.ranks[0] if len(f.ranks) == 1 else None


def _child(symptom: Finding[Any], cause: Finding[Any], ns: int) -> Finding[Any]:
    rank = _rank_of(symptom)
    method = f"{symptom.cost.method}, while {_cause_text(cause)} was under way"
    return symptom.replace(
        id=f"{symptom.id}@{cause.id}", cost=Cost.measured(ns, method), steps=cause.steps or symptom.steps,
        message=f"{symptom.spec.noun} on rank {rank}: {format_ns(ns)} while "
                f"{_cause_text(cause)} was under way.",
        symptoms=())


def _cause_text(cause: Finding[Any]) -> str:
    """``"the divergent recompile of rank 1 at step 8"``: a cause named in words (no id)."""
    who = cause.blamed_ranks
    steps = cause.steps
    at = "" if not steps else f" at step {steps[0]}" if len(steps) == 1 else f" in steps {steps[0]}-{steps[-1]}"
    return f"the {cause.spec.noun} of {ranks_text(who)}{at}" if who else f"the {cause.kind.value}"


def _wait_child(cause: Finding[Any]) -> Finding[CollectiveWaitEvidence] | None:
    """The collective waits a divergent recompile's cost was measured from, as its symptom."""
    ev = cause.evidence
    if not isinstance(ev, DivergentRecompileEvidence) or not ev.wait_by_rank or not cause.cost.method.startswith(
            "collective wait"):
        return None
    return make_finding(
        Kind.COLLECTIVE_WAIT,
        f"{_waited_text(ev.wait_by_rank)} in the collectives of step {ev.step} for the compile of "
        f"{ranks_text(ev.compiling_ranks)}.",
        CollectiveWaitEvidence(dict(ev.wait_by_rank), len(ev.wait_by_rank), (ev.step,) if ev.step is not None else ()),
        Cost.measured(max(ev.wait_by_rank.values()), cause.cost.method),
        ranks=sorted(ev.wait_by_rank), steps=[ev.step] if ev.step is not None else [], source="rootcause",
        key=cause.id)


def _waited_text(wait_by_rank: dict[int, int]) -> str:
    """``"Rank 0 waited 2.63 s"``, ``"Ranks 0 and 2 waited 2.63 s and 2.60 s"``, ``"Ranks 0, 2 and 3 waited 2.6 s,
    2.5 s and 2.4 s"`` (in rank order)."""
    items = sorted(wait_by_rank.items())
    times = [format_ns(v) for _, v in items]
    said = times[0] if len(times) == 1 else ", ".join(times[:-1]) + " and " + times[-1]
    who = ranks_text(k for k, _ in items)
    return f"{who[0].upper()}{who[1:]} waited {said}"


def link_config_causes(findings: Sequence[Finding[Any]]) -> list[Finding[Any]]:
    """A compile skew whose slow rank is the rank with a different config (``divergent_config`` /
    ``divergent_fingerprint``) goes under that config finding, which takes its time as an estimated cost."""
    findings = list(findings)
    configs = [f for f in findings if isinstance(f.evidence, ConfigDivergenceEvidence)]
    skews = [f for f in findings if isinstance(f.evidence, CompileSkewEvidence)]
    for c in configs:
        odd = odd_ranks(c.evidence.by_rank)
        mine = [s for s in skews if s.evidence.slowest_rank in odd and s in findings]
        if not mine:
            continue
        worst = max(mine, key=lambda s: s.cost_ns)
        linked = c.replace(
            symptoms=c.symptoms + tuple(mine),
            cost=Cost(worst.cost.ns, worst.cost.basis, f"compile skew of rank {worst.evidence.slowest_rank}, whose "
                      f"{c.evidence.field} differs: {worst.cost.method}"),
            message=f"{c.message} {ranks_text(odd).capitalize()} also compiled slower: "
                    f"{format_ns(worst.cost_ns)} of compile skew.")
        findings = [linked if f is c else f for f in findings if f not in mine]
    return findings


def _frame(ev: CompileGroupEvidence) -> tuple:
    return (ev.co_name, ev.co_filename, ev.co_firstlineno)


def _break_lines(ev: CompileGroupEvidence) -> set[int]:
    """Lines a graph break points at (``"item at /x/y.py:24"``), plus the frame's own first line."""
    out = {ev.co_firstlineno} if ev.co_firstlineno is not None else set()
    for src in ev.sources:
        tail = src.rsplit(":", 1)[-1]
        if tail.isdigit():
            out.add(int(tail))
    return out


def link_compile_causes(findings: Sequence[Finding[Any]]) -> list[Finding[Any]]:
    """One root per compile problem: a frame's recompiles go under the ``recompile_limit`` they ran into, and the
    recompiles of a graph break's resume function (``torch_dynamo_resume_in_<fn>_at_<line>``, e.g. a float from
    ``.item()`` specialised per value) go under that ``graph_break``; the root's cost is their compile time and
    its steps are the steps of those compiles (with its own)."""
    findings = list(findings)
    groups = [f for f in findings if isinstance(f.evidence, CompileGroupEvidence)]
    recompiles = [f for f in groups if f.kind in RECOMPILE_KINDS]
    order = {id(r): i for i, r in enumerate(recompiles)}
    by_frame: dict[tuple, list[Finding[Any]]] = {}
    by_name: dict[str, list[Finding[Any]]] = {}
    for r in recompiles:
        by_frame.setdefault(_frame(r.evidence), []).append(r)
        by_name.setdefault(r.evidence.co_name or "", []).append(r)
    taken: set[int] = set()          # recompiles already listed under a root (by identity)
    linked_as: dict[int, Finding[Any]] = {}
    for root in groups:
        ev = root.evidence
        if root.kind == Kind.RECOMPILE_LIMIT:
            found = by_frame.get(_frame(ev), [])
            why = "compile time of the frame's recompiles until the limit and at it (compile log)"
        elif root.kind == Kind.GRAPH_BREAK:
            names = {f"torch_dynamo_resume_in_{ev.co_name}_at_{ln}" for ln in _break_lines(ev)}
            found = [r for n in names for r in by_name.get(n, [])]
            why = "compile time of the resume function's recompiles after the break (compile log)"
        else:
            continue
        mine = sorted({id(r): r for r in found if id(r) not in taken and id(r) != id(root)}.values(),
                      key=lambda r: order[id(r)])
        if not mine or id(root) in taken:
            continue
        taken.update(id(r) for r in mine)
        total = sum(r.cost_ns for r in mine) + (root.cost_ns if root.kind == Kind.RECOMPILE_LIMIT else 0)
        steps = tuple(sorted({s for g in (root, *mine) for s in g.steps}))   # the steps its cost comes from
        linked_as[id(root)] = root.replace(
            symptoms=root.symptoms + tuple(mine), cost=Cost.measured(total, why), steps=steps,
            message=f"{root.message} It caused {count_text(sum(r.evidence.count for r in mine), 'recompile')} "
                    f"({format_ns(total)} of compile time), listed under it.")
    return [linked_as.get(id(f), f) for f in findings if id(f) not in taken]


def attribute(findings: Sequence[Finding[Any]], *, device: DeviceTime, compiles: pl.DataFrame,
              matched: pl.DataFrame, steps: pl.DataFrame, wall_ns: dict[int, int]) -> list[Finding[Any]]:
    """Root causes with their symptoms under them, most costly first (see the module docstring)."""
    findings = link_compile_causes(link_config_causes(findings))
    causes = [f for f in sort_findings(findings) if f.spec.role == "cause"]
    all_ranks = sorted(set(device.window) | set(wall_ns))
    tables = CauseTables(compiles, matched, steps)
    spans = {c.id: cause_spans(c, tables, all_ranks, device) for c in causes}
    children: dict[str, list[Finding[Any]]] = {c.id: [] for c in causes}
    roots: list[Finding[Any]] = [f for f in findings if f.spec.role != "symptom"]
    for s in (f for f in findings if f.spec.role == "symptom"):
        rank = _rank_of(s)
        remaining = device.of(s.kind).get(rank, []) if rank is not None else []
        if rank in device.waits and s.spec.symptom_time == "exposed_comm":
            s = _transfer_only(s, remaining, device.window.get(rank, []))   # waiting is no communication
            if s is None:
                continue
        if not remaining:
            roots.append(s)
            continue
        explained = 0
        claimed: list[tuple[int, int]] = []
        for c in causes:
            ov = intersect(remaining, spans[c.id].get(rank, []))
            ns = length(ov)
            if ns <= 0:
                continue
            if ns >= MIN_SYMPTOM_NS:
                children[c.id].append(_child(s, c, ns))
            remaining = subtract(remaining, ov)
            claimed.extend(spans[c.id].get(rank, []))
            explained += ns
        if not explained:
            roots.append(s)
            continue
        # with waits (the critical path), what is left of the symptom's own time, never more than its cost (a
        # launch-bound finding costs its launch gaps only, not every idle second left)
        rest = max(0, s.cost_ns - explained) if rank not in device.waits else min(s.cost_ns, length(remaining))
        window = length(subtract(device.window.get(rank, []), merge(claimed)))
        if window > 0 and 100.0 * rest / window >= (s.spec.threshold_pct or 0.0):
            roots.append(s.replace(
                cost=Cost.measured(rest, f"{s.cost.method}, outside the time its causes explain"),
                message=f"{s.message} ({format_ns(explained)} of it is explained by the causes above; "
                        f"{format_ns(rest)} is not.)"))
    out = []
    waited = _waits_under(causes, spans, device)
    window_ns = window_wall_ns(steps)
    for f in roots:
        kids = [*f.symptoms, *children.get(f.id, [])]
        wait = _wait_child(f)
        if wait is not None:
            kids = [*kids, wait]
        elif f.id in waited and not any(k.kind == Kind.COLLECTIVE_WAIT for k in kids):
            kids = [*kids, *waited[f.id]]
        f = _cap(f, wall_ns)
        kids = [within_root(k, f) for k in kids]          # a symptom is shown within its cause's cost
        f = rescore(f, measured_wall_ns(f, wall_ns, window_ns))
        out.append(f.replace(symptoms=tuple(no_more_severe(rescore(k, measured_wall_ns(k, wall_ns, window_ns)), f)
                                            for k in kids)))
    return sort_findings(out)


def _waits_under(causes: Sequence[Finding[Any]], spans: dict[str, dict[int, Spans]], device: DeviceTime
                 ) -> dict[str, list[Finding[CollectiveWaitEvidence]]]:
    """Per cause, the other ranks' waits at collectives (the critical path's) while it was under way, as
    ``collective_wait`` symptoms (most costly cause first; a wait is claimed once)."""
    out: dict[str, list[Finding[CollectiveWaitEvidence]]] = {}
    claimed: dict[int, Spans] = {}
    for c in causes:
        for rank, w in sorted(device.waits.items()):
            ov = subtract(intersect(w, merge(spans[c.id].get(rank, []))), claimed.get(rank, []))
            ns = length(ov)
            if ns < MIN_SYMPTOM_NS or rank in c.blamed_ranks:
                continue
            claimed[rank] = merge(claimed.get(rank, []) + ov)
            out.setdefault(c.id, []).append(make_finding(
                Kind.COLLECTIVE_WAIT, f"Rank {rank} waited {format_ns(ns)} in its collectives while "
                                      f"{_cause_text(c)} was under way.",
                CollectiveWaitEvidence({rank: ns}, len(ov), c.steps), Cost.measured(ns, "its waits at collectives "
                                                                                     "in that time (critical path)"),
                ranks=[rank], steps=c.steps, source="rootcause", key=c.id))
    return out


def _transfer_only(s: Finding[Any], transfer: Spans, window: Spans) -> Finding[Any] | None:
    """Exposed communication ``s`` costed by its transfer time alone (``transfer``: its intervals less the waits),
    or None when that is under its threshold share of the window."""
    ns, win = length(transfer), length(window)
    if ns <= 0 or (win > 0 and 100.0 * ns / win < (s.spec.threshold_pct or 0.0)):
        return None
    if ns >= s.cost_ns:
        return s
    return s.replace(cost=Cost.measured(ns, f"{s.cost.method}, transfer time only: waits for other ranks taken out"),
                     message=f"{s.message} ({format_ns(s.cost_ns - ns)} of it was waiting for other ranks, "
                             "not communication.)")


def _wall(f: Finding[Any], wall_ns: dict[int, int]) -> int | None:
    vals = [wall_ns[r] for r in f.ranks if r in wall_ns] or list(wall_ns.values())
    return max(vals) if vals else None


def window_wall_ns(steps: pl.DataFrame | None, window: Window = "steady") -> dict[int, int]:
    """Per rank: the wall time of its analysed profiler-window steps (each step's time, ``metrics.step_table``: its
    duration and data wait; the profiler's own step range where the collector did not record it)."""
    if steps is None or steps.is_empty():
        return {}
    ws = window_steps(steps, window).filter(pl.col("in_window"))
    st = {(int(r), int(s)): int(ns) for r, s, ns in metrics.step_table(steps).select("rank", "step", "step_ns")
          .iter_rows() if ns is not None and ns > 0}
    out: dict[int, int] = {}
    for r, s, a, b in ws.select("rank", "step", "start", "end").iter_rows():
        ns = st.get((int(r), int(s))) or (int(b - a) if a is not None and b is not None else 0)
        out[int(r)] = out.get(int(r), 0) + max(0, ns)
    return {r: ns for r, ns in out.items() if ns > 0}


def measured_wall_ns(f: Finding[Any], wall_ns: dict[int, int], window_ns: dict[int, int]) -> int | None:
    """The wall time ``f``'s cost was measured over, what its severity is a share of (the one definition): for a
    kind measured in the profiler window (``cost_scope == "window"``: idle, launch gaps, idle causes, exposed
    communication...), the wall time of its ranks' analysed window steps; for one measured over the steps or the
    run (stragglers, compiles), its ranks' analysed wall time (``wall_ns``)."""
    if kind_spec(f.kind).cost_scope == "window" and window_ns:
        vals = [window_ns[r] for r in f.ranks if r in window_ns] or ([] if f.ranks else list(window_ns.values()))
        if vals:
            return max(vals)
    return _wall(f, wall_ns)


def _cap(f: Finding[Any], wall_ns: dict[int, int]) -> Finding[Any]:
    """``f`` with its cost capped at the analysed wall time of its ranks (a cost cannot exceed the run)."""
    wall = _wall(f, wall_ns)
    if wall and f.cost.ns is not None and f.cost.ns > wall:
        return f.replace(cost=Cost(wall, f.cost.basis, f"{f.cost.method}, capped at the analysed wall time"))
    return f


def trace_compile_spans(events: pl.DataFrame) -> dict[int, Spans]:
    """Per rank, the time torch.compile ran as the trace shows it: the union of its ``(dynamo_timed)`` ranges."""
    if events is None or events.is_empty() or "name" not in events.columns:
        return {}
    e = events.filter(pl.col("name").cast(pl.String).str.ends_with("(dynamo_timed)")).select("rank", "start", "end")
    out: dict[int, Spans] = {}
    for (rank,), g in e.group_by(["rank"]):
        out[int(rank)] = merge(zip(g["start"].to_list(), g["end"].to_list()))
    return out


def compiling_finding(compiles: pl.DataFrame, traced: dict[int, Spans], window: dict[int, Spans],
                      explained: dict[int, Spans], explained_ids: set[tuple[int, str]]
                      ) -> Finding[CompilingEvidence] | None:
    """``compiling``: compile time inside the analysed device window that no other compile finding explains.

    Compile time comes from the compile logs (rows not named by ``explained_ids``) and from the trace's own
    ``(dynamo_timed)`` ranges (``traced``), less the time other compile findings already explain (``explained``).
    """
    spans: dict[int, Spans] = {r: list(v) for r, v in traced.items()}
    ids: dict[int, list[str]] = {}
    if compiles is not None and not compiles.is_empty():
        for r, cid, s, e in compiles.select("rank", "compile_id", "start", "end").iter_rows():
            if s is None or e is None or (int(r), cid) in explained_ids:
                continue
            spans.setdefault(int(r), []).append((int(s), int(e)))
            ids.setdefault(int(r), []).append(cid)
    ns: dict[int, int] = {}
    inside: list[tuple[int, int]] = []
    seen_in = "trace" if traced else "compile log"
    for r, v in spans.items():
        if r not in window:
            continue
        ov = subtract(intersect(window[r], merge(v)), explained.get(r, []))
        if length(ov) >= 1_000_000:
            ns[r] = length(ov)
            inside += ov
    if not ns:
        return None
    worst = max(ns, key=ns.get)
    return make_finding(
        Kind.COMPILING,
        f"torch.compile ran inside the profiler window on {ranks_text(ns)} "
        f"({format_ns(ns[worst])} on rank {worst}, seen in the {seen_in}): idle time and the other ranks' waits "
        "in that time are the compiler's, not slow host code or a straggler.",
        CompilingEvidence({r: tuple(v) for r, v in ids.items() if r in ns}, ns, {r: length(window[r]) for r in ns},
                          tuple(merge(inside)), seen_in),
        Cost.measured(ns[worst], f"compile time inside the analysed window ({seen_in})"),
        ranks=sorted(ns), source="rootcause")


# ---------------------------------------------------------------------------------------------- detectors
@register_detector(Kind.EXPOSED_COMMUNICATION, needs=("device",), order=80)
def _host_comm(x: Inputs) -> list[Finding[ExposedCommEvidence]]:
    """CPU ranks: the collectives the host blocked on (:func:`host_comm_findings`)."""
    return host_comm_findings(x.device)


def _explained_compiles(findings: Iterable[Finding[Evidence]]) -> set[tuple[int, str]]:
    """(rank, compile id) of every compile a compile-log finding already names."""
    out: set[tuple[int, str]] = set()
    for f in findings:
        ev = f.evidence
        if isinstance(ev, DivergentRecompileEvidence):
            out |= {(r, ev.compile_id) for r in ev.compiling_ranks}
        elif isinstance(ev, (CompileGroupEvidence, SkippedFrameEvidence)):
            out |= {(r, cid) for r in f.ranks for cid in ev.compile_ids}
    return out


@register_detector(Kind.COMPILING, needs=("found", "compiles", "matched", "steps", "device", "traced"), order=90)
def _compiling(x: Inputs) -> list[Finding[CompilingEvidence]]:
    """:func:`compiling_finding` for the compile time the earlier compile-log findings do not explain."""
    acc: dict[int, list[tuple[int, int]]] = {}
    tables = CauseTables(x.compiles, x.matched, x.steps)
    for f in x.found:  # time the compile-log findings already explain, per rank
        if isinstance(f.evidence, (CompileGroupEvidence, DivergentRecompileEvidence)):
            for r, sp in cause_spans(f, tables, sorted(x.device.window)).items():
                acc.setdefault(r, []).extend(sp)
    explained = {r: merge(v) for r, v in acc.items()}
    comp = compiling_finding(x.compiles, x.traced, x.device.window, explained, _explained_compiles(x.found))
    return [comp] if comp is not None else []


__all__ = ["CauseTables", "DeviceTime", "attribute", "cause_spans", "compiling_finding", "device_time",
           "host_comm_findings", "host_time", "link_compile_causes", "link_config_causes", "trace_compile_spans",
           "without_waits"]
