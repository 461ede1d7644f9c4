"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import shutil
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


CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def browser():
    """One headless chromium for the whole session (Playwright's sync API allows one at a time); skips when
    chromium or playwright is missing. Never ``playwright install``: it is Debian's ``/usr/bin/chromium``."""
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not found: apt-get install -y chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
