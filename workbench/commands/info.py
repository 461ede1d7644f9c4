"""``workbench info PATH`` and ``workbench ingest PATH``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.commands.output import console as safe_console
from workbench.commands.output import echo, echo_json, markup, working
from workbench.errors import InputError, printable, stage

if TYPE_CHECKING:
    from rich.console import Console

    from workbench.run import Run

PATH_ARG = typer.Argument(..., metavar="PATH", help="Run directory, folder of Kineto traces, one trace file, or TORCH_TRACE logs.")
#: ``--job``: the job of a folder holding several (``workbench.jobs``).
JOB_OPT = typer.Option(None, "--job", help="The job to open when the folder holds several (j1, j2, ...: the "
                       "refusal lists them).")
RANK_OPT = typer.Option(None, "--rank", metavar="N",
                        help="The rank of a lone trace file whose events name none (a multi-rank run takes each "
                             "rank from its files: --rank is refused there).")
SKIP_OPT = typer.Option(False, "--skip-bad", help="Load the good ranks and list the bad files instead of stopping.")


def read_run(path: Path, *, rank: int | None, on_error: str, show: bool = True, cluster: str | None = None,
             job: str | None = None) -> Run:
    """``workbench.open`` with a progress line on stderr (a terminal only) for long reads."""
    import workbench

    with working(f"reading {path}", show=show) as update, stage("reading", path):
        return workbench.open(path, rank=rank, on_error=on_error,  # type: ignore[arg-type]
                              progress=lambda what, done, total: update(f"reading {what}", done, total),
                              cluster=cluster, job=job)


def open_with_progress(path: Path, *, rank: int | None, skip_bad: bool, show: bool = True,
                       cluster: str | None = None, job: str | None = None) -> Run:
    """:func:`read_run`; with ``skip_bad``, a run where no rank could be read is one line."""
    run = read_run(path, rank=rank, on_error="skip" if skip_bad else "raise", show=show, cluster=cluster, job=job)
    if skip_bad and run.ranks.height == 0 and run.compiles.height == 0:
        first = run.problems[0] if run.problems else f"{path}: nothing readable"
        more = f" (and {len(run.problems) - 1} more bad file(s))" if len(run.problems) > 1 else ""
        raise InputError(f"no rank could be loaded: {first}{more}")
    return run


def print_info(info: dict[str, Any]) -> None:
    """The human-readable summary."""
    from rich.table import Table

    from workbench.format import duration

    console = safe_console()
    t = Table(title=f"workbench info — {info['path']}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    ranks = info["ranks"]
    t.add_row("ranks", f"{len(ranks)}: {', '.join(map(str, ranks[:32]))}{' …' if len(ranks) > 32 else ''}")
    t.add_row("world size", str(info["world_size"]))
    if info["missing_ranks"]:
        t.add_row("missing ranks", ", ".join(map(str, info["missing_ranks"])))
    t.add_row("backend", ", ".join(info["backend"]) or "-")
    t.add_row("devices", ", ".join(info["devices"]) or "-")
    t.add_row("torch", ", ".join(info["torch_version"]) or "-")
    t.add_row("NCCL", ", ".join(info["nccl_version"]) or "-")
    t.add_row("steps", f"{info['steps']} ({_range(info['step_ids'])})")
    t.add_row("time span", duration(info["span_ns"]) + (f"  clock: {', '.join(info['clock'])}" if info["clock"] else ""))
    t.add_row("events", f"{info['events']:,}  " + "  ".join(f"{k}={v:,}" for k, v in info["events_by_kind"].items()))
    t.add_row("kernels", "  ".join(f"{k}={v:,}" for k, v in info["kernels"].items()))
    t.add_row("collectives", f"{info['collectives']:,}  " + "  ".join(f"{k}={v}" for k, v in info["collectives_by_name"].items()))
    t.add_row("compiles", str(info["compiles"]))
    if info["skipped"]:
        t.add_row("not kept", "  ".join(f"{k}: {v:,}" for k, v in info["skipped"].items()))
    console.print(t)
    print_ranks_last(console, info.get("ranks_last") or [])
    for n in info.get("notes") or []:
        console.print(f"[cyan]note:[/] {markup(n)}", markup=True, highlight=False)
    for p in info["problems"]:
        console.print(f"[yellow]problem:[/] {markup(p)}", markup=True, highlight=False)


def print_ranks_last(console: Console, rows: list[dict[str, Any]]) -> None:
    """Each rank's end state, last step and last collective (from workbench.analyses.rank_end.rank_last_rows)."""
    if not rows or all(r["last_collective"] is None and r["state"] in ("finished", "unknown") for r in rows):
        return
    from rich.table import Table

    t = Table(title="ranks: last step and last collective", title_justify="left")
    for col in ("rank", "state", "last step", "in step", "last collective", "last compile"):
        t.add_column(col)
    for r in rows[:64]:
        t.add_row(str(r["rank"]), r["state"], str(r["last_step"]), str(r["step_reached"]),
                  r["last_collective"] or "-", r["compile"] or "-")
    console.print(t)


def _range(ids: list[int]) -> str:
    if not ids:
        return "none"
    return f"{ids[0]}–{ids[-1]}" if len(ids) > 1 else str(ids[0])


def register(app: typer.Typer) -> None:
    """Add ``info`` and ``ingest`` to the CLI."""

    @app.command()
    def info(
        path: Path = PATH_ARG,
        json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        rank: int | None = RANK_OPT,
        skip_bad: bool = SKIP_OPT,
    ) -> None:
        """Summarise any torch.profiler / torch.compile output: ranks, steps, events, kernels, collectives."""
        run = open_with_progress(path, rank=rank, skip_bad=skip_bad, show=not json)
        with working(f"summarising {path}", show=not json), stage("summarising", path):
            summary = run.info()
            summary.setdefault("notes", run.meta.get("notes", []))
            from workbench.analyses.rank_end import rank_last_rows

            # each rank's last step and collective (docs/hangs.md)
            summary["ranks_last"] = rank_last_rows(run.hangs, run.steps, run.compiles, run.world_size)
        if json:
            import orjson

            echo_json(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
        else:
            print_info(summary)

    @app.command()
    def ingest(path: Path = PATH_ARG, rank: int | None = RANK_OPT, skip_bad: bool = SKIP_OPT,
               cluster: str | None = typer.Option(None, "--cluster", envvar="WORKBENCH_DASK_SCHEDULER",
                                                  help="Dask scheduler address (tcp://host:8786) whose workers "
                                                       "parse the files (needs Dask: the scale extra)."),
               ) -> None:
        """Build the cached tables (parquet under PATH/.workbench/) so later opens are fast."""
        run = open_with_progress(path, rank=rank, skip_bad=skip_bad, cluster=cluster)
        with working(f"building the cached tables of {path}"), stage("building the cached tables of", path):
            echo(f"ingested {len(run.ranks)} rank(s), {run.count('events'):,} events, "
                 f"{run.count('kernels'):,} kernels, {run.collectives.height:,} collectives, "
                 f"{run.compiles.height:,} compiles")
        for p in run.problems:
            echo(f"problem: {printable(p)}", err=True)
