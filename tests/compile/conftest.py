"""Fixtures for the compile tests: ``compile_logs`` is tests/data/compile_logs (the real TORCH_TRACE logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPILE_LOGS = REPO / "tests" / "data" / "compile_logs"


@pytest.fixture(scope="session")
def compile_logs() -> Path:
    return COMPILE_LOGS
