"""``workbench faults list | run NAME --out DIR``: the fault zoo (``workbench/faults/``, ``docs/faults.md``)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    faults_app = typer.Typer(help="The fault zoo: planted-fault runs with their ground truth (docs/faults.md).",
                             no_args_is_help=True)

    @faults_app.command("list")
    def list_cmd(as_json: bool = typer.Option(False, "--json", help="Print the faults as JSON.")) -> None:
        """List the faults: name, device, ranks, how it is fixed, where it is planted."""
        from workbench.faults.__main__ import main

        raise typer.Exit(main(["list"] + (["--json"] if as_json else [])))

    @faults_app.command("run")
    def run_cmd(
        name: str = typer.Argument(..., help="Fault name (workbench faults list)."),
        out: Path = typer.Option(..., "--out", help="Run directory to write (emptied first)."),
        compile_config: Path = typer.Option(None, "--compile-config",
                                            help="Compile config the ranks' collectors apply (a rerun with a fix)."),
        timeout_s: float = typer.Option(None, "--timeout-s", help="Kill the ranks after this many seconds."),
    ) -> None:
        """Record one planted fault into a run directory; its ground_truth.json goes beside run.json."""
        from workbench.faults.__main__ import main

        argv = ["run", name, "--out", str(out)]
        if compile_config is not None:
            argv += ["--compile-config", str(compile_config)]
        if timeout_s is not None:
            argv += ["--timeout-s", str(timeout_s)]
        raise typer.Exit(main(argv))

    app.add_typer(faults_app, name="faults")
