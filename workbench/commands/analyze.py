"""``workbench analyze PATH`` (``workbench diff`` lives in ``diff.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from workbench.analyses.summary import analyze
from workbench.analyses.window import WINDOWS

WINDOW_OPT = typer.Option("steady", "--window", help="steady: complete ProfilerStep iterations (as HTA); all: everything.")


def _open(path: Path, rank: int | None, skip_bad: bool, quiet: bool) -> Any:
    from workbench.commands.info import open_with_progress

    return open_with_progress(path, rank=rank, skip_bad=skip_bad, show=not quiet)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}%"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v / 1e6:.2f} ms"


def print_summary(summary: dict[str, Any], path: Path) -> None:
    """Human-readable table of :func:`workbench.analyses.summary.analyze` output."""
    console = Console()
    t = Table(title=f"workbench analyze — {path} (window: {summary['window']})", title_justify="left")
    for col in ("rank", "step time", "compute", "idle", "comm overlap", "exposed comm", "collective wait"):
        t.add_column(col, justify="right")
    for rank, e in summary["ranks"].items():
        t.add_row(rank, _ms(e.get("step_time_ns")), _pct(e["compute_pct"]), _pct(e["idle_pct"]),
                  _pct(e["comm_compute_overlap_pct"]), _pct(e["exposed_comm_pct"]), _ms(e.get("collective_wait_ns")))
    console.print(t)
    findings = summary["findings"]
    if not findings:
        console.print("No findings.")
        return
    f = Table(title="Findings (most costly first)", title_justify="left")
    for col in ("severity", "kind", "ranks", "cost", "message"):
        f.add_column(col, overflow="fold")
    for x in findings:
        f.add_row(x["severity"], x["kind"], ",".join(map(str, x["ranks"])) or "-", _ms(x["cost_ns"]), x["message"])
    console.print(f)


def register(app: typer.Typer) -> None:
    """Add ``analyze`` to the ``workbench`` command."""

    @app.command("analyze")
    def analyze_cmd(
        path: Path = typer.Argument(..., help="Run directory, folder of Kineto traces, or one trace file."),
        json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
        window: str = WINDOW_OPT,
        rank: int = typer.Option(None, "--rank", help="Rank of a lone trace file that names none."),
        skip_bad: bool = typer.Option(False, "--skip-bad", help="Analyse the good ranks, list the bad files."),
    ) -> None:
        """Time breakdown, overlap, idle causes, collectives, stragglers and findings per rank."""
        if window not in WINDOWS:
            raise typer.BadParameter(f"--window must be one of {', '.join(WINDOWS)}")
        run = _open(path, rank, skip_bad, json_out)
        summary = analyze(run, window=window)  # type: ignore[arg-type]
        summary["path"] = str(path)
        if getattr(run, "problems", None):
            summary["problems"] = list(run.problems)
        if json_out:
            typer.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
        else:
            print_summary(summary, path)
