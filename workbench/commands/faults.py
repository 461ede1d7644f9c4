"""``workbench faults list | run NAME --out DIR``: the fault zoo, a package of its own (``zoo/``, ``docs/faults.md``).

The command runs the zoo's own command line (``python -m workbench_zoo``) with the arguments it is given; it is
listed where the zoo is installed, and where it is not it says how to install it.
"""

from __future__ import annotations

import importlib.util
import sys

import typer

#: How to install the zoo (from a checkout of the workbench repository, after the core).
INSTALL = 'pip install -e ./zoo (from a checkout of the workbench repository, after pip install -e ".[collectors]")'


def installed() -> bool:
    """The zoo's package can be imported (found without importing it)."""
    return importlib.util.find_spec("workbench_zoo") is not None


def register(app: typer.Typer) -> None:
    @app.command("faults", hidden=not installed(), add_help_option=False,
                 context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def faults(ctx: typer.Context) -> None:
        """The fault zoo: planted-fault runs with their ground truth (list | run NAME --out DIR; docs/faults.md)."""
        if not installed():
            print(f"error: the fault zoo is not installed: {INSTALL}", file=sys.stderr)
            sys.exit(2)
        from workbench_zoo.__main__ import main

        from workbench.commands.output import working

        args = list(ctx.args)
        # recording a fault takes seconds (its ranks run in processes of their own, logging to files): a progress
        # line meanwhile; `list`, `--help` and usage errors answer at once
        long = len(args) >= 2 and args[0] == "run" and not {"-h", "--help"} & set(args)
        with working(f"recording fault {args[1]}" if long else "", show=long):
            rc = main(args, prog="workbench faults")
        sys.exit(rc)      # its exit status, as argparse's own exits
