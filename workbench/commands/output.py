"""Everything the command line prints goes through here, so text from inputs (frame, kernel and collective names,
paths, messages quoting them) never reaches the terminal as control characters: an ESC from a trace prints as
``\\x1b`` and cannot clear the screen or set the window title (:func:`workbench.errors.printable`).

* :func:`working` — the progress line (stderr, terminals only) of a step that can take more than a second.
* :func:`console` — a rich console whose every string (``print`` arguments, table cells and titles) is escaped
  first, line breaks included: print one line per call. It reads no markup unless a call asks (``markup=True``),
  so a name holding ``[link=...]`` stays text; inside such a call, put input through :func:`markup`.
* :func:`echo` — one plain line (or lines the workbench composed) to stdout or stderr, escaped.
* :func:`echo_json` — JSON text (already escaped by the encoder) with the raw characters JSON allows but a
  terminal acts on written as ``\\uXXXX``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import typer

from workbench.errors import json_printable, printable

if TYPE_CHECKING:
    from rich.console import Console


@cache
def _safe_console_class() -> type:
    from rich.console import Console

    class SafeConsole(Console):
        """A rich console that escapes control characters (and line breaks) in every string it renders."""

        def render_str(self, text: str, **kwargs: Any) -> Any:  # noqa: D102 - rich hook
            return super().render_str(printable(text), **kwargs)

    return SafeConsole


def console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A rich console that escapes control characters (and line breaks) in every string it renders, and reads
    no markup and no emoji codes unless a call asks for markup."""
    return _safe_console_class()(stderr=stderr, emoji=False, markup=False, **kwargs)


def markup(value: object) -> str:
    """``value`` as text to put inside rich markup: control characters and markup brackets escaped."""
    from rich.markup import escape

    return escape(printable(value))


#: ``update(what, done, total)``: what a :func:`working` line says now and how far it is.
Update = Callable[[str, int, int], None]


@contextmanager
def working(what: str, *, show: bool = True) -> Iterator[Update]:
    """A progress line on stderr while a step that can take more than a second runs: a spinner, ``what`` and the
    time so far, with a bar once ``update(what, done, total)`` says how far it is. Shown only on a terminal (and
    when ``show``); it is gone when the step ends, so the output stays what the command prints."""
    err = console(stderr=True)
    if not show or not err.is_terminal:
        yield lambda *_: None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(markup(what), total=None)

        def update(now: str, done: int, total: int) -> None:
            bar.update(task, description=markup(now), completed=done, total=total)

        yield update


def echo(text: object, *, err: bool = False) -> None:
    """Print ``text`` (lines the workbench composed: ``\\n`` kept) with every other control character escaped."""
    typer.echo(printable(text, newlines=True), err=err)


def echo_json(text: str) -> None:
    """Print JSON text as it is, but for the raw characters a terminal acts on (``\\uXXXX`` escapes)."""
    typer.echo(json_printable(text))
