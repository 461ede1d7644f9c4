"""``workbench diff BEFORE AFTER``: did the change work? (:func:`workbench.analyses.diff.diff_runs`, shown.)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.commands.output import console as safe_console
from workbench.commands.output import echo, echo_json, markup, working
from workbench.errors import printable, stage

if TYPE_CHECKING:
    from rich.console import Console

    from workbench.analyses.diff import RunData, RunDiff

FAIL_ON = ("regression", "none")


def open_side(path: Path, window: str, quiet: bool) -> RunData:
    """Open a run and analyse it into the diff's input."""
    from workbench.analyses.diff import RunData
    from workbench.analyses.summary import analysis_tables
    from workbench.commands.info import open_with_progress

    run = open_with_progress(path, rank=None, skip_bad=True, show=not quiet)
    with working(f"analysing {path}", show=not quiet), stage("analysing", path):
        return RunData.from_run(run, analysis_tables(run, window=window), name=str(path))  # type: ignore[arg-type]


def fmt_value(v: float | None, unit: str) -> str:
    """A metric value as shown: durations (per step where the unit says so) with their unit, counts as numbers."""
    from workbench.format import duration

    if unit == "count" and v is not None:
        return f"{v:g}"
    return duration(v)


def print_diff(d: RunDiff, console: Console | None = None) -> None:
    """The diff as a person reads it: comparability (with each side's read problems), finding verdicts, step time,
    per-step metrics, ops."""
    from rich.table import Table

    from workbench.format import duration, percent

    console = console or safe_console(width=None if sys.stdout.isatty() else 160)
    console.print(f"[bold]workbench diff[/bold] — {markup(d.before)} → {markup(d.after)}", markup=True)
    console.print(d.headline(), style="bold")
    comp = d.comparability
    console.print(f"Comparability: [bold]{comp.level}[/bold]", markup=True)
    if comp.differences:
        t = Table(title_justify="left", show_header=True)
        for col in ("differs", "before", "after", "effect"):
            t.add_column(col, overflow="fold")
        for x in comp.differences:
            t.add_row(x.what, x.before, x.after, x.effect)
        console.print(t)
    for side, problems in (("BEFORE", d.problems_before), ("AFTER", d.problems_after)):
        for p in problems[:10]:
            console.print(f"read problem in {side}: {p}", style="yellow")
        if len(problems) > 10:
            console.print(f"read problems in {side}: {len(problems) - 10} more (--json lists them all)",
                          style="yellow")
    t = Table(title="Findings of BEFORE: verdicts", title_justify="left")
    for col in ("verdict", "kind", "ranks", "steps", "before", "after", "evidence"):
        t.add_column(col, overflow="fold")
    for f in d.findings:
        t.add_row(f.verdict, f.kind, ",".join(map(str, f.ranks)) or "-", ",".join(map(str, f.steps)) or "-",
                  fmt_value(f.before_cost_ns, "ns"), fmt_value(f.after_cost_ns, "ns"),
                  f.evidence + (f" [environment differs: {f.caveat}]" if f.caveat else ""))
    console.print(t if d.findings else "BEFORE has no findings.")
    if d.new_findings:
        n = Table(title="New in AFTER", title_justify="left")
        for col in ("kind", "severity", "ranks", "cost", "message"):
            n.add_column(col, overflow="fold")
        for f in d.new_findings:
            n.add_row(f.kind, f.severity, ",".join(map(str, f.ranks)) or "-", fmt_value(f.cost_ns, "ns"), f.message)
        console.print(n)
    sb, sa, st = d.steps_before, d.steps_after, d.step_time
    console.print(f"Step time (median, {sb.n} {markup(sb.source or '-')} steps before, {sa.n} "
                  f"{markup(sa.source or '-')} after): {fmt_value(sb.median_ns, 'ns')} → "
                  f"{fmt_value(sa.median_ns, 'ns')}: [bold]{st.verdict}[/bold] ({markup(st.reason)})", markup=True)
    m = Table(title="Per step", title_justify="left")
    for col in ("metric", "before", "after", "change", "direction", "basis"):
        m.add_column(col, overflow="fold", justify="right" if col in ("before", "after", "change") else "left")
    for x in d.metrics:
        if x.direction == "n/a":
            continue
        m.add_row(x.name, fmt_value(x.before, x.unit), fmt_value(x.after, x.unit), percent(x.change_pct, signed=True), x.direction,
                  x.basis)
    console.print(m)
    for title, ops in (("Kernels per step (most changed)", d.kernels), ("CPU ops per step (most changed)", d.cpu_ops)):
        if not ops:
            continue
        o = Table(title=title, title_justify="left")
        for col in ("status", "name", "count before", "count after", "time before", "time after", "change"):
            o.add_column(col, overflow="fold")
        for x in ops:
            o.add_row(x.status, x.name, f"{x.before_count:.1f}", f"{x.after_count:.1f}", fmt_value(x.before_ns, "ns"),
                      fmt_value(x.after_ns, "ns"), duration(x.delta_ns, signed=True))
        console.print(o)


def register(app: typer.Typer) -> None:
    """Add ``diff`` to the ``workbench`` command."""

    @app.command("diff")
    def diff_cmd(
        before: Path = typer.Argument(..., metavar="BEFORE", help="The run before the change."),
        after: Path = typer.Argument(..., metavar="AFTER", help="The run after the change."),
        json_out: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
        fail_on: str = typer.Option("none", "--fail-on", help="regression: exit 1 (reason on one line) when "
                                    "step time is slower, a finding is worse, a new high finding appears or the "
                                    "runs are not comparable."),
        window: str = typer.Option("steady", "--window", help="steady: complete ProfilerStep iterations; all."),
    ) -> None:
        """Did the change work? Comparability, a verdict per finding, step time with its uncertainty, per-step
        metrics, and the kernels and CPU ops that changed."""
        from workbench.analyses.window import WINDOWS

        if window not in WINDOWS:
            raise typer.BadParameter(f"--window must be one of {', '.join(WINDOWS)}")
        if fail_on not in FAIL_ON:
            raise typer.BadParameter(f"--fail-on must be one of {', '.join(FAIL_ON)}")
        b, a = open_side(before, window, json_out), open_side(after, window, json_out)
        with working(f"comparing {before} → {after}", show=not json_out), stage("comparing", f"{before} → {after}"):
            from workbench.analyses.diff import diff_runs

            d = diff_runs(b, a)
        if json_out:
            import orjson

            out: dict[str, Any] = d.to_dict()
            echo_json(orjson.dumps(out, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())
        else:
            print_diff(d)
        if fail_on == "regression":
            reasons = d.regressions()
            if reasons:
                echo("regression: " + "; ".join(printable(r) for r in reasons), err=True)
                raise SystemExit(1)  # click returns (does not raise) typer.Exit in non-standalone mode
