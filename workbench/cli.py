"""The ``workbench`` command line: one Typer app; each command lives in ``workbench/commands/``."""

from __future__ import annotations

import importlib
import sys

import typer

from workbench.errors import InputError

app = typer.Typer(
    name="workbench",
    help="Collect, analyse and fix multi-rank PyTorch / torch.compile performance.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

#: Modules under ``workbench.commands`` whose ``register(app)`` adds commands; missing ones are skipped.
COMMAND_MODULES = ("info", "analyze", "diff", "recommend", "report", "serve", "faults", "export")

_state = {"debug": False}


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    _state["debug"] = debug


for _name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(f"workbench.commands.{_name}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"workbench.commands.{_name}":
            raise
        continue
    _module.register(app)


def main() -> None:
    """Entry point: run the app; bad input prints one line naming the file, unless ``--debug``."""
    try:
        app(standalone_mode=False)
    except InputError as exc:
        if _state["debug"]:
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if _state["debug"] or "--debug" in sys.argv:
            raise
        print(f"error: {type(exc).__name__}: {exc} (run with --debug for the traceback)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
