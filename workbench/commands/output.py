"""Everything the command line prints goes through here, so text from inputs (frame, kernel and collective names,
paths, messages quoting them) never reaches the terminal as control characters: an ESC from a trace prints as
``\\x1b`` and cannot clear the screen or set the window title (:func:`workbench.errors.printable`).

* :func:`console` — a rich console whose every string (``print`` arguments, table cells and titles) is escaped
  first, line breaks included: print one line per call. It reads no markup unless a call asks (``markup=True``),
  so a name holding ``[link=...]`` stays text; inside such a call, put input through :func:`markup`.
* :func:`echo` — one plain line (or lines the workbench composed) to stdout or stderr, escaped.
* :func:`echo_json` — JSON text (already escaped by the encoder) with the raw characters JSON allows but a
  terminal acts on written as ``\\uXXXX``.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from workbench.errors import json_printable, printable


class SafeConsole(Console):
    """A rich console that escapes control characters (and line breaks) in every string it renders."""

    def render_str(self, text: str, **kwargs: Any) -> Text:  # noqa: D102 - rich hook
        return super().render_str(printable(text), **kwargs)


def console(*, stderr: bool = False, **kwargs: Any) -> Console:
    """A :class:`SafeConsole` that reads no markup and no emoji codes unless a call asks for markup."""
    return SafeConsole(stderr=stderr, emoji=False, markup=False, **kwargs)


def markup(value: object) -> str:
    """``value`` as text to put inside rich markup: control characters and markup brackets escaped."""
    return escape(printable(value))


def echo(text: object, *, err: bool = False) -> None:
    """Print ``text`` (lines the workbench composed: ``\\n`` kept) with every other control character escaped."""
    typer.echo(printable(text, newlines=True), err=err)


def echo_json(text: str) -> None:
    """Print JSON text as it is, but for the raw characters a terminal acts on (``\\uXXXX`` escapes)."""
    typer.echo(json_printable(text))
