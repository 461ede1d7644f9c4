"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the checkout; tests that need it skip with a reason when it is absent."""
    if not (SHARED / "traces").is_dir():
        pytest.skip(f"{SHARED} is absent (the real traces live there): skipping")
    return SHARED


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO
