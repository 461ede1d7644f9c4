"""Findings from the GPU idle attribution (:mod:`workbench.analyses.idle_causes`): one per rank and host cause that
leaves the GPU idle for at least :data:`~workbench.analyses.kinds.IDLE_CAUSE_PCT` % of the analysed window.

* ``host_sync``: the ``sync`` cause (``.item()``, ``.cpu()``, ``.tolist()``, ``torch.cuda.synchronize``, a DtoH copy);
* ``unfused_optimizer``: the ``optimizer`` cause where the optimizer stepped per parameter (neither fused nor
  foreach);
* ``data_loading``: the ``data`` cause (a ``DataLoader`` in the trace, the collector's data wait before a step).

A cause counts where it recurs: it must reach that share of an average step in :data:`RECUR_STEPS` steps or more.

Each names its rank, steps and per-step cost, the op, and the line of the user's code: the trace's Python frame
where it was recorded ``with_stack``, else the collector's scan of the training script (``run.json``
``source_sites``: sync calls, optimizer constructions with their flags, the DataLoader). On a rank without a GPU
the same findings come from its host op stream (``idle_causes.host_op_stream``: host time between compute ops).
The launch gaps inside a compiled region stay ``launch_bound`` / ``host_bound``
(:mod:`workbench.analyses.breakdown`), costed from the ``launch`` cause only, so no idle second is counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from workbench.analyses.detectors import Inputs, register_detector
from workbench.analyses.findings import Cost, Finding, format_ns, make_finding
from workbench.analyses.idle_causes import HOST_STREAM
from workbench.analyses.kinds import IDLE_CAUSE_PCT, IdleCauseEvidence, Kind
from workbench.analyses.window import Window, window_steps
from workbench.source_scan import SourceScan, SourceSite

#: The kind each attributed cause is reported as (``optimizer`` only when it stepped per parameter).
KIND_OF_CAUSE: dict[str, Kind] = {"sync": Kind.HOST_SYNC, "optimizer": Kind.UNFUSED_OPTIMIZER,
                                  "data": Kind.DATA_LOADING}
#: The optimizer label (``idle_causes``) of a step that ran per parameter.
PER_PARAMETER = "(per-parameter)"
#: How the cost was measured: on a GPU stream, on a rank's host op stream (``idle_causes.host_op_stream``).
_METHOD = "GPU idle while the launching thread was in it, analysed window"
_METHOD_HOST = "host time between compute ops while the training thread was in it, analysed window"
#: A cause is a finding only where it reaches its share in at least this many of the rank's analysed steps (fewer
#: where the rank has fewer): on a busy host a thread descheduled once between two ops lands wherever it lands.
RECUR_STEPS = 2
#: Ops listed in a finding's evidence.
TOP_LABELS = 5


def _median(v: list[int]) -> int:
    v = sorted(v)
    n = len(v)
    return 0 if not n else v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) // 2


def _scan(meta: Mapping[str, Any] | None) -> SourceScan | None:
    sites = (meta or {}).get("source_sites")
    if not isinstance(sites, dict):
        return None
    try:
        return SourceScan.from_json(sites)
    except (TypeError, ValueError):
        return None


#: Which scanned sync call an op in the trace comes from.
_SYNC_CALL = {"aten::item": (".item()",), "aten::_local_scalar_dense": (".item()",), "aten::tolist": (".tolist()",),
              "aten::to": (".cpu()", ".numpy()", ".to()"), "aten::_to_copy": (".cpu()", ".numpy()", ".to()"),
              "aten::copy_": (".cpu()", ".numpy()", ".to()"),
              "cudaDeviceSynchronize": ("torch.cuda.synchronize", "cuda.synchronize"),
              "cudaStreamSynchronize": ("torch.cuda.synchronize", ".item()", ".cpu()")}


def site_of(cause: str, label: str | None, scan: SourceScan | None) -> SourceSite | None:
    """The scanned line of the user's script a cause comes from (the loop's lines first): the sync call its op
    makes, the optimizer constructed without ``fused``/``foreach`` (``foreach=False`` first), the DataLoader."""
    if scan is None:
        return None
    if cause == "sync":
        want = _SYNC_CALL.get(label or "", ())
        got = [s for s in scan.of("sync_call") if s.detail in want] or (
            scan.of("sync_call") if not want else [])
        got.sort(key=lambda s: (not s.in_loop, want.index(s.detail) if s.detail in want else len(want), s.line))
        return got[0] if got else None
    if cause == "optimizer":
        opts = scan.of("optimizer")
        got = [s for s in opts if "foreach=False" in s.detail] or [
            s for s in opts if "fused=True" not in s.detail and "foreach=True" not in s.detail]
        return got[0] if got else (scan.of("optimizer_step") or [None])[0]
    if cause == "data":
        got = scan.of("dataloader") or scan.of("batch_fetch")
        return got[0] if got else None
    return None


def idle_cause_findings(attribution: pl.DataFrame, window_ns: Mapping[int, int],
                        meta: Mapping[str, Any] | None = None) -> list[Finding[IdleCauseEvidence]]:
    """One finding per rank and cause of :data:`KIND_OF_CAUSE` whose attributed idle reaches
    :data:`IDLE_CAUSE_PCT` % of the rank's window (``window_ns``), in total and in at least :data:`RECUR_STEPS`
    of its steps (that share of an average step: a sync, a per-parameter optimizer step, a batch fetch recur; one
    step's descheduled thread does not); ``meta``: ``run.json`` (its source sites)."""
    if attribution is None or attribution.is_empty():
        return []
    scan = _scan(meta)
    steps_of = {int(r): {int(x) for x in st if x is not None} for r, st in
                attribution.group_by("rank").agg(pl.col("step").unique()).iter_rows()}
    a = attribution.filter(pl.col("cause").is_in(list(KIND_OF_CAUSE)))
    a = a.filter((pl.col("cause") != "optimizer") | pl.col("label").fill_null("").str.contains(PER_PARAMETER,
                                                                                                 literal=True))
    out: list[Finding[IdleCauseEvidence]] = []
    for (rank, cause), g in a.group_by(["rank", "cause"], maintain_order=True):
        total = int(g["ns"].sum())
        window = window_ns.get(int(rank))
        if not window or 100.0 * total / window < IDLE_CAUSE_PCT:
            continue
        by_step = {int(s): int(v) for s, v in g.group_by("step").agg(pl.col("ns").sum()).drop_nulls(
            "step").iter_rows()}
        floor = IDLE_CAUSE_PCT / 100.0 * window / max(1, len(steps_of.get(int(rank)) or by_step))
        if sum(v >= floor for v in by_step.values()) < min(RECUR_STEPS, len(steps_of.get(int(rank)) or by_step)):
            continue    # in one step only: a one-off (a thread descheduled on a busy host), not this pattern
        labels = g.group_by("label").agg(pl.col("ns").sum()).sort("ns", descending=True)
        top = labels["label"][0] if labels.height else None
        traced_site = g.filter(pl.col("site").is_not_null()).sort("ns", descending=True)["site"]
        scanned = site_of(str(cause), top, scan)
        site = traced_site[0] if traced_site.len() else (scanned.location if scanned else None)
        ev = IdleCauseEvidence(
            rank=int(rank), stream=int(g["stream"][0]) if g["stream"][0] is not None else None, cause=str(cause),
            label=top, site=site, site_text=scanned.snippet if scanned else None,
            site_detail=scanned.detail if scanned else None, idle_ns=total, gaps=int(g["gaps"].sum()),
            by_step=dict(sorted(by_step.items())), per_step_ns=_median(list(by_step.values())), window_ns=window,
            labels=tuple({"label": lab, "ns": int(ns)} for lab, ns in labels.head(TOP_LABELS).iter_rows()))
        kind = KIND_OF_CAUSE[str(cause)]
        out.append(make_finding(kind, _message(kind, ev), ev,
                                Cost.measured(total, _METHOD_HOST if ev.stream == HOST_STREAM else _METHOD),
                                ranks=[int(rank)], steps=sorted(by_step), source="idle_causes"))
    return out


def _message(kind: Kind, ev: IdleCauseEvidence) -> str:
    where = f" at {ev.site}" if ev.site else " (line not recorded: record a window with with_stack=True)"
    steps = len(ev.by_step)
    if ev.stream == HOST_STREAM:   # a rank without a GPU: its host op stream's gaps (idle_causes.host_op_stream)
        return _host_message(kind, ev, where, steps)
    head = (f"The GPU on rank {ev.rank} idled {format_ns(ev.idle_ns)} over {steps} step{'s' * (steps != 1)} "
            f"({format_ns(ev.per_step_ns)} per step, {ev.gaps} gaps) ")
    if kind == Kind.HOST_SYNC:
        return (head + f"waiting for the host after host-device syncs ({ev.label or 'a sync'}){where}: each one "
                       "waits for the GPU to finish, so the host stops running ahead and the GPU then waits for "
                       "every launch after it.")
    if kind == Kind.UNFUSED_OPTIMIZER:
        flags = f" ({ev.site_detail})" if ev.site_detail else ""
        return (head + f"while the optimizer stepped one parameter at a time outside the compiled model "
                       f"({ev.label}){where}{flags}: one small kernel per op per parameter, each waiting for its "
                       "launch.")
    flags = f" ({ev.site_detail})" if ev.site_detail else ""
    return (head + f"while the training thread loaded the next batch ({ev.label}){where}{flags}: the GPU has "
                   "nothing to run until the batch is built.")


def _host_message(kind: Kind, ev: IdleCauseEvidence, where: str, steps: int) -> str:
    head = (f"Rank {ev.rank}'s training thread spent {format_ns(ev.idle_ns)} over {steps} step{'s' * (steps != 1)} "
            f"({format_ns(ev.per_step_ns)} per step, {ev.gaps} gaps) between its compute ops ")
    if kind == Kind.HOST_SYNC:
        return (head + f"reading tensors back to the host and working on them ({ev.label or 'a sync'}){where}: on a "
                       "GPU each read is a host-device sync; keep the values as tensors and read them every N steps.")
    if kind == Kind.UNFUSED_OPTIMIZER:
        flags = f" ({ev.site_detail})" if ev.site_detail else ""
        return head + f"in an optimizer stepping one parameter at a time ({ev.label}){where}{flags}."
    flags = f" ({ev.site_detail})" if ev.site_detail else ""
    return head + f"loading the next batch ({ev.label}){where}{flags}: compute waits until the batch is built."


def window_by_rank(by_rank: pl.DataFrame | None, steps: pl.DataFrame | None = None,
                   window: Window = "steady") -> dict[int, int]:
    """Per rank: the analysed device window (``breakdown_by_rank``'s ``window_ns``); a rank without device activity
    (its host op stream analysed instead): the wall time of its analysed profiler steps (``steps``)."""
    out: dict[int, int] = {}
    if by_rank is not None and not by_rank.is_empty() and "window_ns" in by_rank.columns:
        out = {int(r): int(w) for r, w in by_rank.select("rank", "window_ns").iter_rows() if w}
    if steps is not None and not steps.is_empty():
        ws = window_steps(steps, window).filter(pl.col("in_window") & ~pl.col("rank").is_in(list(out)))
        for r, ns in ws.group_by("rank").agg((pl.col("end") - pl.col("start")).sum()).iter_rows():
            if ns:
                out[int(r)] = int(ns)
    return out


def claimed_ns(attribution: pl.DataFrame | None, window_ns: Mapping[int, int]) -> dict[int, int]:
    """Per rank: the idle time the cause findings cost (what ``gpu_idle`` leaves out)."""
    if attribution is None or attribution.is_empty():
        return {}
    out: dict[int, int] = {}
    for f in idle_cause_findings(attribution, window_ns):
        out[f.ranks[0]] = out.get(f.ranks[0], 0) + f.cost_ns
    return out


def _data_stragglers(found: Any) -> set[int]:
    """Ranks a straggler finding already blames on their data loading (the same time, seen from the others)."""
    from workbench.analyses.kinds import StragglerEvidence

    return {int(f.evidence.rank) for f in found
            if f.kind == Kind.STRAGGLER and isinstance(f.evidence, StragglerEvidence) and f.evidence.reason == "data"}


@register_detector(Kind.HOST_SYNC, Kind.UNFUSED_OPTIMIZER, Kind.DATA_LOADING,
                   needs=("idle_attribution", "breakdown_by_rank", "meta", "found"), order=96)
def _detect(x: Inputs) -> list[Finding[IdleCauseEvidence]]:
    """:func:`idle_cause_findings` of the analysed window; a rank's data loading that a straggler finding already
    names (it held the others back by it) is that finding's, not a second one."""
    late = _data_stragglers(x.found)
    return [f for f in idle_cause_findings(x.tables["idle_attribution"],
                                           window_by_rank(x.tables["breakdown_by_rank"], x.steps), x.meta)
            if not (f.kind == Kind.DATA_LOADING and f.ranks[0] in late)]


__all__ = ["KIND_OF_CAUSE", "claimed_ns", "idle_cause_findings", "site_of", "window_by_rank"]
