"""``workbench analyze PATH`` (``workbench diff`` lives in ``diff.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.commands.info import JOB_OPT, RANK_OPT
from workbench.commands.output import console as safe_console
from workbench.commands.output import echo, echo_json, working
from workbench.errors import printable, stage

if TYPE_CHECKING:
    from rich.console import Console

WINDOW_OPT = typer.Option("steady", "--window", help="steady: complete ProfilerStep iterations (as HTA); all: everything.")


def _open(path: Path, rank: int | None, skip_bad: bool, quiet: bool, job: str | None = None) -> Any:
    from workbench.commands.info import open_with_progress

    return open_with_progress(path, rank=rank, skip_bad=skip_bad, show=not quiet, job=job)


def _cost(c: dict[str, Any]) -> str:
    """A finding's cost as printed (a symptom's is already within its root cause's: ``findings.within_root``); a
    zero cost reads :data:`~workbench.format.NO_TIME_COST` with its reason."""
    from workbench.format import NO_TIME_COST, duration

    if c.get("ns") is None:
        return f"unknown ({c['basis']}: {c['method']})"
    if c["ns"] == 0:
        return f"{NO_TIME_COST} ({c['method']})"
    return f"{duration(c['ns'])} {c['basis']} ({c['method']})"


def print_summary(summary: dict[str, Any], path: Path) -> None:
    """Human-readable :func:`workbench.analyses.summary.analyze` output: the per-rank table, then the root causes,
    most costly first, each with its symptoms indented under it and every cost labelled measured/estimated."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from workbench.format import duration, percent

    console = safe_console(width=max(Console().width, 110))
    t = Table(title=f"workbench analyze — {path} (window: {summary['window']})", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("rank", "step", "data wait", "compute", "idle", "overlap", "exposed", "coll wait", "recomp"):
        t.add_column(col, justify="right", no_wrap=True)
    for rank, e in summary["ranks"].items():
        t.add_row(rank, duration(e.get("step_time_ns")), duration(e.get("data_wait_median_ns")),
                  percent(e["compute_pct"]), percent(e["idle_pct"]), percent(e["comm_compute_overlap_pct"]),
                  percent(e["exposed_comm_pct"]), duration(e.get("collective_wait_ns")), str(e.get("recompiles", 0)))
    console.print(t)
    console.print("step: median step time (duration + data wait); data wait: median per step; overlap: "
                  "communication under compute; exposed: communication alone, % of the device window.",
                  highlight=False, style="dim")
    findings = summary["findings"]
    if not findings:
        console.print("No findings.")
        return
    from workbench.analyses.findings import costs_no_time

    notes = [x for x in findings if costs_no_time(x["cost_ns"], x["severity"])]
    roots = [x for x in findings if not costs_no_time(x["cost_ns"], x["severity"])]
    console.print("")
    if roots:
        console.print("Root causes (most costly first), symptoms under them:", style="bold")
    for n, x in enumerate(roots, 1):
        _print_finding(console, x, f"{n}. ", "   ")
    if notes:   # as the app: a zero-cost info finding is a note, not a numbered root cause
        console.print("Also noticed, costing no time:", style="bold")
    for x in notes:
        _print_finding(console, x, "-  ", "   ")


def _print_finding(console: Console, x: dict[str, Any], head: str, indent: str) -> None:
    where = []
    if x["ranks"]:
        where.append(f"rank {','.join(map(str, x['ranks']))}")
    if x["steps"]:
        where.append(f"step {','.join(map(str, x['steps']))}")
    cost = _cost(x["cost"])
    console.print(f"{head}[{x['severity']}] {x['kind']} ({'; '.join(where) or 'run'}) — {cost}",
                  highlight=False, style="bold" if not head.startswith(" ") else None)
    console.print(f"{indent}{x['message']}", highlight=False)
    for s in x.get("symptoms", []):
        _print_finding(console, s, f"{indent}└ ", indent + "  ")


FAIL_ON = ("none", "high", "medium", "low")


def failing(summary: dict[str, Any], level: str) -> list[dict[str, Any]]:
    """Root findings at or above severity ``level`` (``none``: nothing fails)."""
    from workbench.analyses.findings import SEVERITIES

    if level == "none":
        return []
    limit = SEVERITIES.index(level)
    return [f for f in summary["findings"] if SEVERITIES.index(f["severity"]) <= limit]


def register(app: typer.Typer) -> None:
    """Add ``analyze`` to the ``workbench`` command."""

    @app.command("analyze")
    def analyze_cmd(
        path: Path = typer.Argument(..., metavar="PATH", help="Run directory, folder of Kineto traces, or one trace file."),
        json_out: bool = typer.Option(False, "--json", help="Print the summary (findings as a tree) as JSON."),
        window: str = WINDOW_OPT,
        rank: int = RANK_OPT,
        skip_bad: bool = typer.Option(False, "--skip-bad", help="Analyse the good ranks, list the bad files."),
        job: str = JOB_OPT,
        fail_on: str = typer.Option("none", "--fail-on", help="high|medium|low: exit 1 (the reason on one line) "
                                    "when a root cause is at least that severe (for CI)."),
    ) -> None:
        """Per-rank time breakdown, then root causes most costly first with their symptoms under them."""
        from workbench.analyses.window import WINDOWS

        if window not in WINDOWS:
            raise typer.BadParameter(f"--window must be one of {', '.join(WINDOWS)}")
        if fail_on not in FAIL_ON:
            raise typer.BadParameter(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        run = _open(path, rank, skip_bad, json_out, job)
        with working(f"analysing {path}", show=not json_out), stage("analysing", path):
            from workbench.analyses.summary import analyze

            summary = analyze(run, window=window)  # type: ignore[arg-type]
        summary["path"] = str(path)
        if getattr(run, "problems", None):
            summary["problems"] = list(run.problems)
        if json_out:
            import orjson

            echo_json(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
        else:
            print_summary(summary, path)
            for p in summary.get("problems", []):
                echo(f"problem: {printable(p)}", err=True)
        bad = failing(summary, fail_on)
        if bad:
            top = bad[0]
            echo(f"workbench analyze: {len(bad)} root cause(s) at or above {fail_on}; first: {top['id']} "
                 f"[{top['severity']}] {_cost(top['cost'])}: {printable(top['message'])}", err=True)
            raise SystemExit(1)  # click returns (does not raise) typer.Exit in non-standalone mode
