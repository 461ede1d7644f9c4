"""Session-scoped fault recordings: each fault is recorded once (before) and, for config-fixable faults, rerun once
with the config ``workbench recommend`` wrote (after); every test of that fault reads the same runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")


class Zoo:
    """Lazily records faults into one session folder (``loop`` results cached by name)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[str, object] = {}

    def loop(self, name: str):
        from workbench_zoo.verify import loop

        if name not in self._done:
            self._done[name] = loop(name, self.root)
        return self._done[name]


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> Zoo:
    """The session's fault runs; their ranks fork from one process that imported torch once (for the session:
    tests/hangs reuse it)."""
    pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")
    from workbench_zoo._launch import shared_launcher

    with shared_launcher():
        yield Zoo(tmp_path_factory.mktemp("faults"))
