"""The ``workbench`` command line: one Typer app; each command lives in ``workbench/commands/``.

What reaches the terminal when a command fails is one line on stderr, with control characters from the input
escaped (:func:`workbench.errors.printable`), never a traceback or an exception's class name (``--debug`` shows
the traceback):

* bad input (:class:`~workbench.errors.InputError`): ``error: <file>: <what is wrong>``, exit status 1;
* a usage error (click's, or an :class:`~workbench.errors.OptionError`: an option that does not fit the input):
  the usage line, then ``error: <what is wrong>``, exit status 2;
* an optional dependency that is not installed: ``error: workbench <command> needs <module> (the [<extra>]
  extra), which is not installed: pip install -e '.[<extra>]' ...`` (:func:`missing_extra`), exit status 1;
* anything else that escapes a command: ``error: <input>: <stage> failed: <what happened> (...)``, exit status 1
  (the input and stage come from :func:`workbench.errors.stage` in the command).

Start-up stays short (``bench/cli_start.py``): the command modules import polars, rich, the readers and the
analyses inside the commands, not at import, and ``--help`` is click's plain text (no rich).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import typer

from workbench.errors import InputError, OptionError, describe_failure, printable

app = typer.Typer(
    name="workbench",
    help="Collect, analyse and fix multi-rank PyTorch / torch.compile performance.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,     # click's plain help: no rich import at start-up, no markup shown as text
    context_settings={"max_content_width": 120},
)

#: The extra (or package) that installs an optional module a command may need; ``pip install`` it from a checkout
#: of the repository (:func:`missing_extra`).
EXTRAS = {"torch": "[collectors]", "nvtx": "[collectors]", "dash": "[app]",
          "distributed": "[scale]", "dask": "[scale]", "workbench_zoo": "./zoo"}

#: Modules under ``workbench.commands`` whose ``register(app)`` adds commands; missing ones are skipped.
COMMAND_MODULES = ("info", "analyze", "diff", "recommend", "report", "serve", "faults", "export")

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        from workbench import __version__

        print(f"workbench {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
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


def _click_errors() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(usage errors, other click errors) of the click typer uses (its own copy in typer ≥ 0.2x) and of click."""
    usage: list[type] = []
    other: list[type] = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        usage.append(mod.UsageError)
        other.append(mod.ClickException)
    return tuple(usage), tuple(other)


def missing_extra(module: str, command: str = "") -> str:
    """The one line for an optional dependency that is not installed, naming the extra that installs it
    (:data:`EXTRAS`): ``workbench app needs dash (the [app] extra): pip install -e '.[app]' in the checkout``."""
    extra = EXTRAS[module]
    what = f"the {extra} extra" if extra.startswith("[") else f"the package in {extra}"
    install = f"'.{extra}'" if extra.startswith("[") else extra
    who = f"workbench {command}" if command else "workbench"
    return f"{who} needs {module} ({what}), which is not installed: pip install -e {install} in the workbench checkout"


def _error(line: str) -> None:
    print(f"error: {printable(line)}", file=sys.stderr)


def _print_usage_of(command: str) -> None:
    """The usage line of ``workbench <command>`` (of ``workbench`` where there is no such command) on stderr."""
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="workbench")
    sub = group.get_command(ctx, command) if command else None   # type: ignore[attr-defined]
    if sub is not None:
        ctx = sub.context_class(sub, info_name=command, parent=ctx)
    print(printable(ctx.get_usage(), newlines=True), file=sys.stderr)
    print(f"Try '{printable(ctx.command_path)} --help' for help.", file=sys.stderr)


def _debug() -> bool:
    return _state["debug"] or "--debug" in sys.argv[1:]


def main() -> None:
    """Entry point: run the app; every failure is one line on stderr (see the module docstring)."""
    usage_errors, click_errors = _click_errors()
    plain = warnings.formatwarning   # a library's warning may quote an input: escaped like every other line
    warnings.formatwarning = lambda *a, **k: printable(plain(*a, **k), newlines=True)  # type: ignore[assignment]
    try:
        rc = app(standalone_mode=False)
    except OptionError as exc:
        if _debug():
            raise
        _print_usage_of(next((a for a in sys.argv[1:] if not a.startswith("-")), ""))
        _error(str(exc))
        sys.exit(2)
    except InputError as exc:
        if _debug():
            raise
        _error(str(exc))
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _error("aborted")
        sys.exit(1)
    except usage_errors as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:   # `workbench` alone: its help
            print(printable(ctx.get_help(), newlines=True), file=sys.stderr)
            sys.exit(exc.exit_code)
        if ctx is not None:
            print(printable(ctx.get_usage(), newlines=True), file=sys.stderr)
            print(f"Try '{printable(ctx.command_path)} --help' for help.", file=sys.stderr)
        _error(exc.format_message())
        sys.exit(exc.exit_code)
    except click_errors as exc:
        _error(exc.format_message())
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:   # an optional dependency: what installs it, in one line
        if _debug():
            raise
        top = (exc.name or "").split(".")[0]
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        _error(missing_extra(top, command) if top in EXTRAS
               else f"{describe_failure(exc)} (an internal error: run with --debug for the traceback)")
        sys.exit(1)
    except BrokenPipeError:   # `workbench info RUN | head`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except KeyboardInterrupt:
        _error("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, never a class name
        if _debug():
            raise
        _error(f"{describe_failure(exc)} (an internal error: run with --debug for the traceback)")
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
