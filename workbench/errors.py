"""Errors for bad input: each names the file and says what is wrong in one line; and the text the command line
prints from inputs, with control characters made visible (:func:`printable`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_LINE_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")
_MAX_PROBLEM = 500


def one_line(text: str, limit: int = _MAX_PROBLEM) -> str:
    """``text`` on one line: line breaks (any of Unicode's) become " | ", and it is cut at ``limit`` characters."""
    flat = _LINE_BREAKS.sub(" | ", str(text)).strip(" |")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


#: Characters a terminal may act on: C0 controls (ESC, CR, BEL, backspace, ...), DEL, C1 controls (CSI ``\x9b``,
#: OSC ``\x9d``), and the Unicode marks that reorder or break lines (bidirectional overrides, line separators).
_CONTROL = "\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[{_CONTROL}]")
_CONTROLS_AND_NEWLINE = re.compile(f"[{_CONTROL}\n]")
_NAMED = {"\t": "\\t", "\r": "\\r", "\n": "\\n"}


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: object, *, newlines: bool = False) -> str:
    """``text`` safe to print to a terminal: every control character written as an escape (ESC → ``\\x1b``,
    CR → ``\\r``, U+202E → ``\\u202e``); line breaks too unless ``newlines`` (text the workbench composed of
    several lines)."""
    return (_CONTROLS if newlines else _CONTROLS_AND_NEWLINE).sub(_visible, str(text))


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_printable(text: str) -> str:
    """JSON text safe to print: the characters JSON may hold raw that a terminal acts on (DEL, C1 controls,
    bidirectional marks) written as ``\\uXXXX`` escapes (they only occur inside strings, so the JSON is the same)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class InputError(Exception):
    """An input the workbench cannot read; ``str()`` is one line meant for a person."""

    def __str__(self) -> str:
        return one_line(super().__str__(), 2000)


class OptionError(InputError):
    """An option that does not fit the input it was given (``--rank`` on a run of several ranks): a usage error,
    which the command line answers with the command's usage line and exit status 2."""


class TraceError(InputError):
    """One file is unreadable or malformed."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = one_line(problem)
        super().__init__(f"{one_line(self.path, 2000)}: {self.problem}")


@contextmanager
def stage(what: str, path: str | Path | None = None) -> Iterator[None]:
    """Name the work inside the block (``"reading"``, ``path``) on any unexpected exception that leaves it, for the
    command line's one-line error (:func:`describe_failure`); the innermost stage names it."""
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, InputError) and getattr(exc, "workbench_stage", None) is None:
            try:
                exc.workbench_stage = (what, None if path is None else str(path))  # type: ignore[attr-defined]
            except AttributeError:   # an exception type without attributes: the command line says less
                pass
        raise


_PLAIN_WORDS: dict[type[BaseException], str] = {MemoryError: "out of memory", RecursionError: "nested too deeply"}


def describe_failure(exc: BaseException) -> str:
    """One line for a person about an unexpected exception: where (the input path and stage recorded by
    :func:`stage`) and what, without the exception's class name."""
    what, path = getattr(exc, "workbench_stage", None) or ("running the command", None)
    words = next((w for t, w in _PLAIN_WORDS.items() if isinstance(exc, t)), None)
    if words is None:
        words = (f"missing {exc}" if isinstance(exc, KeyError) else str(exc)) or "an internal error"
    where = f"{path}: " if path else ""
    return one_line(f"{where}{what} failed: {words}", 600)
