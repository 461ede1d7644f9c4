"""The planted hang faults, recorded once per session (real gloo runs, 2–3 ranks, all at once to save wall time)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HANG_FAULTS = ("hang_extra_collective", "hang_size_mismatch", "hang_recompile_timeout", "hang_rank_killed",
               "hang_compiled_collective")


class HangRuns:
    """Run directory and ground truth of each hang fault."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.truth: dict[str, dict] = {}

    def record(self) -> None:
        from workbench_zoo.runner import run_fault

        def one(name: str) -> None:
            run_fault(name, self.root / name)
            self.truth[name] = json.loads((self.root / name / "ground_truth.json").read_text())

        with ThreadPoolExecutor(len(HANG_FAULTS)) as pool:
            list(pool.map(one, HANG_FAULTS))

    def path(self, name: str) -> Path:
        return self.root / name


@pytest.fixture(scope="session")
def hang_runs(tmp_path_factory) -> HangRuns:
    pytest.importorskip("torch")
    pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")
    from workbench_zoo._launch import shared_launcher

    runs = HangRuns(tmp_path_factory.mktemp("hangs"))
    with shared_launcher():              # the ranks fork from one process that imported torch once
        runs.record()
    return runs
