"""Errors for bad input: each names the file and says what is wrong in one line."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """An input the workbench cannot read; ``str()`` is one line meant for a person."""


class TraceError(InputError):
    """One file is unreadable or malformed."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
