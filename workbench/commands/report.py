"""``workbench report PATH -o report.html`` (or ``--json``): a batch report built from the app's figure builders."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from workbench.commands.info import JOB_OPT, RANK_OPT
from workbench.commands.output import echo, echo_json, working
from workbench.errors import printable, stage


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        path: Path = typer.Argument(..., metavar="PATH", help="Run directory, Kineto traces and/or TORCH_TRACE logs."),
        after: Path = typer.Argument(None, metavar="AFTER", help="A second run: report the diff PATH → AFTER (workbench diff)."),
        output: Path = typer.Option(None, "-o", "--output", help="Write the HTML (or, with --json, the JSON) here."),
        as_json: bool = typer.Option(False, "--json", help="JSON instead of HTML (stdout unless -o)."),
        rank: int = RANK_OPT,
        job: str = JOB_OPT,
        plotlyjs: str = typer.Option("inline", "--plotlyjs", help="inline: works offline; cdn: smaller file."),
        no_timeline: bool = typer.Option(False, "--no-timeline", help="Leave the timeline figure out."),
        perfetto: bool = typer.Option(False, "--perfetto", help="Also write the run as a Perfetto trace beside the "
                                                                "report (REPORT.pftrace, workbench export) and link "
                                                                "it from the page: 'Download for Perfetto'."),
    ) -> None:
        """Every analysis of one run in one page: findings, timeline, breakdown, drift, recompiles, fixes.
        With two runs (BEFORE AFTER): the diff that workbench diff prints, as a page."""
        from workbench.commands.info import read_run
        from workbench.rundir import write_atomic
        from workbench.report import build_diff_report, build_report, render_html

        if plotlyjs not in ("inline", "cdn"):
            raise typer.BadParameter("--plotlyjs must be inline or cdn")
        quiet = as_json and output is None
        run = read_run(path, rank=rank, on_error="skip", show=not quiet, job=job)
        if after is not None:
            other = read_run(after, rank=None, on_error="skip", show=not quiet)
            with working(f"building the diff report of {path} → {after}", show=not quiet), \
                    stage("building the diff report of", f"{path} → {after}"):
                rep = build_diff_report(run, other)
        else:
            with working(f"building the report of {path}", show=not quiet), stage("building the report of", path):
                rep = build_report(run, timeline=not no_timeline)
        if as_json:
            text = json.dumps(rep.to_json(), default=str, indent=2)
            if output is None:
                echo_json(text)
                return
            write_atomic(output, (text + "\n").encode())
            output.chmod(0o644)
        else:
            out = output or Path("report.html")
            trace = None
            if perfetto and after is None:
                from workbench.export import export_run

                trace = out.with_suffix(".pftrace")
                with working(f"writing {trace}"), stage("exporting for Perfetto", path):
                    export_run(run, trace)
                trace.chmod(0o644)
            with working(f"writing {out}"), stage("writing the report of", path):
                html = render_html(rep, plotlyjs=plotlyjs, perfetto_href=trace.name if trace else None)
            write_atomic(out, html.encode())
            out.chmod(0o644)
            output = out
        echo(f"wrote {printable(output)}" + (f" ({len(rep.problems)} problem(s): see the end of the report)"
                                             if rep.problems else ""))
