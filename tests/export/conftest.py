"""Runs every export test reads: each bundled sample kind, and a hang run recorded with the fault zoo."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_traces"


@pytest.fixture(scope="session")
def sample_run():
    """``sample_run(name)``: a bundled sample run, opened once per session."""
    runs: dict[str, workbench.Run] = {}

    def get(name: str) -> workbench.Run:
        if name not in runs:
            runs[name] = workbench.open(SAMPLES / name)
        return runs[name]

    return get


@pytest.fixture(scope="session")
def hang_run(tmp_path_factory) -> Path:
    """``hang_extra_collective`` from the fault zoo: 3 gloo ranks, rank 1 calls one all-reduce too many and the
    job dies (steps, Flight Recorder dumps; no profiler trace)."""
    pytest.importorskip("torch")
    pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")
    from workbench_zoo.runner import run_fault

    out = tmp_path_factory.mktemp("export-hang") / "hang_extra_collective"
    run_fault("hang_extra_collective", out)
    return out
