"""steps.jsonl from a ring in shared memory and a writer process: what is on disk when (a kill included), what a
failure does, and the collector's rows."""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collector_helpers import ROOT, read_steps

from workbench.collectors import step_log, step_writer
from workbench.collectors.step_log import StepLog


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for(predicate, timeout_s: float = 120.0) -> bool:
    """True once ``predicate()`` is; False only after ``timeout_s`` (a bound for a hung writer, far above the
    time a busy machine takes, never a measurement)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def steps_in(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in lines_of(path) if "start_ns" in line]


def _written_out(path: Path, n: int) -> tuple[StepLog, list[BaseException]]:
    """A StepLog with records 0..n-1 (step i at i ns) that its writer process has written out and marked so, and
    the list its errors go to."""
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    for i in range(n):
        log.record(i, i, i, i, 0)
    assert wait_for(lambda: log._words[step_writer.READ] == n)
    return log, errors


@pytest.fixture
def fast_poll(monkeypatch):
    """The writer process reads the ring every 50 ms, not POLL_S: the tests that wait for it wait less."""
    monkeypatch.setattr(step_log, "POLL_S", 0.05)


def test_the_writer_process_writes_the_records_while_the_run_goes_on(tmp_path, fast_poll):
    path = tmp_path / "steps.jsonl"
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    assert log.mode == "process" and log._pid not in (None, os.getpid())
    pid = log._pid
    for i in range(5):
        log.record(i, 10 * i, 10 * i + 5, 10 * i + 6, step_writer.PROFILED if i == 2 else 0)
    log.record(2, 777, 0, 0, step_writer.DEVICE)
    assert wait_for(lambda: len(lines_of(path)) == 6)          # no close needed: written within two polls
    rows = [json.loads(line) for line in lines_of(path)]
    assert rows[0] == {"step": 0, "start_ns": 0, "end_ns": 5, "profiled": False}
    assert rows[1] == {"step": 1, "start_ns": 10, "end_ns": 15, "data_wait_ns": 4, "profiled": False}
    assert rows[2]["profiled"] is True and rows[5] == {"step": 2, "device_ns": 777}
    log.record(5, 50, 55, 56, step_writer.INTERRUPTED)
    log.close()
    assert json.loads(lines_of(path)[-1])["interrupted"] is True
    assert errors == [] and log._pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)                                          # reaped, no zombie
    assert not list(Path("/dev/shm").glob("wb-steps-*")) and not (tmp_path / "steps.jsonl.writer-err").exists()


KILLED = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[2])
    from workbench.collectors.step_log import StepLog
    log = StepLog(sys.argv[1], on_error=print)
    for i in range(1000):
        log.record(i, i, i + 1, i + 1, 0)
    os.kill(os.getpid(), signal.SIGKILL)               # no close, no atexit, no flush
""")


def test_a_killed_process_leaves_every_record_it_made(tmp_path):
    path = tmp_path / "steps.jsonl"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(path), str(ROOT)], timeout=600)
    assert proc.returncode == -signal.SIGKILL
    assert wait_for(lambda: len(steps_in(path)) == 1000)
    assert steps_in(path) == list(range(1000))
    assert wait_for(lambda: not list(Path("/dev/shm").glob("wb-steps-*")))   # nothing left in shared memory


def test_without_a_writer_process_the_lines_are_written_inline_and_it_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    path = tmp_path / "steps.jsonl"
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    assert log.mode == "inline" and len(errors) == 1 and "no step writer process" in str(errors[0])
    log.record(0, 1, 2, 3, 0)
    assert steps_in(path) == [0]                       # written at once, on this thread
    log.close()


def test_a_writer_that_dies_is_replaced_by_inline_writing_and_nothing_is_lost(tmp_path, monkeypatch, fast_poll):
    monkeypatch.setattr(step_log, "CHECK_EVERY", 8)
    path = tmp_path / "steps.jsonl"
    log, errors = _written_out(path, 4)    # on disk and marked so (a kill in between would repeat them, as it should)
    os.kill(log._pid, signal.SIGKILL)
    time.sleep(0.2)
    for i in range(4, 20):
        log.record(i, i, i, i, 0)
    log.close()
    assert log.mode == "inline" and len(errors) == 1 and "ended early" in str(errors[0])
    assert steps_in(path) == list(range(20))                   # marked written only once on disk: no repeats


def test_a_writer_that_cannot_start_is_noticed_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(step_writer, "__file__", str(tmp_path / "missing_writer.py"))
    errors: list[BaseException] = []
    log = StepLog(tmp_path / "steps.jsonl", on_error=errors.append)
    assert log.mode == "inline" and "did not start" in str(errors[0])
    log.record(0, 1, 2, 3, 0)
    log.close()
    assert steps_in(tmp_path / "steps.jsonl") == [0]


def test_a_forked_child_neither_records_nor_holds_the_writer_open(tmp_path):
    """A DataLoader worker forked from the rank inherits the collector: it must not write steps, and the rank's
    close must not wait for the child to exit."""
    path = tmp_path / "steps.jsonl"
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    log.record(0, 0, 1, 1, 0)
    child = os.fork()
    if child == 0:                                          # the "worker": records nothing, lives until killed
        log.record(99, 0, 0, 0, 0)
        time.sleep(600)
        os._exit(0)

    def waited(*_):
        raise AssertionError("close() waited for the forked child")

    old = signal.signal(signal.SIGALRM, waited)
    signal.alarm(300)                                       # a close that waits for the child fails, never hangs
    try:
        log.close()
        signal.alarm(0)
        # close returned while the child still lives: it did not wait for it (no clock involved)
        assert os.waitpid(child, os.WNOHANG) == (0, 0)
        assert errors == [] and log.mode == "process"
        assert steps_in(path) == [0]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_close_from_a_signal_handler_inside_record_does_not_raise_or_hang(tmp_path):
    """SIGTERM arrives while record() runs (the collector's handler closes): nothing escapes into training."""
    errors: list[BaseException] = []
    log = StepLog(tmp_path / "steps.jsonl", on_error=errors.append)
    capacity = log._capacity

    class ClosingCapacity:
        """The ring's capacity, read by record() between taking the ring and storing the record into it."""

        def __rmod__(self, n: int) -> int:
            log.close()                                    # what the SIGTERM handler does, between two lines
            return n % capacity

    log._capacity = ClosingCapacity()
    log.record(0, 0, 1, 1, 0)                              # must not raise
    log.record(1, 2, 3, 3, 0)                              # after close: written inline or dropped, no raise
    assert errors and all(isinstance(e, Exception) for e in errors)


def test_a_write_error_is_reported_with_its_cause(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.symlink_to("/dev/full")
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    for i in range(10):
        log.record(i, i, i, i, 0)
    log.close()
    assert errors and "No space left" in str(errors[0])


def _ring(capacity: int, written: int) -> mmap.mmap:
    """A ring of ``capacity`` records after ``written`` records of steps 0, 1, ... (none written out yet)."""
    ring = mmap.mmap(-1, step_writer.HEADER.size + capacity * step_writer.RECORD.size)
    step_writer.HEADER.pack_into(ring, 0, step_writer.MAGIC, 0, 0, capacity, step_writer.NO_STEP, 0)
    _put(ring, range(written))
    return ring


def _put(ring: mmap.mmap, steps: range) -> None:
    words = step_writer.words(ring)
    for i in steps:
        step_writer.RECORD.pack_into(ring, step_writer.HEADER.size + (i % words[3]) * step_writer.RECORD.size,
                                     i, i, i, i, 0)
        words[step_writer.WRITTEN] = i + 1
    words.release()


def test_records_that_wrapped_the_ring_before_they_were_read_are_said_lost_not_garbled():
    ring = _ring(8, 20)
    reader = step_writer.RingReader(ring)
    data, count = reader.take(20)
    lines = [json.loads(x) for x in data.splitlines()]
    # 12..19 are in the ring, but record 20 (which would be in progress now) takes 12's slot: 13 lost.
    assert lines[0] == {"lost_records": 13} and count == 20          # no step written out before the gap
    assert [x["step"] for x in lines[1:]] == list(range(13, 20))
    assert "data_wait_ns" not in lines[1]                            # no wait across a gap
    assert reader.read() == 0                                        # marked only once written out
    reader.mark(count)
    assert reader.read() == 20 and step_writer.RingReader(ring).last_step == 19   # the next reader knows it
    _put(ring, range(20, 30))       # counted 24 at the previous poll; meanwhile the loop went on to record 30
    data, count = step_writer.RingReader(ring).take(24)
    lines = [json.loads(x) for x in data.splitlines()]
    assert lines == [{"lost_records": 3, "lost_after_step": 19}, {"step": 23, "start_ns": 23, "end_ns": 23,
                                                                   "profiled": False}] and count == 24


def _recorded(path: Path) -> tuple[list[dict], list[int]]:
    rows = [json.loads(line) for line in lines_of(path)]
    return [r for r in rows if "lost_records" in r], [r["step"] for r in rows if "step" in r]


def _lapped(log: StepLog, n: int) -> None:
    """Record i: step i at 10 i ns, n of them with no pause, then close."""
    for i in range(n):
        log.record(i, 10 * i, 10 * i + 5, 10 * i + 6, 0)
    log.close()


def _checked_steps(path: Path) -> list[int]:
    """The steps in a :func:`_lapped` steps.jsonl, asserting that each line holds the record of its own index,
    whole, and that each lost_records line says exactly how many are missing there and after which step."""
    last, gap, steps = -1, 0, []
    for row in (json.loads(line) for line in lines_of(path)):
        if "lost_records" in row:
            assert row.get("lost_after_step", -1) == last
            gap += row["lost_records"]
            continue
        i = row["step"]
        assert i == last + gap + 1 and row == {"step": i, "start_ns": 10 * i, "end_ns": 10 * i + 5,
                                               "profiled": False, **({"data_wait_ns": 4} if i and not gap else {})}
        last, gap = i, 0
        steps.append(i)
    return steps


def test_a_loop_that_outruns_the_ring_gets_a_lost_line_and_a_skipped_row(tmp_path, monkeypatch):
    """The real writer process, a ring of 64 records and 3000 records with no pause: every record is either a line
    or counted in a lost_records line at its place, the training side hears of it once, ingestion says it."""
    import polars as pl

    import workbench
    from workbench.run import STEP_RECORDS_LOST

    monkeypatch.setattr(step_log, "CAPACITY", 64)
    monkeypatch.setattr(step_log, "CHECK_EVERY", 32)
    path = tmp_path / "rank0" / "steps.jsonl"
    path.parent.mkdir()
    errors: list[BaseException] = []
    log = StepLog(path, on_error=errors.append)
    assert log.mode == "process"
    _lapped(log, 3000)
    assert len(errors) == 1 and "behind the training loop" in str(errors[0]) and log.mode == "process"
    steps = _checked_steps(path)
    said = int(str(errors[0]).split(" records lost")[0])      # the count on disk when it was said (once)
    assert 0 < said <= 3000 - len(steps)
    assert steps[-63:] == list(range(2937, 3000))                   # the rest of the ring, at close
    assert sum(x["lost_records"] for x in _recorded(path)[0]) == 3000 - len(steps) > 0
    run = workbench.open(tmp_path)
    assert sorted(run.steps.filter(pl.col("source") == "collector").get_column("step").to_list()) == steps
    skipped = run.skipped.filter(pl.col("reason") == STEP_RECORDS_LOST).rows(named=True)
    assert skipped == [{"rank": 0, "file": str(path), "reason": STEP_RECORDS_LOST, "count": 3000 - len(steps)}]


def test_a_writer_reading_while_the_loop_laps_the_ring_writes_no_torn_or_misplaced_record(tmp_path, monkeypatch):
    """The writer reads every millisecond while the loop overwrites the ring under it: each line it writes holds
    the record of its own index, whole (with counters stored by ``struct.pack_into`` a reader sometimes saw 0 and
    let torn or stale records through)."""
    monkeypatch.setattr(step_log, "CAPACITY", 1024)
    monkeypatch.setattr(step_log, "POLL_S", 0.001)
    path = tmp_path / "steps.jsonl"
    _lapped(StepLog(path, on_error=lambda exc: None), 100_000)
    steps = _checked_steps(path)
    assert steps[-1] == 99_999 and len(steps) >= 1023


def test_a_stalled_writer_is_drained_at_close_with_the_gap_after_its_last_step(tmp_path, monkeypatch, fast_poll):
    """A writer stuck (a hung file system: here SIGSTOP) while the loop laps the ring: training is not blocked, and
    at close the ring is drained here with the gap placed after the last step the writer had written, and the
    records lost are said then, counted as on disk."""
    monkeypatch.setattr(step_log, "CAPACITY", 64)
    monkeypatch.setattr(step_log, "CHECK_EVERY", 32)
    monkeypatch.setattr(step_log, "CLOSE_WAIT_S", 0.2)
    path = tmp_path / "steps.jsonl"
    log, errors = _written_out(path, 10)
    os.kill(log._pid, signal.SIGSTOP)
    for i in range(10, 1010):
        log.record(i, i, i, i, 0)
    assert log.mode == "process" and errors == []    # not killed for it; nothing is said lost before it is
    log.close()
    assert len(errors) == 2 and "did not finish" in str(errors[0])
    assert isinstance(errors[1], step_log.StepRecordsLost) and str(errors[1]).startswith(f"{1010 - 10 - 63} records")
    lost, steps = _recorded(path)
    assert lost == [{"lost_records": 1010 - 10 - 63, "lost_after_step": 9}]
    assert steps == list(range(10)) + list(range(1010 - 63, 1010))    # 63: see test_records_that_wrapped_...


torch = pytest.importorskip("torch")


def test_a_step_that_hangs_leaves_the_steps_before_it_on_disk(tmp_path, fast_poll):
    """A rank stuck in a step (a collective that never returns) has its finished steps in steps.jsonl within
    POLL_S: the hang report's 'last step finished' does not wait for the process to end."""
    from workbench.collectors import Collector

    c = Collector(tmp_path, profile_repeat=0)
    with c:
        for i in range(4):
            with c.step():
                torch.ones(2).sum()
        with c.step():                                 # "hung": the file is read while this step runs
            assert wait_for(lambda: len(steps_in(tmp_path / "rank0/steps.jsonl")) == 4)
            rows, bad = read_steps(tmp_path / "rank0")
            assert sorted(rows) == [0, 1, 2, 3] and bad == 0
    rows, _ = read_steps(tmp_path / "rank0")
    assert sorted(rows) == [0, 1, 2, 3, 4]


def test_collector_rows_keep_their_fields_and_data_wait_excludes_the_collectors_own_work(tmp_path):
    """The row format is the same as when rows were written on the training thread; the time the collector spends
    after a step (here a profiler window's stop) is not the next step's data wait."""
    from workbench.collectors import Collector

    c = Collector(tmp_path, profile_start=2, profile_length=2)
    with c:
        for i in range(7):
            time.sleep(0.02 if i == 5 else 0.0)        # the data wait before step 5
            with c.step():
                torch.randn(64, 64) @ torch.randn(64, 64)
    rows, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(rows) == list(range(7))
    assert [s for s, r in rows.items() if r["profiled"]] == [2, 3]
    assert set(rows[0]) == {"step", "start_ns", "end_ns", "profiled"}
    assert all(set(rows[s]) == {"step", "start_ns", "end_ns", "data_wait_ns", "profiled"} for s in range(1, 7))
    assert rows[5]["data_wait_ns"] >= 0.018e9
    assert all(rows[s]["start_ns"] >= rows[s - 1]["end_ns"] for s in range(1, 7))
    raw = (tmp_path / "rank0/steps.jsonl").read_bytes()
    assert raw.endswith(b"\n") and all(json.loads(line) for line in raw.splitlines())
    assert os.path.getsize(tmp_path / "rank0/steps.jsonl") == len(raw)


def test_a_collector_whose_writer_falls_a_ring_behind_goes_on_and_says_what_was_lost(tmp_path, monkeypatch):
    """A real Collector with a 64-record ring and a writer that does not read during the loop: the loop goes on, at
    close the writer writes the rest with the lost_records line where the gap is, and ``collector.errors`` says once
    how many records were lost (the count on disk, not a guess), not that steps stopped."""
    from workbench.collectors import Collector

    monkeypatch.setattr(step_log, "CAPACITY", 64)
    monkeypatch.setattr(step_log, "CHECK_EVERY", 128)
    monkeypatch.setattr(step_log, "POLL_S", 60.0)         # the writer reads only when the pipe closes
    c = Collector(tmp_path, profile_repeat=0, compile_capture=False, device_timing=False)
    with c:
        for _ in range(400):
            with c.step():
                pass
        assert c.errors == []                              # nothing lost yet: the writer has read nothing
    lost = [e for e in c.errors if e.startswith("steps_lost:")]
    assert len(lost) == 1 and "behind" in lost[0]          # said once the writer has written the gap at close
    assert c.steps_done == 400 and not [e for e in c.errors if e.startswith("steps:")]
    rows = [json.loads(line) for line in (tmp_path / "rank0/steps.jsonl").read_text().splitlines()]
    gaps = [r["lost_records"] for r in rows if "lost_records" in r]
    steps = [r["step"] for r in rows if "step" in r]
    assert sum(gaps) + len(steps) == 400 and steps == list(range(400 - len(steps), 400)) and len(steps) >= 60


def test_inline_writing_is_not_counted_as_the_next_steps_data_wait(tmp_path):
    """Written on the training thread, a step's line is the collector's own work: the next step's data wait starts
    after it, not at the step's ``ready`` time."""
    log = StepLog(tmp_path / "steps.jsonl", on_error=lambda exc: None)
    log.write_inline()
    log.record(0, 100, 200, 300, 0)            # ready at 300 ns: long before the line is written
    written = time.time_ns()
    log.record(1, written, written + 1, written + 2, 0)
    log.close()
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and "data_wait_ns" not in rows[0]
    assert 0 <= rows[1]["data_wait_ns"] < written - 300


def test_a_cursor_points_where_record_would_store_next(tmp_path, monkeypatch, fast_poll):
    """Records stored through a cursor land where record() would have put them, and come out as lines."""
    monkeypatch.setattr(step_log, "CAPACITY", 8)
    monkeypatch.setattr(step_log, "CHECK_EVERY", 16)
    path = tmp_path / "steps.jsonl"
    log = StepLog(path, on_error=lambda exc: None)
    for i in range(5):
        log.record(i, i, i, i, 0)
    ring = log.cursor()
    assert ring is not None and ring.count == 5 and ring.before_check == 16 - 1 - 5
    assert ring.at == step_writer.FIRST_WORD + 5 * step_writer.RECORD_WORDS
    assert ring.end == step_writer.FIRST_WORD + 8 * step_writer.RECORD_WORDS
    ring.words[ring.at:ring.at + 5] = memoryview(step_writer.RECORD.pack(5, 5, 5, 5, 0)).cast("q")
    ring.words[step_writer.WRITTEN] = 6
    log.record(6, 6, 6, 6, 0)                                   # after the cursor's record, not over it
    log.close()
    assert steps_in(path) == list(range(7))
    assert log.cursor() is None                                 # closed: lines are not stored into a ring
