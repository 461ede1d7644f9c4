"""Export a run to one trace file for Perfetto (ui.perfetto.dev) or ``chrome://tracing``: every rank, one clock.

* :func:`export_run` writes a run (or some of its ranks and steps) to a file or binary stream: Perfetto's protobuf
  (``.pftrace``) or Chrome JSON (``.json`` / ``.json.gz``), one rank at a time, so memory stays bounded by the
  largest rank (as ``workbench analyze``).
* :func:`export_bytes` returns the same as bytes (what the app's "Download for Perfetto" link serves).
* :func:`workbench.export.model.collective_waits` is who waited for whom, drawn as flows; pass another ``waits``
  frame (schema :data:`workbench.export.model.WAITS`) to draw other edges.
* :mod:`workbench.export.readback` reads a written file back and checks it against the run (docs/export.md).

Example:
    >>> run = workbench.open("sample_traces/h200x2-planted")                  # doctest: +SKIP
    >>> export_run(run, "planted.pftrace", selection=Selection.parse(steps="5-9"))   # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Literal

import polars as pl

from workbench.analyses.findings import findings_to_dicts
from workbench.export.model import (
    WAITS, Clock, Selection, collective_waits, estimate_clock, findings_trace, rank_trace, step_windows,
)

Format = Literal["perfetto", "json"]
ProgressCallback = Callable[[str, int, int], None]

#: Metadata ``format_version`` of what this module writes (bump when tracks or metadata change meaning).
EXPORT_VERSION = 1


def format_of(path: str | os.PathLike[str]) -> tuple[Format, bool]:
    """The format and whether to gzip, from a file name: ``.pftrace`` / ``.perfetto-trace`` / ``.pb``
    (protobuf), ``.json`` (Chrome JSON), each optionally ``.gz``."""
    name = Path(path).name.lower()
    gz = name.endswith(".gz")
    stem = name[:-3] if gz else name
    if stem.endswith((".pftrace", ".perfetto-trace", ".pb", ".perfetto")):
        return "perfetto", gz
    if stem.endswith(".json"):
        return "json", gz
    raise ValueError(f"{path}: cannot tell the format from the name: use .pftrace (Perfetto protobuf) or "
                     ".json / .json.gz (Chrome JSON), or pass --format")


def _base_ns(run: Any, clock: Clock, ranks: list[int], small: dict[str, pl.DataFrame], waits: pl.DataFrame) -> int:
    """An origin at or before every exported time (the Chrome JSON ``ts`` origin), on a whole millisecond."""
    lows: list[int] = []
    firsts = _first_event_times(run, ranks)
    lows += [lo - clock.offset(r) for r, lo in firsts.items()]
    for name, cols in (("steps", ["start"]), ("compiles", ["start"]), ("collectives", ["start", "kernel_start"]),
                       ("fr", ["created_ns", "started_ns"])):
        f = small[name]
        for c in cols:
            g = f.group_by("rank").agg(lo=pl.col(c).min())
            lows += [int(lo) - clock.offset(int(r)) for r, lo in g.iter_rows() if lo is not None]
    g = waits.group_by("rank").agg(lo=pl.col("start").min())
    lows += [int(lo) - clock.offset(int(r)) for r, lo in g.iter_rows() if lo is not None]
    low = min(lows) if lows else 0
    return low - low % 1_000_000


def _first_event_times(run: Any, ranks: list[int]) -> dict[int, int]:
    """Each rank's first event start: from the per-file counts taken at ingestion (as ``run.info()``), else read
    from that rank's events alone."""
    out: dict[int, int] = {}
    parts = getattr(getattr(run, "_big", None), "parts", None) or []
    wanted = set(ranks)
    if parts and not run.loaded("events"):
        for p in parts:
            lo = (p.stats or {}).get("start")
            if p.rank in wanted and lo is not None:
                out[p.rank] = min(int(lo), out.get(p.rank, int(lo)))
        return out
    for r in ranks:
        lo = run.scan("events", ranks=[r]).select(pl.col("start").min()).collect().item()
        if lo is not None:
            out[r] = int(lo)
    return out


def _thread_names(run: Any) -> dict[int, dict[str, str]]:
    """Kineto thread names per rank (kept in each trace file's meta at ingestion)."""
    out: dict[int, dict[str, str]] = {}
    for p in getattr(getattr(run, "_big", None), "parts", None) or []:
        out.setdefault(int(p.rank), {}).update({str(k): str(v) for k, v in (p.meta.get("thread_names") or {}).items()})
    return out


def _by_rank(frame: pl.DataFrame) -> dict[int, pl.DataFrame]:
    if frame.is_empty():
        return {}
    return {int(k[0]): v for k, v in frame.partition_by("rank", as_dict=True).items()}


def analyse(run: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """The run's root findings (symptoms under them) and its ranked fixes, as ``workbench analyze`` and
    ``workbench recommend`` give them."""
    from workbench.analyses.recommendations import ranked_fixes_run, recommendations_frame
    from workbench.analyses.summary import analysis_tables

    roots = list(analysis_tables(run).roots)
    return roots, recommendations_frame(ranked_fixes_run(run, roots)).to_dicts()


def export_run(run: Any, dest: str | os.PathLike[str] | BinaryIO, *, fmt: Format | None = None,
               gzip_output: bool | None = None, selection: Selection | None = None, findings: bool = True,
               waits: pl.DataFrame | None = None, progress: ProgressCallback | None = None) -> dict[str, Any]:
    """Write ``run`` (a :class:`workbench.Run`) as one trace; return what was written (counts, clock, path).

    ``dest``: a path (written to a temporary file beside it, then renamed) or a binary stream. ``fmt`` and
    ``gzip_output`` default from the path's name (:func:`format_of`). ``selection``: ranks and steps to export.
    ``findings``: run the analyses and draw their findings (else only the recorded activity). ``waits``: who waited
    for whom (schema ``WAITS``), default :func:`collective_waits`. ``progress(stage, done, total)`` is called as
    ranks are written.
    """
    sel = selection or Selection()
    if fmt is None:
        if not isinstance(dest, (str, os.PathLike)):
            raise ValueError("fmt is needed when writing to a stream")
        fmt, gz = format_of(dest)
        gzip_output = gz if gzip_output is None else gzip_output
    if isinstance(dest, (str, os.PathLike)):
        path = Path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as fh:
                summary = _write(run, fh, fmt, bool(gzip_output), sel, findings, waits, progress)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        summary["path"] = str(path)
        summary["file_bytes"] = path.stat().st_size
        return summary
    return _write(run, dest, fmt, bool(gzip_output), sel, findings, waits, progress)


def export_bytes(run: Any, *, fmt: Format = "perfetto", gzip_output: bool = False, ranks: str | None = None,
                 steps: str | None = None, findings: bool = True) -> bytes:
    """The export of ``run``'s ``ranks`` and ``steps`` (``"0-7"``, ``"5-9"``; None: all) as bytes: what a
    "Download for Perfetto" link serves (``dcc.send_bytes``)."""
    buf = io.BytesIO()
    export_run(run, buf, fmt=fmt, gzip_output=gzip_output, selection=Selection.parse(ranks, steps),
               findings=findings)
    return buf.getvalue()


def _write(run: Any, raw: BinaryIO, fmt: Format, gz: bool, sel: Selection, with_findings: bool,
           waits: pl.DataFrame | None, progress: ProgressCallback | None) -> dict[str, Any]:

    tick = progress or (lambda stage, done, total: None)
    all_ranks = sorted(int(r) for r in run.ranks.get_column("rank").to_list())
    ranks = [r for r in all_ranks if sel.rank_ok(r)]
    clock = estimate_clock(run.collectives, run.ranks)
    windows = step_windows(run.steps, sel)
    roots: list[Any] = []
    fixes: list[dict[str, Any]] = []
    if with_findings:
        tick("analysing", 0, 1)
        roots, fixes = analyse(run)
        tick("analysing", 1, 1)
    w = collective_waits(run.collectives, run.ranks) if waits is None else waits.cast(WAITS)  # type: ignore[arg-type]
    n_waits_all = w.height
    w = sel.filter(w.filter(pl.col("on_rank").is_in(ranks)), windows)
    w = w.sort("rank", "start", "on_rank", "on_start").with_row_index("flow", offset=1).with_columns(
        pl.col("flow").cast(pl.UInt64))
    targets = w.group_by("on_rank", "on_start", "on_end").agg(
        pl.col("what").first(), flows=pl.col("flow").sort()).sort("on_rank", "on_start")
    fr = run.hangs.entries
    small = {
        "steps": sel.filter(run.steps, windows),
        "compiles": sel.filter(run.compiles, windows),
        "collectives": sel.filter(run.collectives, windows, start="start", end="end"),
        "fr": sel.filter(fr, windows, start="created_ns", end="completed_ns", step=None),
    }
    info = {int(r["rank"]): r for r in run.ranks.iter_rows(named=True)}
    threads = _thread_names(run)
    out = gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) if gz else raw
    writer: Any
    if fmt == "perfetto":
        from workbench.export.perfetto import PerfettoWriter

        writer = PerfettoWriter(out)  # type: ignore[arg-type]
    elif fmt == "json":
        from workbench.export.chrome import ChromeWriter

        writer = ChromeWriter(out, _base_ns(run, clock, ranks, small, w), run.name)  # type: ignore[arg-type]
    else:
        raise ValueError(f"unknown format {fmt!r}: perfetto or json")
    parts = {k: _by_rank(v) for k, v in small.items()}
    by_waiter = _by_rank(w.select("rank", "start", "end", "on_rank", "what", "flow"))
    by_target = _by_rank(targets.rename({"on_rank": "rank"}))
    slices = tracks = 0
    for done, r in enumerate(ranks, 1):
        events = sel.filter(run.scan("events", ranks=[r]).collect(), windows)
        rt = rank_trace(r, info[r], clock, events, {k: v[r] for k, v in parts.items() if r in v},
                        by_waiter.get(r, w.clear().select("rank", "start", "end", "on_rank", "what", "flow")),
                        by_target[r].select("on_start", "on_end", "what", "flows") if r in by_target
                        else pl.DataFrame(schema={"on_start": pl.Int64, "on_end": pl.Int64, "what": pl.String,
                                                  "flows": pl.List(pl.UInt64)}),
                        threads.get(r, {}))
        del events
        writer.rank(rt)
        slices += len(rt)
        tracks += len(rt.tracks)
        del rt
        tick("writing ranks", done, len(ranks))
    ft = findings_trace(roots, run.steps, clock, sel)
    if with_findings:
        writer.findings(ft)
    summary = {
        "format": fmt, "gzip": gz, "format_version": EXPORT_VERSION, "run": str(run.path),
        "selection": sel.describe(), "ranks": ranks,
        "missing_ranks": [r for r in (sel.ranks or []) if r not in all_ranks],
        "clock": clock.describe(),
        "slices": slices, "tracks": tracks, "flows": w.height,
        "flows_note": ("each wait linked to what it waited for: collective waits (own arrival → the last rank's "
                       "arrival, analyses.collectives.match_collectives); waits whose other rank is not exported "
                       f"are left out ({n_waits_all - w.height} of {n_waits_all})"),
        "findings_drawn": len(ft.names), "findings_undrawn": ft.undrawn,
    }
    metadata = dict(summary, findings=findings_to_dicts(roots), fixes=fixes, problems=list(run.problems))
    writer.close(metadata)
    if out is not raw:
        out.close()
    summary["bytes"] = writer.bytes
    return summary


__all__ = ["EXPORT_VERSION", "Selection", "analyse", "collective_waits", "export_bytes", "export_run", "format_of"]
