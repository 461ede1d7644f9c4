"""Helpers for the collector tests: tiny training loops and a reader that prefers ``workbench.open``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def read_steps(rank_dir: Path) -> tuple[dict[int, dict[str, Any]], int]:
    """steps.jsonl merged by step (later keys win) and the number of unreadable lines; lines without a step (a
    ``lost_records`` mark) are left out."""
    from workbench.rundir import read_jsonl

    rows, bad = read_jsonl(rank_dir / "steps.jsonl")
    merged: dict[int, dict[str, Any]] = {}
    for row in rows:
        if "step" in row:
            merged.setdefault(row["step"], {}).update(row)
    return merged, bad


def open_run(path: Path) -> Any:
    """``workbench.open(path)``, or None while it is not written yet."""
    import workbench

    try:
        return workbench.open(path)
    except NotImplementedError:
        return None


def compile_records(rank_dir: Path) -> list[dict[str, Any]]:
    """The JSON heads of the TORCH_TRACE lines in ``rank_dir/compile/*.log``."""
    out = []
    for log in sorted((rank_dir / "compile").glob("*.log")):
        for line in log.read_text().splitlines():
            if line.startswith("V") and "] {" in line:
                out.append(json.loads(line.split("] ", 1)[1]))
    return out


def compile_metrics(rank_dir: Path) -> dict[str, dict[str, Any]]:
    """``compilation_metrics`` records of the compile log by compile id."""
    return {r["compilation_metrics"]["compile_id"]: r["compilation_metrics"]
            for r in compile_records(rank_dir) if "compilation_metrics" in r}


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))
