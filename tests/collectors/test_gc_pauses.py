"""The collector's garbage-collection pauses (``rank<R>/gc.jsonl``): a full collection over a big heap inside a step
is kept with its times inside that step; the file is read back per rank, a bad line named and the rest kept; a
forked child does not record; ``gc_pauses=False`` writes nothing."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from collector_helpers import read_steps

pytest.importorskip("torch")

from workbench import rundir  # noqa: E402
from workbench.collectors import Collector  # noqa: E402
from workbench.collectors.gc_pauses import MIN_PAUSE_NS, GcPauses  # noqa: E402
from workbench.collectors.options import CollectorOptions  # noqa: E402

#: Objects the full collection walks: at any speed far above MIN_PAUSE_NS (a walk of 2 M containers).
HEAP = 1_000_000


def test_a_full_collection_in_a_step_is_kept_inside_that_step(tmp_path: Path) -> None:
    heap = [[i] for i in range(HEAP)]
    with Collector(tmp_path) as c:
        for step in range(3):
            with c.step():
                if step == 1:
                    gc.collect()
    del heap
    pauses = rundir.gc_pauses(tmp_path)[0]
    full = [(a, b) for a, b, g in pauses if g == 2]
    assert full and all(b - a >= MIN_PAUSE_NS for a, b, _ in pauses)
    steps = {s: (r["start_ns"], r["end_ns"]) for s, r in read_steps(tmp_path / "rank0")[0].items()}
    a1, b1 = steps[1]
    assert any(a1 <= a and b <= b1 for a, b in full), (full, steps)


def test_gc_pauses_off_writes_nothing(tmp_path: Path) -> None:
    with Collector(tmp_path, options=CollectorOptions(gc_pauses=False)) as c, c.step():
        gc.collect()
    assert not (tmp_path / "rank0" / "gc.jsonl").exists()
    assert not [cb for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), GcPauses)]


def test_a_bad_line_is_named_and_the_rest_kept(tmp_path: Path) -> None:
    (tmp_path / "rank3").mkdir()
    (tmp_path / "rank3" / "gc.jsonl").write_bytes(
        b'{"start_ns": 10, "end_ns": 2000010, "generation": 2, "collected": 5}\n'
        b'{"start_ns": "x", "end_ns": 1}\nnot json\n'
        b'{"start_ns": 50, "end_ns": 1050000, "generation": 0}\n')
    (tmp_path / "run.json").write_text("{}")
    problems: list[str] = []
    got = rundir.gc_pauses(tmp_path, problems)
    assert got == {3: [(10, 2000010, 2), (50, 1050000, 0)]}
    assert len(problems) == 1 and "rank3/gc.jsonl" in problems[0] and "2 line(s)" in problems[0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_record(tmp_path: Path) -> None:
    with Collector(tmp_path) as c, c.step():
        pid = os.fork()
        if pid == 0:   # the child: no watcher left (exit code 0), and nothing of the parent's kept to write
            left = [cb for cb in gc.callbacks if isinstance(getattr(cb, "__self__", None), GcPauses)]
            os._exit(0 if not left else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
