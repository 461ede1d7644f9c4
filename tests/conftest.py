"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``tests/data``: the real traces and compile logs the tests read (tests/data/README.md)."""
    return DATA


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
