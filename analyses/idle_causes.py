"""GPU idle explained: every idle gap on a GPU stream attributed to what the host thread that launched the next
kernel was doing, one wait engine with the cross-rank critical path (docs/gpu-idle.md).

A gap on a rank's main stream, from the end of the previous activity (``t0``) to the start of the next (``t1``), is
a wait of the stream (the waiter) for the thread that launched the next kernel (the holder, by the launch's
correlation). When the launch began before ``t0`` the host was ahead and the gap is the device's own dependency
(another stream, an event): not the host's, left out. Otherwise the holder's time from ``t0`` to the launch is cut
into activities (:mod:`workbench.analyses.activities`: the same categories and spans the critical path splits a
late rank's time with) and the gap is split over them in proportion, with two rules of cause:

* a host-device sync that the holder was inside when the stream ran dry (or that returned inside the gap) takes the
  holder's ordinary host work until the next launch (ops, Python, untraced time): the sync emptied the queue, so
  that time is the host no longer running ahead (``sync``); a compile, the optimizer, data loading or the profiler
  in the same gap keep their own share;
* host time inside a compiled region (``Torch-Compiled Region``, ``CompiledFunction``) with nothing more specific
  is ``launch``: the compiled graph's own launches, what CUDA graphs (``mode="reduce-overhead"``) remove; other
  host ops outside every compiled region are ``eager`` (code running uncompiled: a skipped frame, a module called
  outside the compiled model).

Causes (:data:`CAUSES`): ``sync``, ``optimizer`` (the optimizer's step outside the compiled model; its label says
how it ran: ``fused``, ``foreach`` or ``per-parameter``), ``data`` (a ``DataLoader`` in the window, the collector's
data wait before a step), ``eager``, ``launch``, ``compile``, ``collective``, ``profiler``, ``between_steps`` (the
loop's own code outside ``collector.step()``), ``untraced``; and ``other_stream``: the part of a gap during which
the device ran something on another stream (a collective, a copy: the stream waited on that, not on the host).

A rank without device activity (a CPU job) has its host's own op stream analysed the same way
(:func:`host_op_stream`, stream :data:`HOST_STREAM`): its training thread's top-level compute ops stand in for the
kernels, so a gap is host time between compute ops, split over what the thread did.

:func:`idle_attribution` returns one row per rank, stream, step, cause and label (schema :data:`IDLE_ATTRIBUTION`);
the findings are built in :mod:`workbench.analyses.idle_findings`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

import polars as pl

from workbench.analyses import activities as act
from workbench.analyses.intervals import previous_end
from workbench.analyses.window import Window, window_kernels, window_steps

#: What a GPU idle gap is attributed to (module docstring).
CAUSES: tuple[str, ...] = ("sync", "optimizer", "data", "eager", "launch", "compile", "collective", "profiler",
                           "between_steps", "untraced", "other_stream")
#: One row per rank, main stream, step, cause and label: the idle time attributed there.
IDLE_ATTRIBUTION: dict[str, pl.DataType] = {
    "rank": pl.Int32, "stream": pl.Int64, "step": pl.Int32, "cause": pl.String, "label": pl.String,
    "site": pl.String, "ns": pl.Int64, "gaps": pl.Int64,
}
#: Host events that wait for the device (runtime calls and the ops that make them).
_SYNC_RUNTIME = re.compile(r"^cuda(Stream|Device|Event)Synchronize$|^cudaMemcpy$")
_SYNC_OPS = re.compile(r"^aten::(item|_local_scalar_dense|tolist|nonzero|masked_select|is_nonzero)$")
#: A copy to the host: the aten op around a DtoH memcpy (``.cpu()``, ``.to("cpu")``, ``.numpy()``).
_COPY_OPS = re.compile(r"^aten::(to|_to_copy|copy_)$")
_DTOH = re.compile(r"DtoH|Device -> Pageable|Device -> Pinned", re.I)
#: Compiled regions on the host.
_COMPILED = re.compile(r"^Torch-Compiled Region|^CompiledFunction|^## Call CompiledFxGraph")
#: The optimizer's step annotation and the ops that say how it ran.
_OPT_STEP = re.compile(r"^Optimizer\.step#(?P<name>[^.]+)\.step")
_FUSED = re.compile(r"^aten::_fused_")
_FOREACH = re.compile(r"^aten::_foreach_")
#: Activity categories → causes (those not listed: ``launch`` inside a compiled region, else ``eager``).
_CAUSE_OF = {"sync": "sync", "optimizer": "optimizer", "data": "data", "compile": "compile",
             "collective": "collective", "profiler": "profiler", "outside_step": "between_steps"}
#: Host activity a sync that drained the queue takes over (the rest keeps its own, more specific cause).
_ORDINARY = frozenset({"sync", "cpu_op", "python", "range", "untraced"})
#: The stream id of a rank's host op stream (:func:`host_op_stream`: ranks without device activity).
HOST_STREAM = -1
#: Host spans that neither are compute nor claim the ops inside them (a user range, Python frames).
_NOT_CLAIMING = frozenset({"range", "python"})


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=IDLE_ATTRIBUTION)


class _Index:
    """Spans sorted by start in buckets of similar length: the spans overlapping an interval, quickly (a bucket's
    candidates start at most its longest span's length before the interval)."""

    def __init__(self, spans: Sequence[act.Span]) -> None:
        by: dict[int, list[act.Span]] = {}
        for s in spans:
            by.setdefault(max(0, s.end - s.start).bit_length() // 2, []).append(s)
        self.buckets = []
        for group in by.values():
            group.sort(key=lambda s: s.start)
            self.buckets.append((max(s.end - s.start for s in group), [s.start for s in group], group))

    def over(self, t0: int, t1: int) -> list[act.Span]:
        out: list[act.Span] = []
        for longest, starts, group in self.buckets:
            lo = bisect.bisect_left(starts, t0 - longest)
            hi = bisect.bisect_left(starts, t1)
            out += [s for s in group[lo:hi] if s.end > t0]
        return out


def _thread_spans(ev: pl.DataFrame, steps: pl.DataFrame | None, rank: int) -> dict[int, tuple[_Index, _Index]]:
    """Per host thread of ``rank``: (activity spans, compiled-region spans). Activity spans are the critical path's
    (:func:`workbench.analyses.activities.event_category`) plus the device waits only a GPU has (the runtime's
    synchronize calls, a DtoH copy's op), labelled with the op the user's code called; the step records' spans
    (data wait, between steps, the profiler's export) go to every thread."""
    step_spans, _ = act.step_spans(steps, rank) if steps is not None else ([], [])
    out: dict[int, tuple[_Index, _Index]] = {}
    host = ev.filter(pl.col("kind").is_in(["cpu_op", "annotation", "python", "runtime"]))
    dtoh = _dtoh_correlations(ev)
    for (tid,), g in host.group_by(["tid"], maintain_order=True):
        spans: list[act.Span] = list(step_spans)
        compiled: list[act.Span] = []
        ops: list[tuple[int, int, str]] = []
        for kind, name, start, end, corr in g.select("kind", "name", "start", "end", "correlation").iter_rows():
            if end is None or start is None or end <= start:
                continue
            name = name or ""
            if _COMPILED.search(name):
                compiled.append(act.Span(start, end, "range", name))
                continue
            if kind == "runtime":
                if _SYNC_RUNTIME.search(name) or (name.startswith("cudaMemcpy") and corr in dtoh):
                    spans.append(act.Span(start, end, "sync", name))
                continue
            if kind == "cpu_op":
                ops.append((start, end, name))
            got = act.event_category(kind, name)
            if got is None and _SYNC_OPS.search(name):
                got = ("sync", name, None)
            if got is not None:
                spans.append(act.Span(start, end, got[0], got[1], got[2]))
        spans = _label_syncs(_optimizers_own(spans), ops)
        out[int(tid) if tid is not None else -1] = (_Index(spans), _Index(compiled))
    return out


def _optimizers_own(spans: list[act.Span]) -> list[act.Span]:
    """``spans`` less the syncs inside an optimizer's step: its reads of its own step counters (``_get_value``), the
    optimizer's time, never a sync at a line of the user's."""
    steps = sorted((s.start, s.end) for s in spans if s.category == "optimizer")
    if not steps:
        return spans
    starts = [a for a, _ in steps]

    def inside(s: act.Span) -> bool:
        i = bisect.bisect_right(starts, s.start) - 1
        return i >= 0 and steps[i][1] >= s.end

    return [s for s in spans if s.category != "sync" or not inside(s)]


def _dtoh_correlations(ev: pl.DataFrame) -> set[int]:
    """Correlation ids of device-to-host copies (their launches are syncs when the copy is pageable or waited)."""
    m = ev.filter((pl.col("kind") == "memcpy") | pl.col("name").cast(pl.String).str.contains("Memcpy"))
    if m.is_empty():
        return set()
    m = m.filter(pl.col("name").cast(pl.String).str.contains(_DTOH.pattern))
    return {int(c) for c in m["correlation"].drop_nulls().to_list()}


def _label_syncs(spans: list[act.Span], ops: list[tuple[int, int, str]]) -> list[act.Span]:
    """Each sync labelled with the outermost user-level op around it (``aten::item``, ``aten::to`` for a ``.cpu()``),
    the op the user's line called."""
    if not ops:
        return spans
    ops.sort()
    starts = [o[0] for o in ops]
    out = []
    for s in spans:
        if s.category != "sync":
            out.append(s)
            continue
        hi = bisect.bisect_right(starts, s.start)
        around = [o for o in ops[max(0, hi - 64):hi] if o[1] >= s.end and (_SYNC_OPS.search(o[2]) or
                                                                          _COPY_OPS.search(o[2]))]
        label = min(around, key=lambda o: o[0])[2] if around else s.label
        out.append(act.Span(s.start, s.end, "sync", label, s.site, s.step))
    return out


def _optimizer_kinds(ev: pl.DataFrame) -> list[tuple[int, int, str]]:
    """Each ``Optimizer.step#...`` annotation (start, end, how it ran): ``fused`` (an ``aten::_fused_*`` op inside),
    ``foreach`` (``aten::_foreach_*``), else ``per-parameter``."""
    ann = ev.filter(pl.col("name").cast(pl.String).str.contains(_OPT_STEP.pattern))
    if ann.is_empty():
        return []
    ops = ev.filter(pl.col("kind") == "cpu_op").select("start", "name").with_columns(
        pl.col("name").cast(pl.String)).sort("start")
    starts = ops["start"].to_list()
    names = ops["name"].to_list()
    out = []
    for name, a, b in ann.select(pl.col("name").cast(pl.String), "start", "end").iter_rows():
        lo, hi = bisect.bisect_left(starts, a), bisect.bisect_right(starts, b)
        inner = names[lo:hi]
        how = ("fused" if any(_FUSED.search(n or "") for n in inner) else
               "foreach" if any(_FOREACH.search(n or "") for n in inner) else "per-parameter")
        m = _OPT_STEP.search(name)
        out.append((int(a), int(b), f"{m.group('name') if m else 'optimizer'} step ({how})"))
    return out


def idle_attribution(kernels: pl.DataFrame, events: pl.DataFrame, steps: pl.DataFrame | None,
                     window: Window = "steady") -> pl.DataFrame:
    """Every host-caused idle gap on each rank's main stream, split over its causes (module docstring; schema
    :data:`IDLE_ATTRIBUTION`), one row per rank, stream, step, cause and label."""
    if events is None or events.is_empty():
        return _empty()
    from workbench.analyses.breakdown import main_streams

    if kernels is None or "launch_tid" not in kernels.columns:
        kernels = pl.DataFrame()
    with_device = set(kernels["rank"].unique().to_list()) if not kernels.is_empty() else set()
    host = host_op_stream(events, exclude=with_device)
    if not host.is_empty():
        kernels = host if kernels.is_empty() else pl.concat(
            [kernels.select(host.columns).with_columns(pl.col(c).cast(host.schema[c]) for c in host.columns), host])
    if kernels.is_empty():
        return _empty()
    st = steps if steps is not None else pl.DataFrame()
    kw = window_kernels(kernels, st, window).filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
    main = main_streams(kw)
    if main.is_empty():
        return _empty()
    rows: list[dict[str, Any]] = []
    kept = _window_steps(st, window)
    for rank, stream in main.iter_rows():
        host = stream == HOST_STREAM
        # the host's stream: every op, so that the window's last analysed step's tail ends at the next step's first
        # op; its gaps and pieces are then kept in the analysed steps only (below)
        src = kernels if host and kept is not None else kw
        k = src.filter((pl.col("rank") == rank) & (pl.col("stream") == stream)).sort("start").with_columns(
            _prev=previous_end(("rank", "stream")), _prev_step=pl.col("step").shift(1))
        # a gap between two recorded steps only (not across the unrecorded steps between two profiler windows)
        gaps = k.filter(pl.col("_prev").is_not_null() & (pl.col("start") > pl.col("_prev"))
                        & ((pl.col("step") - pl.col("_prev_step")).is_between(0, 1) | pl.col("step").is_null()
                           | pl.col("_prev_step").is_null())
                        & pl.col("launch_start").is_not_null() & (pl.col("launch_start") > pl.col("_prev")))
        mine = kept.get(int(rank)) if host and kept is not None else None
        if mine is not None:
            gaps = gaps.filter(pl.col("_prev_step").is_in(list(mine)))
        if gaps.is_empty():
            continue
        ev = events.filter(pl.col("rank") == rank).with_columns(pl.col("kind").cast(pl.String))
        threads = _thread_spans(ev, steps if steps is not None and not steps.is_empty() else None, int(rank))
        opt = _optimizer_kinds(ev)
        _, bounds = act.step_spans(steps, int(rank)) if steps is not None and not steps.is_empty() else ([], [])
        busy = _Busy(kw.filter((pl.col("rank") == rank) & (pl.col("stream") != stream)))
        acc: dict[tuple[int | None, str, str | None, str | None], list[int]] = {}
        for t0, t1, launch, tid, kstep in gaps.select("_prev", "start", "launch_start", "launch_tid",
                                                      "step").iter_rows():
            spans, compiled = threads.get(int(tid) if tid is not None else -1, (_Index([]), _Index([])))
            elsewhere, name = busy.over(int(t0), int(t1))
            parts = _split_gap(int(t0), int(t1), int(min(launch, t1)), spans, compiled, opt, bounds,
                               scale=1.0 - elsewhere / (t1 - t0))
            if elsewhere:
                parts[("other_stream", name, None, None)] = parts.get(("other_stream", name, None, None), 0) \
                    + elsewhere
            for (cause, label, site, pstep), ns in parts.items():
                # the host's own stream: each piece in the step the host did it in (the gap may cross a step's end)
                step = pstep if host and pstep is not None else kstep
                if mine is not None and step not in mine:
                    continue
                key = (step, cause, label, site)
                a = acc.setdefault(key, [0, 0])
                a[0] += ns
                a[1] += 1
        for (step, cause, label, site), (ns, n) in acc.items():
            if ns > 0:
                rows.append({"rank": rank, "stream": stream, "step": step, "cause": cause, "label": label,
                             "site": site, "ns": ns, "gaps": n})
    if not rows:
        return _empty()
    return pl.DataFrame(rows, schema=IDLE_ATTRIBUTION).sort("rank", "stream", "step", "cause", "label",
                                                            nulls_last=True)


def host_op_stream(events: pl.DataFrame, exclude: set[int] | frozenset[int] = frozenset()) -> pl.DataFrame:
    """The host's own op stream of each rank without device activity (ranks in ``exclude`` left out): the
    training thread's top-level compute ops (category ``cpu_op``, nested in no other op and in no sync, optimizer,
    data-loading, collective or compile span), as device-activity rows on stream :data:`HOST_STREAM` whose launch
    is the op itself. A gap between two of them is host time spent on something other than compute, attributed
    exactly as a GPU stream's gap is (an optimizer's step is one such gap, its ops included, as a GPU idles through
    the whole of a per-parameter step: an upper bound on what fusing it saves on a CPU, whose foreach kernels still
    loop over the tensors) (schema: ``rank``, ``name``, ``kernel_class``, ``start``, ``end``, ``dur``,
    ``stream``, ``step``, ``launch_start``, ``launch_tid``)."""
    schema = {"rank": pl.Int32, "name": pl.String, "kernel_class": pl.String, "start": pl.Int64, "end": pl.Int64,
              "dur": pl.Int64, "stream": pl.Int64, "step": pl.Int32, "launch_start": pl.Int64,
              "launch_tid": pl.Int64}
    if events is None or events.is_empty():
        return pl.DataFrame(schema=schema)
    e = events.filter(~pl.col("rank").is_in(list(exclude))) if exclude else events
    e = e.filter(pl.col("kind").cast(pl.String).is_in(["cpu_op", "annotation"]) & pl.col("start").is_not_null()
                 & pl.col("end").is_not_null() & (pl.col("end") > pl.col("start")))
    name = pl.col("name").cast(pl.String)
    training = e.filter(name.str.starts_with("ProfilerStep#")).select("rank", "tid").unique()
    if training.is_empty():
        return pl.DataFrame(schema=schema)
    e = e.join(training, on=["rank", "tid"], how="semi").with_columns(
        pl.col("kind").cast(pl.String), name).sort("rank", "tid", "start", pl.col("end"), descending=[
            False, False, False, True])
    rows: list[tuple[Any, ...]] = []
    cover_end, where = -1, None
    for rank, tid, kind, nm, start, end, step in e.select("rank", "tid", "kind", "name", "start", "end",
                                                          "step").iter_rows():
        if (rank, tid) != where:
            cover_end, where = -1, (rank, tid)
        got = act.event_category(kind, nm or "")
        if got is None or got[0] in _NOT_CLAIMING or start < cover_end:
            continue   # context or a user range (ops inside stay top-level), or nested in an op or a claim
        cover_end = end
        if got[0] == "cpu_op":
            rows.append((rank, nm, "compute", start, end, end - start, HOST_STREAM, step, start, tid))
    return pl.DataFrame(rows, schema=schema, orient="row")


def _window_steps(steps: pl.DataFrame, window: Window) -> dict[int, set[int]] | None:
    """Per rank, the profiler steps the window analyses (None: no profiler steps recorded)."""
    if steps is None or steps.is_empty():
        return None
    ws = window_steps(steps, window)
    if ws.is_empty():
        return None
    out: dict[int, set[int]] = {}
    for r, s in ws.filter(pl.col("in_window")).select("rank", "step").iter_rows():
        out.setdefault(int(r), set()).add(int(s))
    return out


class _Busy:
    """The device's other streams' activity on one rank, merged: how much of an interval it covers."""

    def __init__(self, k: pl.DataFrame) -> None:
        spans = sorted((int(a), int(b), str(n)) for a, b, n in k.select("start", "end", pl.col("name").cast(
            pl.String)).iter_rows() if a is not None and b is not None and b > a)
        merged: list[list[Any]] = []
        for a, b, n in spans:
            if merged and a <= merged[-1][1]:
                if b > merged[-1][1]:
                    merged[-1][1] = b
            else:
                merged.append([a, b, n])
        self.spans, self.starts = merged, [m[0] for m in merged]

    def over(self, t0: int, t1: int) -> tuple[int, str | None]:
        """(ns of ``[t0, t1]`` the other streams were busy, the first busy span's kernel)."""
        i = max(0, bisect.bisect_right(self.starts, t0) - 1)
        ns, name = 0, None
        while i < len(self.spans) and self.spans[i][0] < t1:
            a, b, n = self.spans[i]
            ov = min(b, t1) - max(a, t0)
            if ov > 0:
                ns += ov
                name = name or n
            i += 1
        return ns, name


def _split_gap(t0: int, t1: int, launch: int, spans: _Index, compiled: _Index, opt: list[tuple[int, int, str]],
               bounds: Sequence[tuple[int, int, int]], scale: float = 1.0
               ) -> dict[tuple[str, str | None, str | None, int | None], int]:
    """One gap ``[t0, t1]`` split over the causes of the holder's time ``[t0, launch]`` (module docstring), keyed
    (cause, label, site, step of the host's piece); ``scale``: the share of the gap the device had nothing else to
    do (the rest waited on its other streams)."""
    gap = int(round((t1 - t0) * scale))
    if gap <= 0:
        return {}
    around = spans.over(t0 - 1, max(launch, t0 + 1))
    compiling = [c for c in around if c.category == "compile"]
    sync = [s for s in around if s.category == "sync" and s.start <= launch and s.end >= t0
            and not any(c.start <= s.start and c.end >= s.end for c in compiling)]   # a compile's own copies
    if launch <= t0:
        return {("launch", None, None, None): gap}
    pieces = act.resolve(around, t0, launch, bounds)
    if sync:   # the sync drained the queue: the host's ordinary work until the launch is the sync's too
        s = max(sync, key=lambda s: min(s.end, launch) - max(s.start, t0))
        pieces = [act.Piece(p.start, p.end, "sync", s.label, s.site, p.step) if p.category in _ORDINARY else p
                  for p in pieces]
    total = sum(p.ns for p in pieces) or 1
    out: dict[tuple[str, str | None, str | None, int | None], int] = {}
    given = 0
    regions = compiled.over(t0, launch)
    for i, p in enumerate(pieces):
        cause = _CAUSE_OF.get(p.category)
        label, site = p.label, p.site
        if cause == "optimizer":
            label = next((lab for a, b, lab in opt if a <= p.start < b), label)
        elif cause is None:
            inside = any(r.start <= p.start and r.end >= p.end for r in regions)
            cause = "launch" if inside else ("untraced" if p.category == "untraced" else "eager")
            if inside:
                label, site = next((r.label for r in regions if r.start <= p.start and r.end >= p.end), None), None
        ns = gap - given if i == len(pieces) - 1 else int(round(gap * p.ns / total))
        given += ns
        key = (cause, label, site, p.step)
        out[key] = out.get(key, 0) + ns
    return out


def idle_by_cause(attribution: pl.DataFrame, by: Sequence[str] = ("rank", "cause")) -> pl.DataFrame:
    """``attribution`` (:data:`IDLE_ATTRIBUTION`) summed by ``by``: ``ns``, ``gaps``, ``steps`` (distinct steps)."""
    if attribution.is_empty():
        return pl.DataFrame(schema={**{c: IDLE_ATTRIBUTION[c] for c in by}, "ns": pl.Int64, "gaps": pl.Int64,
                                    "steps": pl.UInt32})
    return attribution.group_by(list(by)).agg(pl.col("ns").sum(), pl.col("gaps").sum(),
                                              steps=pl.col("step").n_unique()).sort(list(by))


__all__ = ["CAUSES", "HOST_STREAM", "IDLE_ATTRIBUTION", "host_op_stream", "idle_attribution", "idle_by_cause"]
