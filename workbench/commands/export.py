"""``workbench export RUN -o run.pftrace``: every rank in one trace for Perfetto or ``chrome://tracing``."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.commands.info import JOB_OPT, RANK_OPT


def register(app: typer.Typer) -> None:
    """Add ``export`` to the ``workbench`` command."""

    @app.command("export")
    def export_cmd(
        path: Path = typer.Argument(..., metavar="PATH", help="Run directory, folder of Kineto traces, or one trace file."),
        output: Path = typer.Option(..., "-o", "--output", help="Trace to write: .pftrace (Perfetto protobuf) or "
                                    ".json / .json.gz (Chrome JSON)."),
        ranks: str = typer.Option(None, "--ranks", help="Ranks to export, e.g. 0-7 or 0,2,5-9 (default: all)."),
        steps: str = typer.Option(None, "--steps", help="Steps to export, e.g. 5-9 (default: all)."),
        fmt: str = typer.Option(None, "--format", help="perfetto or json (default: from the file name)."),
        no_findings: bool = typer.Option(False, "--no-findings", help="Skip the analyses: recorded activity only."),
        rank: int = RANK_OPT,
        skip_bad: bool = typer.Option(False, "--skip-bad", help="Export the good ranks, list the bad files."),
        job: str = JOB_OPT,
        check: bool = typer.Option(False, "--check", help="Read the written trace back and check it against the "
                                   "run (times, nesting, flows); exit 1 on a problem."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    ) -> None:
        """One trace of every rank on one aligned clock, with the findings drawn on it (docs/export.md)."""
        from workbench.commands.info import open_with_progress
        from workbench.commands.output import echo, working
        from workbench.errors import InputError, printable
        from workbench.export import export_run, format_of
        from workbench.export.model import Selection

        if fmt is not None and fmt not in ("perfetto", "json"):
            raise typer.BadParameter("--format must be perfetto or json")
        try:
            kind, gz = format_of(output) if fmt is None else (fmt, output.name.lower().endswith(".gz"))
        except ValueError as exc:   # a name that says no format: a usage error
            raise typer.BadParameter(str(exc), param_hint="-o") from None
        try:
            selection = Selection.parse(ranks, steps)
        except (ValueError, InputError) as exc:
            raise typer.BadParameter(str(exc)) from None
        run = open_with_progress(path, rank=rank, skip_bad=skip_bad, show=not quiet, job=job)
        with working(f"exporting {path}", show=not quiet) as progress:
            summary = export_run(run, output, fmt=kind, gzip_output=gz,  # type: ignore[arg-type]
                                 selection=selection, findings=not no_findings, progress=progress)
        clock = summary["clock"]
        typer.echo(f"wrote {output} ({summary['file_bytes']:,} bytes, {kind}{' gzip' if gz else ''}): "
                   f"{len(summary['ranks'])} rank(s), {summary['slices']:,} slices on {summary['tracks']:,} "
                   f"tracks, {summary['flows']:,} wait flows, {summary['findings_drawn']} findings drawn; "
                   f"clock {'aligned' if clock['aligned'] else 'as recorded'} ({clock['reason']})")
        if summary["missing_ranks"]:
            typer.echo(f"not in the run: rank(s) {', '.join(map(str, summary['missing_ranks']))}", err=True)
        for p in run.problems:
            echo(f"problem: {printable(p)}", err=True)
        if check:
            from workbench.export.readback import check as check_trace
            from workbench.export.readback import read

            with working(f"checking {output}", show=not quiet):
                problems, counts = check_trace(run, read(output), selection, findings=not no_findings)
            what = ", ".join(f"{n:,} {k}" for k, n in counts.items())
            if problems:
                for p in problems:
                    echo(f"check: {printable(p)}", err=True)
                raise SystemExit(1)
            typer.echo(f"checked against the run: {what}: all at their times, nested, flows joined")
