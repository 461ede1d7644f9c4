"""The one place the app calls analyses: thin, cached adapters from a run id to analysis frames.

Every adapter caches its result in the :class:`~workbench.app.store.RunStore` (per run and key), so a page and its
callbacks never compute twice. The analyses are imported plainly: the app, the CLI and the report run the same
functions on the same tables, so the numbers agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from workbench.analyses import diff as diff_analysis
from workbench.analyses import metrics
from workbench.analyses import recommendations as recs_analysis
from workbench.analyses import recompiles as recompiles_analysis
from workbench.analyses import summary as summary_analysis
from workbench.analyses.findings import costs_no_time
from workbench.analyses.kinds import Kind
from workbench.app.store import RunStore


def _cached(store: RunStore, rid: str, key: str, compute: Callable[[], Any]) -> Any:
    return store.cached(rid, key, compute)


# --------------------------------------------------------------------------------------- the analysis tables


def tables(store: RunStore, rid: str) -> summary_analysis.AnalysisTables:
    """Every analysis output of the run: :func:`workbench.analyses.summary.analysis_tables` (cached).

    The pages read these frames, so what they show is exactly what ``workbench analyze`` computes.
    """
    return _cached(store, rid, "tables", lambda: summary_analysis.analysis_tables(store.run(rid)))


def table(store: RunStore, rid: str, key: str) -> pl.DataFrame:
    """One analysis frame by name (a field of :class:`workbench.analyses.summary.AnalysisTables`)."""
    if key not in summary_analysis.AnalysisTables.names():
        raise KeyError(key)
    return getattr(tables(store, rid), key)


def summary(store: RunStore, rid: str) -> dict[str, Any]:
    """:func:`workbench.analyses.summary.summarize_tables` of :func:`tables` (what ``analyze --json`` prints)."""
    def go():
        run = store.run(rid)
        return summary_analysis.summarize_tables(tables(store, rid), run.ranks["rank"].to_list(), "steady")
    return _cached(store, rid, "summary", go)


def breakdown_steps(store: RunStore, rid: str) -> pl.DataFrame:
    """Per rank and step: :func:`workbench.analyses.breakdown.time_breakdown`."""
    return table(store, rid, "breakdown")


def breakdown_ranks(store: RunStore, rid: str) -> pl.DataFrame:
    """Per rank: :func:`workbench.analyses.breakdown.breakdown_by_rank`."""
    return table(store, rid, "breakdown_by_rank")


def overlap(store: RunStore, rid: str) -> pl.DataFrame:
    """:func:`workbench.analyses.overlap.comm_compute_overlap` per rank and step."""
    return table(store, rid, "overlap")


# ------------------------------------------------------------------------------------------------- findings


def findings(store: RunStore, rid: str) -> pl.DataFrame:
    """Every finding of the run (the typed findings' frame view, ``workbench.schema.FINDINGS``), in the analyses'
    order: root causes most costly first, each followed by the symptoms it explains (``cause_id`` = its ``id``);
    ``cost_ns`` null where it was not measured (as ``analyze --json`` prints it)."""
    return table(store, rid, "findings")


def root_causes(store: RunStore, rid: str) -> pl.DataFrame:
    """The root causes, most costly first."""
    return findings(store, rid).filter(pl.col("is_root"))


def symptoms_of(f: pl.DataFrame, root_id: str) -> pl.DataFrame:
    """The symptoms that root cause ``root_id`` explains (rows whose ``cause_id`` is it), most costly first."""
    return f.filter(pl.col("cause_id") == root_id)


def straggler_findings(store: RunStore, rid: str) -> pl.DataFrame:
    """The straggler rows of the run's findings."""
    return findings(store, rid).filter(pl.col("kind") == Kind.STRAGGLER.value)


@dataclass(frozen=True, slots=True)
class Headline:
    """What the run list says about a run: its top root cause and what it costs (or why there is none)."""

    kind: str | None
    cost_ns: int | None
    cost_basis: str | None
    message: str | None
    roots: int
    gpu: bool
    wall_ns: int | None
    error: str | None = None


def run_span_ns(store: RunStore, rid: str) -> int | None:
    """The run's span: the longest rank's analysed wall time (:func:`workbench.analyses.metrics.wall_ns`, first
    batch request to last step end), else the recorded span of its traces (a run without steps). Every step and
    every cost of the run lies inside it, so "longest step" and "what it costs" never exceed it."""
    def go():
        run = store.run(rid)
        walls = metrics.wall_ns(run.steps)
        recorded = store.cached(rid, "info", run.info).get("span_ns")
        return max([*walls.values(), recorded or 0]) or None
    return _cached(store, rid, "run_span", go)


def is_costly(row: dict[str, Any]) -> bool:
    """A finding that costs time (a measured or estimated cost above zero) or is rated above ``info``: what the
    Overview numbers as a root cause. A zero-cost ``info`` finding (a drift trend, not time lost) is a note
    (:func:`workbench.analyses.findings.costs_no_time`)."""
    return not costs_no_time(row.get("cost_ns"), row.get("severity"))


def is_gpu_run(run: Any) -> bool:
    """True when the run recorded device (GPU) kernels."""
    return run.count("kernels") > 0  # from the per-rank counts: no kernel is read


def headline(store: RunStore, rid: str) -> Headline:
    """The run list's line for ``rid`` (cached in the store, kept when the run itself is closed)."""
    def go():
        try:
            run = store.run(rid)
            roots = root_causes(store, rid)
        except Exception as exc:  # noqa: BLE001 - the run list says why
            return Headline(None, None, None, None, 0, False, None, error=f"{type(exc).__name__}: {exc}")
        costly = [r for r in roots.iter_rows(named=True) if is_costly(r)]
        top = costly[0] if costly else None
        return Headline(top["kind"] if top else None, top["cost_ns"] if top else None,
                        top["cost_basis"] if top else None, top["message"] if top else None, len(costly),
                        is_gpu_run(run), run_span_ns(store, rid))
    return store.headline(rid, go)


def runs_by_cost(store: RunStore) -> list[str]:
    """Run ids, the most costly top root cause first; runs not analysed yet (or that failed) after, by name."""
    def key(rid: str):
        h = store.headline_ready(rid)
        cost = h.cost_ns if h is not None and not h.error and h.cost_ns else None
        return (cost is None, -(cost or 0), rid)
    return sorted(store.ids(), key=key)


def most_costly(store: RunStore) -> str | None:
    """The analysed run whose top root cause costs the most (``None`` while none is analysed)."""
    ids = runs_by_cost(store)
    h = store.headline_ready(ids[0]) if ids else None
    return ids[0] if h is not None and h.cost_ns and not h.error else None


# ---------------------------------------------------------------------------------------------- recompiles


def compiles(store: RunStore, rid: str) -> pl.DataFrame:
    """COMPILES rows with ``cause``, ``cause_detail``, ``cause_source`` (:func:`~workbench.analyses.recompiles.classify_compiles`)."""
    return _cached(store, rid, "compiles", lambda: recompiles_analysis.classify_compiles(store.run(rid).compiles))


def divergent(store: RunStore, rid: str) -> pl.DataFrame:
    """Divergent compile ids with the wait each caused on the other ranks (``AnalysisTables.divergent``: the
    findings' numbers)."""
    return table(store, rid, "divergent")


# ---------------------------------------------------------------------------------------- recommendations


def recommendation_findings(store: RunStore, rid: str) -> Any:
    """The findings recommendations answer, exactly as the analyses return them (what ``workbench recommend``
    passes to :func:`~workbench.analyses.recommendations.recommend`): the typed root causes."""
    return list(tables(store, rid).roots)


def ranked_fixes(store: RunStore, rid: str) -> list[recs_analysis.Recommendation]:
    """:func:`workbench.analyses.recommendations.ranked_fixes_run` (typed), as ``workbench recommend``."""
    return _cached(store, rid, "ranked_fixes",
                   lambda: recs_analysis.ranked_fixes_run(store.run(rid), recommendation_findings(store, rid)))


def recommendations(store: RunStore, rid: str) -> pl.DataFrame:
    """The RECOMMENDATIONS view of :func:`ranked_fixes` (what the page's grid shows)."""
    return _cached(store, rid, "recommendations",
                   lambda: recs_analysis.recommendations_frame(ranked_fixes(store, rid)))


def compile_config_toml(store: RunStore, rid: str, header: str | None = None) -> str:
    """The compile-config TOML of the run's applied fixes (:func:`~workbench.analyses.recommendations.to_compile_config`
    of :func:`ranked_fixes`)."""
    return recs_analysis.to_compile_config(ranked_fixes(store, rid), header=header)


#: Pause before each run the background analysis opens after the landing run (the browser's first load comes first).
BACKGROUND_PAUSE_S = 1.0


#: The background analysis of the other runs waits at most this long for the first page to be served.
FIRST_PAGE_WAIT_S = 20.0


def prefetch(store: RunStore, rid: str | None = None, first_page: Any = None,
             warm: Callable[[str], Any] | None = None) -> None:
    """Open and analyse ``rid`` first (and ``warm(rid)``: build its landing page), then — once ``first_page`` (a
    :class:`threading.Event`, set when the first page has been served) is set, or after :data:`FIRST_PAGE_WAIT_S`
    — every other run's headline (call in a background thread)."""
    import time

    order = ([rid] if rid else []) + [r for r in store.ids() if r != rid]
    for r in order:
        if r != rid:
            if first_page is not None and not first_page.is_set():
                first_page.wait(FIRST_PAGE_WAIT_S)  # the first page load gets the CPU (and the GIL) to itself
            time.sleep(BACKGROUND_PAUSE_S)  # leave the CPU to the pages being served between two runs
        try:
            if r == rid:
                store.run(r)  # the landing run counts as used: it stays open
                headline(store, r)
                if warm is not None:
                    warm(r)
                continue
            with store.in_background():
                headline(store, r)
            store.release_if_unused(r)
        except Exception:  # noqa: BLE001 - the page shows it when it is visited
            continue


# ------------------------------------------------------------------------------------------------- compare


def diff_input(store: RunStore, rid: str) -> Any:
    """What the diff reads of a run (:class:`workbench.analyses.diff.RunData`), from the cached :func:`tables`."""
    return _cached(store, rid, "diff_input",
                   lambda: diff_analysis.RunData.from_run(store.run(rid), tables(store, rid), name=rid))


def diff(store: RunStore, before: str, after: str) -> Any:
    """:func:`workbench.analyses.diff.diff_runs` of two runs (a typed ``RunDiff``): what ``workbench diff`` shows."""
    return _cached(store, before, f"diff:{after}",
                   lambda: diff_analysis.diff_runs(diff_input(store, before), diff_input(store, after)))


# ------------------------------------------------------------------------------------- user's line of a compile

#: Frames of these files are torch's (or Python's), not the user's.
_LIBRARY_FRAME = ("/site-packages/", "/dist-packages/", "/torch/", "<frozen", "/lib/python3")


def _user_frame(stack: list[dict], strings: dict[int, str]) -> str | None:
    """The innermost frame of a dynamo_start stack that is the user's code: ``"train.py:86 in main: loss = …"``."""
    for fr in reversed(stack or []):
        f = fr.get("filename")
        path = strings.get(f, str(f)) if isinstance(f, int) else str(f or "")
        if not path or any(p in path for p in _LIBRARY_FRAME):
            continue
        loc = (fr.get("loc") or "").strip()
        where = f"{path.rsplit('/', 1)[-1]}:{fr.get('line')} in {fr.get('name')}"
        return f"{where}: {loc}" if loc else where
    return None


def read_user_frames(log_file: str) -> dict[str, str]:
    """``compile id → user's line`` from the ``dynamo_start`` stacks of one TORCH_TRACE log (only the interned
    file names and the dynamo_start records are parsed)."""
    import orjson

    strings: dict[int, str] = {}
    out: dict[str, str] = {}
    try:
        fh = open(log_file, "rb")  # noqa: SIM115
    except OSError:
        return out
    with fh:
        for line in fh:
            if b'{"str": ' not in line and b'"dynamo_start"' not in line:
                continue
            brace = line.find(b"{")
            try:
                rec = orjson.loads(line[brace:])
            except orjson.JSONDecodeError:
                continue
            if "str" in rec and isinstance(rec["str"], list) and len(rec["str"]) == 2:
                strings[int(rec["str"][1])] = str(rec["str"][0])
            elif "dynamo_start" in rec and rec.get("frame_id") is not None:
                cid = f"{rec['frame_id']}/{rec.get('frame_compile_id', 0)}"
                if rec.get("attempt"):
                    cid += f"_{rec['attempt']}"
                frame = _user_frame((rec.get("dynamo_start") or {}).get("stack") or [], strings)
                if frame and cid not in out:
                    out[cid] = frame
    return out


def user_frames(store: RunStore, rid: str) -> pl.DataFrame:
    """Per compile (``rank``, ``compile_id``): ``user_frame``, the user's line that was being compiled (the innermost
    non-torch frame of the compile's stack in its TORCH_TRACE log), or null where the log has no stack."""
    def go():
        c = store.run(rid).compiles
        schema = {"rank": pl.Int32, "compile_id": pl.String, "user_frame": pl.String}
        if c.is_empty() or "log_file" not in c.columns:
            return pl.DataFrame(schema=schema)
        rows = []
        for (rank, log), part in c.group_by("rank", "log_file"):
            if not log:
                continue
            frames = read_user_frames(str(log))
            rows += [{"rank": rank, "compile_id": cid, "user_frame": frames.get(cid) or frames.get(cid.split("_")[0])}
                     for cid in part["compile_id"].unique().to_list()]
        return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    return _cached(store, rid, "user_frames", go)
