"""What a rank's host thread was doing in a stretch of time: one categorisation of activity, for every wait engine.

:func:`rank_spans` gathers a rank's labelled spans from what was recorded: the collector's steps (the data wait
before each step, the time between steps outside ``collector.step()``, the profiler's own export after a profiled
step), its compiles (compile logs), and inside profiler windows the training thread's host events (CPU ops,
annotations, Python frames). :func:`resolve` cuts a time interval ``[t0, t1]`` into pieces, each with one
category (the most specific span covering it, :data:`CATEGORIES` order; within a category the innermost), its
label (op name, function, compiled frame), its site (``file:line`` where known) and the step it belongs to; time
nothing covers is ``untraced``.

Categories, most specific first: ``compile`` (compile-log spans and ``(dynamo_timed)`` ranges), ``data`` (the data
wait before a step; ``DataLoader`` annotations), ``gc`` (a Python garbage collection the collector kept,
``gc.jsonl``: it stops whatever op or function allocated past the threshold, so it comes before them),
``sync`` (host-device syncs: ``aten::item``,
``aten::_local_scalar_dense``, ``cuda*Synchronize``, ``cudaMemcpy``), ``optimizer`` (``Optimizer.step#*`` and the ops
under it), ``collective`` (the rank's own communication calls),
``range`` (user ranges: ``collector.range(name)``, ``record_function``), ``cpu_op`` (other host ops; label: the op),
``python`` (Python frames, ``with_stack``; label: the function, site: its line), ``profiler`` (the collector's export
of a profiler window: between steps on the training thread, then in a background thread that holds the GIL in
part), ``outside_step`` (other time between two steps), ``untraced``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import polars as pl

#: Activity categories, most specific first (a piece of time covered by several spans takes the first).
CATEGORIES: tuple[str, ...] = ("compile", "data", "gc", "sync", "optimizer", "collective", "range", "cpu_op",
                               "python", "profiler", "outside_step", "untraced")
#: The profiler's background export overlaps the training thread's own activity: it takes only time nothing more
#: specific covers (its rank in :data:`CATEGORIES` already says so: after every traced category).
_RANK = {c: i for i, c in enumerate(CATEGORIES)}
#: What each category is, in words (messages and the report).
WORDS: dict[str, str] = {
    "compile": "compiling (torch.compile)", "data": "waiting for its batch (data loading)",
    "sync": "a host-device sync", "optimizer": "the optimizer step", "collective": "its own communication call",
    "gc": "a Python garbage collection", "range": "a recorded range", "cpu_op": "host ops (CPU compute)",
    "python": "Python code", "profiler": "the profiler's trace export (the collector's own work)",
    "outside_step": "code between steps, outside collector.step()", "untraced": "untraced host time",
}

#: The label of the profiler's background trace export spans.
EXPORT_LABEL = "profiler trace export (background thread)"


def gc_label(generation: int | None) -> str:
    """A garbage collection's label: its generation (2: a full collection, every object walked)."""
    if generation is None:
        return "generation not recorded"
    return "full collection (generation 2)" if generation == 2 else f"generation {generation} collection"

_SYNC = re.compile(r"^(aten::item|aten::_local_scalar_dense|cuda(Stream|Device|Event)Synchronize|cudaMemcpy(Async)?$)")
_DATA = re.compile(r"DataLoader|^enumerate\(")
_OPT = re.compile(r"^Optimizer\.(step|zero_grad)#")
_COMM = re.compile(r"^(c10d::|gloo:|nccl:|record_param_comms|c10d_functional::|_c10d_functional::)")
_COMPILE = re.compile(r"\(dynamo_timed\)$")
_PYFRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<fn>.+)$")
#: Annotations that are context, never a category of their own (steps, the collector's phase ranges, modules).
_CONTEXT = re.compile(r"^(ProfilerStep#\d+|forward|backward|optimizer|step \d+|## .* ##)$|\.forward$|^nn\.Module:")


@dataclass(frozen=True, slots=True)
class Span:
    """One labelled span of a rank's time: ``category`` (:data:`CATEGORIES`), ``label``, ``site`` (file:line)."""

    start: int
    end: int
    category: str
    label: str | None = None
    site: str | None = None
    step: int | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    """A piece of :func:`resolve`'s output: ``[start, end)`` with one category, label, site and step."""

    start: int
    end: int
    category: str
    label: str | None
    site: str | None
    step: int | None

    @property
    def ns(self) -> int:
        return self.end - self.start


# ---------------------------------------------------------------------------------------------- spans
def step_spans(steps: pl.DataFrame, rank: int) -> tuple[list[Span], list[tuple[int, int, int]]]:
    """The collector's step records of ``rank`` as spans (data waits, time between steps, the profiler's export)
    and the step bounds ``(start - data wait, end, step)`` used to give each piece its step."""
    if steps is None or steps.is_empty():
        return [], []
    s = steps.filter(pl.col("rank") == rank)
    if "source" in s.columns:
        col = s.filter(pl.col("source").cast(pl.String) == "collector")
        s = col if not col.is_empty() else s
    s = s.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null()).sort("start")
    dw = s["data_wait_ns"].fill_null(0).to_list() if "data_wait_ns" in s.columns else [0] * s.height
    prof = s["profiled"].fill_null(False).to_list() if "profiled" in s.columns else [False] * s.height
    spans: list[Span] = []
    bounds: list[tuple[int, int, int]] = []
    prev_end: int | None = None
    prev_step: int | None = None
    prev_prof = False
    for step, start, end, wait, p in zip(s["step"].to_list(), s["start"].to_list(), s["end"].to_list(), dw, prof):
        ask = start - max(0, int(wait or 0))
        if wait:
            spans.append(Span(ask, start, "data", "batch wait before the step (steps.jsonl)", None, step))
        if prev_end is not None and ask > prev_end:
            cat = "profiler" if prev_prof else "outside_step"
            label = "profiler trace export" if prev_prof else "between steps, outside collector.step()"
            spans.append(Span(prev_end, ask, cat, label, None, prev_step))
        bounds.append((ask, end, int(step)))
        prev_end, prev_step, prev_prof = end, int(step), bool(p)
    return spans, bounds


def compile_spans(compiles: pl.DataFrame | None, rank: int) -> list[Span]:
    """``rank``'s compiles (compile logs) as ``compile`` spans, labelled with the compiled frame and its line."""
    if compiles is None or compiles.is_empty():
        return []
    c = compiles.filter((pl.col("rank") == rank) & pl.col("start").is_not_null() & pl.col("end").is_not_null())
    out = []
    for r in c.select("start", "end", "co_name", "co_filename", "co_firstlineno", "compile_id").iter_rows():
        start, end, name, fname, line, cid = r
        site = f"{fname}:{line}" if fname and line is not None else None
        out.append(Span(int(start), int(end), "compile", f"compile {cid} of {name or '?'}", site))
    return out


def event_category(kind: str, name: str) -> tuple[str, str | None, str | None] | None:
    """(category, label, site) of one host event, or None for context annotations (steps, phase ranges)."""
    if kind == "python":          # python_function events (with_stack)
        m = _PYFRAME.match(name)
        if m:
            return "python", m.group("fn"), f"{m.group('file')}:{m.group('line')}"
        return "python", name, None
    if _COMPILE.search(name):
        return "compile", name.removesuffix(" (dynamo_timed)"), None
    if _CONTEXT.search(name):
        return None
    if _DATA.search(name):
        return "data", name, None
    if _SYNC.search(name):
        return "sync", name, None
    if _OPT.search(name):
        return "optimizer", name, None
    if _COMM.search(name):
        return "collective", name, None
    if kind == "annotation":
        return "range", name, None
    if kind == "cpu_op":
        return "cpu_op", name, None
    return None


def event_spans(events: pl.DataFrame | None, rank: int, t0: int | None = None, t1: int | None = None) -> list[Span]:
    """Host events of ``rank``'s training threads (those holding ``ProfilerStep#`` annotations) as spans, those that
    overlap ``[t0, t1]`` when given."""
    if events is None or events.is_empty():
        return []
    e = events.filter(pl.col("rank") == rank)
    if t0 is not None and t1 is not None:
        e = e.filter((pl.col("end") > t0) & (pl.col("start") < t1))
    if e.is_empty():
        return []
    e = e.with_columns(pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String))
    steps_tids = events.filter((pl.col("rank") == rank) & pl.col("name").cast(pl.String).str.starts_with(
        "ProfilerStep#"))["tid"].drop_nulls().unique().to_list()
    if steps_tids:
        e = e.filter(pl.col("tid").is_in(steps_tids))
    e = e.filter(pl.col("kind").is_in(["cpu_op", "annotation", "python"]) & (pl.col("end") > pl.col("start")))
    out = []
    for kind, name, start, end in e.select("kind", "name", "start", "end").iter_rows():
        got = event_category(kind, name or "")
        if got is not None:
            out.append(Span(int(start), int(end), got[0], got[1], got[2]))
    return out


def rank_spans(rank: int, steps: pl.DataFrame | None, compiles: pl.DataFrame | None = None,
               events: pl.DataFrame | None = None, exports: Sequence[tuple[int, int, int | None]] = (),
               gc: Sequence[tuple[int, int, int | None]] = ()) -> tuple[list[Span], list[tuple[int, int, int]]]:
    """Every labelled span of ``rank`` (steps, compiles, window events, the profiler's background trace exports:
    ``exports``, (start, end, GIL CPU), its garbage collections: ``gc``, (start, end, generation)) and its step
    bounds (:func:`step_spans`)."""
    spans, bounds = step_spans(steps, rank) if steps is not None else ([], [])
    spans += [Span(int(e[0]), int(e[1]), "profiler", EXPORT_LABEL) for e in exports]
    spans += [Span(int(a), int(b), "gc", gc_label(g)) for a, b, g in gc]
    return spans + compile_spans(compiles, rank) + event_spans(events, rank), bounds


# ---------------------------------------------------------------------------------------------- resolution
def step_of(bounds: Sequence[tuple[int, int, int]], t: int) -> int | None:
    """The step a time belongs to: the step whose span (from its batch request to its end) holds ``t``; between
    steps, the step before (its tail: the collector's own work, the user's code after it)."""
    prev = None
    for a, b, s in bounds:
        if t < a:
            return prev if prev is not None else s
        if t < b:
            return s
        prev = s
    return prev


def resolve(spans: Iterable[Span], t0: int, t1: int, bounds: Sequence[tuple[int, int, int]] = ()) -> list[Piece]:
    """``[t0, t1)`` cut into pieces: each the most specific span covering it (:data:`CATEGORIES` order; the innermost,
    latest-starting, within a category), time no span covers ``untraced``; pieces also end at step bounds, and
    each carries its step (:func:`step_of`)."""
    if t1 <= t0:
        return []
    mine = [s for s in spans if s.end > t0 and s.start < t1]
    cuts = {t0, t1}
    for s in mine:
        cuts.add(max(t0, s.start))
        cuts.add(min(t1, s.end))
    for a, b, _ in bounds:
        for x in (a, b):
            if t0 < x < t1:
                cuts.add(x)
    edges = sorted(cuts)
    mine.sort(key=lambda s: s.start)
    out: list[Piece] = []
    active: list[Span] = []
    j = 0
    for a, b in zip(edges, edges[1:]):
        while j < len(mine) and mine[j].start <= a:
            active.append(mine[j])
            j += 1
        active = [s for s in active if s.end > a]
        best = min(active, key=lambda s: (_RANK[s.category], -s.start), default=None)
        step = step_of(bounds, a) if bounds else None
        if best is None:
            piece = Piece(a, b, "untraced", None, None, step)
        else:
            piece = Piece(a, b, best.category, best.label, best.site, best.step if best.step is not None else step)
        if out and (out[-1].category, out[-1].label, out[-1].site, out[-1].step) == (
                piece.category, piece.label, piece.site, piece.step) and out[-1].end == a:
            out[-1] = Piece(out[-1].start, b, piece.category, piece.label, piece.site, piece.step)
        else:
            out.append(piece)
    return out


def totals(pieces: Iterable[Piece], *, rel_step: int | None = None) -> dict[tuple[str, str | None, int], int]:
    """Time per (category, label, step offset) of ``pieces``; the step offset is the piece's step minus
    ``rel_step`` (0 when either is unknown), so that intervals of several ranks compare piece by piece."""
    out: dict[tuple[str, str | None, int], int] = {}
    for p in pieces:
        off = (p.step - rel_step) if (p.step is not None and rel_step is not None) else 0
        key = (p.category, p.label, off)
        out[key] = out.get(key, 0) + p.ns
    return out


__all__ = ["CATEGORIES", "EXPORT_LABEL", "Piece", "Span", "WORDS", "compile_spans", "event_category", "event_spans",
           "rank_spans",
           "resolve", "step_of", "step_spans", "totals"]
