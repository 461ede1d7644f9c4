"""Recommendations: fixes for the run's findings with evidence and expected effect, a preview of the
compile-config TOML, and "Apply", which writes that file inside the run directory.

Safety: the only files the app ever writes are ``<run>/compile_config.toml`` (:data:`workbench.rundir.COMPILE_CONFIG_FILE`)
and, on later Applies, ``<run>/compile_config-N.toml`` — new files only, never over an earlier one, never through a
link (a name taken by a link is skipped, with one line saying so), never in a run folder that is gone or whose real
path has left the app's roots; the browser sends the run id only, never a path.
"""

from __future__ import annotations

import os
import shlex
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl
from dash import Input, Output, State, html, no_update

from workbench import rundir
from workbench.app import compute
from workbench.app.components import error_panel, info_panel, safe, section
from workbench.app.store import RunStore, RunUnavailable
from workbench.errors import InputError, TraceError, one_line
from workbench.analyses.findings import costs_no_time, ranks_text
from workbench.format import duration, percent
from workbench.regular_file import read_regular

PATH = "/recommendations"
NAME = "Recommendations"
KEY = "recommendations"


def config_path(store: RunStore, rid: str) -> Path | None:
    """Where the next Apply writes, inside the run directory: ``compile_config.toml``, or the next free
    ``compile_config-N.toml`` when earlier ones are there (Apply never overwrites a config); ``None`` for anything
    but a run directory (a lone trace file, a plain folder of traces), so the app never drops a file among
    someone's traces."""
    entry = store.entry(rid)
    if entry is None or not entry.is_run_dir:
        return None
    return next_config_path(entry.path)


def next_config_path(run_dir: Path) -> Path:
    """``run_dir/compile_config.toml`` if free, else ``compile_config-2.toml``, ``-3``, … (the first free one; a
    name held by a link, even a broken one, is not free)."""
    first = run_dir / rundir.COMPILE_CONFIG_FILE
    if not os.path.lexists(first):
        return first
    stem, suffix = first.stem, first.suffix
    n = 2
    while os.path.lexists(run_dir / f"{stem}-{n}{suffix}"):
        n += 1
    return run_dir / f"{stem}-{n}{suffix}"


def links_passed(run_dir: Path, target: Path) -> list[str]:
    """The config names before ``target`` in the order :func:`next_config_path` tries them that are links (Apply
    never writes through a link): for the one line saying where the config went instead."""
    first = run_dir / rundir.COMPILE_CONFIG_FILE
    names = [first] + [run_dir / f"{first.stem}-{n}{first.suffix}" for n in range(2, 10_000)]
    out = []
    for p in names:
        if p.name == target.name:
            break
        if p.is_symlink():
            out.append(p.name)
    return out


def existing_configs(store: RunStore, rid: str) -> list[Path]:
    """Configs Apply wrote into the run directory before, oldest first."""
    entry = store.entry(rid)
    if entry is None or not entry.is_run_dir or not entry.path.is_dir():
        return []
    stem = Path(rundir.COMPILE_CONFIG_FILE).stem
    found = [p for p in entry.path.glob(f"{stem}*.toml") if not p.is_symlink() and p.is_file()
             and (p.name == rundir.COMPILE_CONFIG_FILE or p.stem.removeprefix(stem + "-").isdigit())]
    return sorted(found, key=lambda p: int(p.stem.rsplit("-", 1)[1]) if "-" in p.stem else 1)


def config_header(path: Path | None) -> str:
    """The comment at the top of the TOML the app writes (the same text in the preview and the file)."""
    where = path if path is not None else rundir.COMPILE_CONFIG_FILE
    return (f"Compile config written by the workbench app (Recommendations → Apply) as {where}: "
            f"apply with Collector(..., compile_config=\"{where}\") or WORKBENCH_COMPILE_CONFIG={where}")


def next_command(run_dir: Path, config: Path) -> tuple[str, str | None]:
    """The exact command that reruns this job with ``config`` (from the argv and world size in its
    ``run.json``; the output folder gets ``-fixed``), and the diff that checks the fix — or a template when the
    run does not say how it was started."""
    try:
        meta = orjson.loads(read_regular(run_dir / rundir.RUN_JSON, 256 << 20, what="run.json").data)
    except (TraceError, orjson.JSONDecodeError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    raw_argv = meta.get("argv")
    argv = [str(a) for a in raw_argv if isinstance(a, (str, int, float))] if isinstance(raw_argv, list) else []
    if not argv:
        return f"WORKBENCH_COMPILE_CONFIG={shlex.quote(str(config))} torchrun ... train.py", None
    out = None
    for i, a in enumerate(argv[:-1]):
        if a in ("--out", "--output", "--run-dir", "-o"):
            out = argv[i + 1] + "-fixed"
            argv[i + 1] = out
    ws = meta.get("world_size")
    nproc = ws if isinstance(ws, int) and not isinstance(ws, bool) and 1 <= ws <= 1_000_000 else 1
    launcher = f"torchrun --nproc-per-node={nproc} " if nproc > 1 else "python "
    cmd = (f"WORKBENCH_COMPILE_CONFIG={shlex.quote(str(config))} {launcher}"
           + " ".join(shlex.quote(a) for a in argv))
    check = f"workbench diff {shlex.quote(str(run_dir))} {shlex.quote(out)}" if out else None
    return cmd, check


def how_to_use(path: Path, run_dir: Path | None = None) -> html.Div:
    cmd, check = next_command(run_dir, path) if run_dir is not None else (None, None)
    return html.Div([
        html.Div("Next: rerun the job with it (the exact command, from this run's run.json):") if cmd else None,
        html.Pre(cmd, className="toml usage-next", id="next-command") if cmd else None,
        html.Div("or from Python:"),
        html.Pre(f'collector = Collector("runs/next", compile_config="{path}")', className="toml usage-collector"),
        html.Pre(f"WORKBENCH_COMPILE_CONFIG={path} torchrun ... train.py", className="toml usage-env"),
        html.Div(["Then check the fix worked: ", html.Code(check or "workbench diff BEFORE AFTER", id="diff-command"),
                  " or the Compare page."], className="muted"),
    ])


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Recommendations", _layout, pctx.store, pctx.run_id)


def _has_settings(toml_text: str) -> bool:
    return any(ln.strip() and not ln.lstrip().startswith("#") for ln in toml_text.splitlines())


def _layout(store: RunStore, rid: str) -> Any:
    recs = compute.recommendations(store, rid)
    target = config_path(store, rid)
    toml_text = compute.compile_config_toml(store, rid, header=config_header(target))
    earlier = existing_configs(store, rid)
    groups, notes = fix_groups(recs, compute.ranked_fixes(store, rid))
    if groups:
        items = [_rec_item(g.best, i, g.alternatives, g) for i, g in enumerate(groups, 1)]
    else:
        items = [html.Div("No recommendations: the analyses found nothing a fix would address.", className="muted",
                          id="no-recommendations")]
    if notes:
        items.append(html.Details([html.Summary(f"For findings that cost no time ({len(notes)}): nothing to fix "
                                                "for speed"), *[_rec_item(g.best, None, [], g) for g in notes]],
                                  id="recs-notes", className="root-notes"))
    apply_part: list[Any] = []
    if not _has_settings(toml_text):
        apply_part.append(html.Div("No configuration change to apply: the fixes above are code changes.",
                                   className="muted", id="apply-none"))
    elif target is None:
        apply_part.append(html.Div("This run is a single trace file or a plain folder of traces, not a run "
                                   "directory: Apply needs a run directory.", className="muted"))
    else:
        apply_part += [
            html.Button("Apply", id="apply-config", n_clicks=0, className="primary"),
            html.Span([" writes ", html.Code(str(target), id="apply-target"),
                       " (a new file: earlier configs are kept)" if earlier else ""], className="muted"),
        ]
    return html.Div([
        section("Fixes, best first", *items, id="recs-section"),
        section("Compile config (TOML)", html.Pre(toml_text or "# nothing to configure", id="toml-preview",
                                                  className="toml"),
                html.A("Download compile_config.toml", href=f"/export/config?run={rid}", id="download-config"),
                *apply_part,
                html.Div(info_panel([html.Div(["Configs already written for this run: ",
                                               *[html.Code(str(p), className="existing-config") for p in earlier]]),
                                     how_to_use(earlier[-1], store.entry(rid).path)])
                         if earlier else None, id="apply-result")),
    ])


@dataclass
class FixGroup:
    """One numbered fix: the best fix of one or more findings of one kind that share it (one per rank, say), with
    the ranks they cover and the time it is expected to save (each finding's measured cost × the share the fix
    removes, ``Fix.gain``, summed)."""

    best: dict[str, Any]
    alternatives: list[dict[str, Any]]
    ranks: list[int]
    saving_ns: int | None
    cost_ns: int | None
    findings: int


def fix_groups(recs: pl.DataFrame, typed: list[Any]) -> tuple[list[FixGroup], list[FixGroup]]:
    """``(groups, notes)``: per finding its best fix (the one the TOML applies, else the best ranked) and the rest
    as alternatives; findings of one kind whose best fix is the same are one group ("for ranks 0, 2, 3"), in the
    order ``workbench recommend`` ranks them. Findings that cost no time and are only ``info`` go to ``notes``."""
    by_finding = {t.finding.id: t.finding for t in typed}
    order: list[str] = []
    best: dict[str, dict] = {}
    others: dict[str, list[dict]] = {}
    for r in recs.sort("rank").iter_rows(named=True):
        key = r["finding_id"]
        if key not in best:
            order.append(key)
            best[key], others[key] = r, []
        elif r.get("apply") and not best[key].get("apply"):
            others[key].insert(0, best[key])
            best[key] = r
        else:
            others[key].append(r)
    groups: dict[tuple, FixGroup] = {}
    notes: list[FixGroup] = []
    for key in order:
        b, f = best[key], by_finding.get(key)
        ranks = sorted(f.ranks) if f is not None else []
        cost = b.get("cost_ns")
        saving = int(round(cost * b["gain"])) if cost and b.get("gain") is not None else None
        g = FixGroup(b, others[key], ranks, saving, cost, 1)
        if costs_no_time(cost, b.get("severity")):   # the Overview's notes: the same rule
            notes.append(g)
            continue
        gk = (b.get("finding_kind"), b.get("fix_id"), b.get("title"))
        if gk not in groups:
            groups[gk] = g
            continue
        have = groups[gk]
        have.ranks = sorted(set(have.ranks) | set(ranks))
        have.saving_ns = (have.saving_ns or 0) + (saving or 0) if have.saving_ns is not None or saving else None
        have.cost_ns = (have.cost_ns or 0) + (cost or 0)
        have.findings += 1
        seen = {a.get("fix_id") for a in have.alternatives}
        have.alternatives += [a for a in others[key] if a.get("fix_id") not in seen]
    return list(groups.values()), notes


def saving_text(g: FixGroup) -> str | None:
    """"saves about 2.63 s (100 % of the 2.63 s its finding costs, measured)"; summed over the ranks it covers."""
    if g.saving_ns is None or not g.cost_ns:
        return None
    share = percent(100.0 * g.saving_ns / g.cost_ns, 0)
    basis = g.best.get("cost_basis") or ""
    of = (f"of the {duration(g.cost_ns)} its finding costs" if g.findings == 1
          else f"of the {duration(g.cost_ns)} its {g.findings} findings cost together")
    return f"about {duration(g.saving_ns)} ({share} {of}{', ' + basis if basis else ''})"


def _rec_item(r: dict[str, Any], n: int | None, alternatives: list[dict[str, Any]] | None = None,
              group: FixGroup | None = None) -> html.Div:
    def row(label: str, value: Any, code: bool = False):
        if value in (None, "", []):
            return None
        return html.Div([html.Strong(label + ": "), html.Code(str(value)) if code else html.Span(str(value))])

    tag = "in the TOML below" if r.get("apply") else ("code change" if r.get("code_advice") and not r.get("config")
                                                      else "alternative")
    effect = r.get("expected_effect")
    if not effect or effect.strip().lower() in ("see the finding", "see finding"):
        effect = f"up to {duration(r.get('cost_ns'))}: the time its finding costs" if r.get("cost_ns") else None
    code = r.get("code_advice")
    if code and code == r.get("evidence"):
        code = None  # the evidence repeated is no advice
    alts = alternatives or []
    ranks = f" for {ranks_text(group.ranks)}" if group is not None and group.ranks else ""
    saving = saving_text(group) if group is not None else None
    return html.Div([
        html.Div([html.Strong(f"{n}. {r.get('title')}" if n is not None else r.get("title"), className="rec-title"),
                  html.Span(ranks, className="rec-ranks"), html.Span(f"  [{tag}]", className="muted")]),
        html.Div([html.Strong("Expected saving: "), html.Span(saving, className="rec-saving",
                                                              **{"data-saving-ns": str(group.saving_ns)})])
        if saving and group is not None else None,
        row("Answers", (r.get("finding_kind") or "").replace("_", " ")) if n is not None else None,
        row("Evidence", r.get("evidence")) if n is not None else None, row("Expected effect", effect),
        row("Config", r.get("config"), True), row("Code", code), row("Where", r.get("location"), True),
        html.Details([html.Summary(f"{len(alts)} other way{'s' if len(alts) != 1 else ''} to fix this"),
                      *[_rec_item(a, None) for a in alts]], className="rec-alternatives") if alts else None,
    ], className="rec rec-item" if n is not None else "rec rec-alt", **({"id": f"rec-{n}"} if n is not None else {}))


class ApplyRefused(ValueError):
    """Apply wrote nothing; ``str()`` is one line saying why."""


def apply(store: RunStore, rid: str) -> tuple[Path, str]:
    """Write the recommended compile config into the run directory, as a new file (never over an earlier one, never
    through a link); returns the path and the text written.

    The text is parsed and validated (:mod:`workbench.compile_config`) before it is written. A run folder that is
    gone is not recreated (:class:`FileNotFoundError`), and one whose real path has left the app's roots is not
    written to (:class:`~workbench.app.store.RunUnavailable`): nothing written.
    """
    from workbench.compile_config import CompileConfig

    entry = store.entry(rid)
    if entry is None or not entry.is_run_dir:
        raise ApplyRefused("this run is not a run directory (a lone trace or a folder of traces); nothing written")
    real = store.real_path(rid)
    if not real.is_dir():
        raise FileNotFoundError(f"the run folder {entry.path} no longer exists; nothing written")
    target = next_config_path(real)
    text = compute.compile_config_toml(store, rid, header=config_header(target))
    CompileConfig.from_dict(tomllib.loads(text), validate="auto", base_dir=real)   # [cache] paths checked in the run
    _write_new(store, rid, real, target.name, text)
    return entry.path / target.name, text


def _write_new(store: RunStore, rid: str, run_dir: Path, name: str, text: str) -> None:
    """Create ``run_dir/name`` holding ``text``: in the folder opened and checked once more (its real path still
    ``run_dir``, inside the roots — a folder swapped for a link is refused), as a new file that is not a link."""
    try:
        dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:   # removed while validating: still never recreate it
        raise FileNotFoundError(f"the run folder {run_dir} no longer exists; nothing written") from None
    except OSError as exc:
        raise ApplyRefused(f"{run_dir}: cannot open the run folder ({exc.strerror or exc}); nothing written") from None
    try:
        opened = os.fstat(dfd)
        now = store.real_path(rid)
        st = os.stat(now)
        if now != run_dir or (st.st_dev, st.st_ino) != (opened.st_dev, opened.st_ino):
            raise ApplyRefused(f"{run_dir}: the run folder changed while the config was prepared; nothing written")
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                         0o644, dir_fd=dfd)
        except FileExistsError:   # a file or link took the name since it was chosen
            raise ApplyRefused(f"{run_dir / name} appeared while the config was prepared; nothing written") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ApplyRefused(f"{run_dir / name}: not a regular file; nothing written")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    finally:
        os.close(dfd)


def _failure(exc: Exception) -> str:
    """One line for the page about why Apply failed (never an exception's class name)."""
    if isinstance(exc, (ApplyRefused, RunUnavailable, InputError, OSError)):
        text = f"{exc.filename}: {exc.strerror}" if isinstance(exc, OSError) and exc.strerror and exc.filename \
            else str(exc)
        return one_line(text or "nothing written")
    return one_line(f"the config could not be written ({exc or 'an internal error'}); nothing written")


def register(app, store: RunStore) -> None:
    @app.callback(Output("apply-result", "children"), Output("apply-target", "children"),
                  Input("apply-config", "n_clicks"), State("url", "search"), prevent_initial_call=True)
    def on_apply(n, search):
        from workbench.app.main import parse_query

        if not n:
            return no_update, no_update
        rid = parse_query(search).get("run") or store.default_id()
        try:
            path, _ = apply(store, rid)
        except Exception as exc:  # noqa: BLE001 - shown, never raised into Dash
            return error_panel("Could not write the compile config", _failure(exc), id="apply-error"), no_update
        nxt = config_path(store, rid)
        links = links_passed(path.parent, path)
        skipped = (html.Div(f"Not written through the link(s) {', '.join(links)} in the run folder: wrote "
                            f"{path.name} instead.", id="apply-link-note", className="muted") if links else None)
        return info_panel([html.Div(["Written: ", html.Code(str(path), id="applied-path")]), skipped,
                           how_to_use(path, store.entry(rid).path)], id="apply-ok"), str(nxt) if nxt else no_update


__all__ = ["apply", "config_path", "layout", "next_command", "register"]
