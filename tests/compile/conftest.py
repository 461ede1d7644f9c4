"""Fixtures for the compile tests: ``shared`` locates ../shared relative to the repo root (skips if absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
COMPILE_LOGS = SHARED / "compile_logs"


@pytest.fixture(scope="session")
def compile_logs() -> Path:
    if not COMPILE_LOGS.is_dir():
        pytest.skip(f"reference logs absent: {COMPILE_LOGS} (../shared is not beside this clone)")
    return COMPILE_LOGS
