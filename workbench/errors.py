"""Errors for bad input: each names the file and says what is wrong in one line."""

from __future__ import annotations

import re
from pathlib import Path

_LINE_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*")
_MAX_PROBLEM = 500


def one_line(text: str, limit: int = _MAX_PROBLEM) -> str:
    """``text`` on one line: line breaks (any of Unicode's) become " | ", and it is cut at ``limit`` characters."""
    flat = _LINE_BREAKS.sub(" | ", str(text)).strip(" |")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class InputError(Exception):
    """An input the workbench cannot read; ``str()`` is one line meant for a person."""

    def __str__(self) -> str:
        return one_line(super().__str__(), 2000)


class TraceError(InputError):
    """One file is unreadable or malformed."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = one_line(problem)
        super().__init__(f"{one_line(self.path, 2000)}: {self.problem}")
