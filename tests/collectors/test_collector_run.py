"""One-process tests of the collector: files, steps, windows, compile capture, failures, compile config."""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collector_helpers import ROOT, Tiny, compile_metrics, compile_records, open_run, read_steps

torch = pytest.importorskip("torch")

from workbench.collectors import Collector  # noqa: E402
from workbench.collectors.collector import STEP_IMPL_ENV, STEP_IMPLS  # noqa: E402

#: The step contexts built here: "c" (collectors/_fast_step.c) where a compiler was found at install, and "python".
impls = pytest.mark.parametrize("impl", STEP_IMPLS)


@pytest.fixture
def step_impl(impl, monkeypatch):
    """The step context ``impl`` for the collectors a test makes."""
    monkeypatch.setenv(STEP_IMPL_ENV, impl)
    return impl


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train(collector: Collector, steps: int, *, compiled: bool = False, sizes: dict[int, int] | None = None):
    model = Tiny()
    fn = torch.compile(model, backend="aot_eager") if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    collector.instrument(fn, opt)
    with collector:
        for i in range(steps):
            with collector.step():
                n = (sizes or {}).get(i, 4)
                fn(torch.randn(n, 8)).sum().backward()
                opt.step()
                opt.zero_grad()


def empty_steps(collector: Collector, n: int) -> None:
    """``n`` steps with nothing in them."""
    for _ in range(n):
        with collector.step():
            pass


def trace_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_context_manager_writes_run_directory(tmp_path):
    c = Collector(tmp_path, profile_start=2, profile_length=2)
    train(c, 6)
    assert c.errors == []
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["world_size"] == 1 and run["steps"] == 6 and run["profile_windows"] == [[2, 3]]
    assert run["compile_config"] is None
    fp = json.loads((tmp_path / "rank0/fingerprint.json").read_text())
    for key in ("host", "rank", "local_rank", "python", "torch", "triton", "cuda", "cudnn", "nccl", "device",
                "env", "config_hash", "errors"):
        assert key in fp, key
    assert fp["rank"] == 0 and len(fp["config_hash"]) == 64
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == list(range(6))
    for s, row in steps.items():
        assert row["end_ns"] > row["start_ns"] > 1_600_000_000 * 10**9
        assert row["profiled"] == (s in (2, 3))
        assert ("data_wait_ns" in row) == (s > 0)
    traces = sorted((tmp_path / "rank0/trace").glob("*.json.gz"))
    assert [p.name.split(".")[1] for p in traces] == ["steps2-3"]
    names = [e["name"] for e in trace_events(traces[0]) if e.get("cat") == "user_annotation"]
    assert [n for n in names if n.startswith("ProfilerStep#")] == ["ProfilerStep#2", "ProfilerStep#3"]
    assert {"forward", "backward", "optimizer"} <= set(names)
    assert not list((tmp_path / "rank0/trace").glob(".tmp*"))


def test_decorator_and_no_window_when_loop_is_short(tmp_path):
    c = Collector(tmp_path)             # default window: steps 5-7
    model = Tiny()

    @c.step
    def train_step(x):
        return model(x).sum().item()

    for _ in range(4):                  # no `with collector:` -- the first step starts it
        train_step(torch.randn(2, 8))
    c.close()
    steps, _ = read_steps(tmp_path / "rank0")
    assert sorted(steps) == [0, 1, 2, 3] and not any(r["profiled"] for r in steps.values())
    assert not list((tmp_path / "rank0").glob("trace/*.json.gz"))


def test_window_cut_by_end_of_loop_is_saved(tmp_path):
    c = Collector(tmp_path, profile_start=1, profile_length=5)
    train(c, 3)
    traces = list((tmp_path / "rank0/trace").glob("*.json.gz"))
    assert [p.name.split(".")[1] for p in traces] == ["steps1-2"]
    # ProfilerStep#3 was opened at the end of step 2 (as profile.step() does) but never ran: not in the trace
    names = {e["name"] for e in trace_events(traces[0]) if e.get("name", "").startswith("ProfilerStep#")}
    assert names == {"ProfilerStep#1", "ProfilerStep#2"}
    assert json.loads((tmp_path / "run.json").read_text())["steps"] == 3


def test_window_with_no_step_run_is_not_saved(tmp_path):
    c = Collector(tmp_path, profile_start=2, profile_length=3)
    train(c, 2)          # tracing started at the end of step 1; step 2 never ran
    assert not list((tmp_path / "rank0/trace").glob("*.json.gz"))
    assert c.errors == []


def test_exception_inside_a_step_is_marked(tmp_path):
    c = Collector(tmp_path, profile_start=1, profile_length=5)
    model = Tiny()
    with pytest.raises(RuntimeError, match="boom"):
        with c:
            for i in range(5):
                with c.step():
                    model(torch.randn(2, 8)).sum().backward()
                    if i == 3:
                        raise RuntimeError("boom")
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == [0, 1, 2, 3]
    assert steps[3].get("interrupted") is True and not any(steps[s].get("interrupted") for s in (0, 1, 2))
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["steps"], run["interrupted_step"], run["stop_reason"]) == (4, 3, "RuntimeError")
    assert c.steps_done == 4
    trace = next((tmp_path / "rank0/trace").glob("*.json.gz"))
    assert trace.name.split(".")[1] == "steps1-3"           # step 3 ran in part: kept; #4 never ran: removed
    names = {e["name"] for e in trace_events(trace) if e.get("name", "").startswith("ProfilerStep#")}
    assert names == {"ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"}


def _recorded_loop(run_dir: Path) -> tuple[list[dict], tuple]:
    """steps.jsonl without its times, and run.json's step count, of a loop with a window (steps 5-7), nested steps
    and an exception in every third step."""
    c = Collector(run_dir, profile_length=3)
    with c:
        for i in range(25):
            try:
                with c.step():
                    with c.step():
                        if i % 3 == 1:
                            raise ValueError(i)
            except ValueError:
                pass
    lines = [json.loads(line) for line in (run_dir / "rank0/steps.jsonl").read_text().splitlines()]
    for line in lines:
        for key in ("start_ns", "end_ns", "data_wait_ns", "device_ns"):
            line.pop(key, None)
    run = json.loads((run_dir / "run.json").read_text())
    return lines, (run["steps"], run["interrupted_step"], list(c.errors))


@impls
def test_the_step_contexts_fast_path_records_what_the_full_path_does(tmp_path, monkeypatch, step_impl):
    """Steps without work are handled in the step context itself; forcing every step through
    ``Collector._step_begin`` / ``_step_end`` gives the same lines and counts."""
    fast = _recorded_loop(tmp_path / "fast")
    schedule = Collector._schedule_step_work

    def every_step_the_full_path(self: Collector) -> None:
        schedule(self)
        self._every_step = True

    monkeypatch.setattr(Collector, "_schedule_step_work", every_step_the_full_path)
    assert _recorded_loop(tmp_path / "full") == fast
    assert sum(1 for line in fast[0] if line.get("interrupted")) == 8 and fast[1][0] == 25


@impls
def test_steps_without_work_take_the_fast_path(tmp_path, monkeypatch, step_impl):
    """Outside the window and the timed steps (every 10th here, where there is a GPU), the step context alone handles a
    step: only step 0, the window's steps and the timed ones reach ``Collector._step_begin``. Without a GPU no step
    is timed after step 0 finds none."""
    begun: list[int] = []
    step_begin = Collector._step_begin

    def counted(self: Collector) -> None:
        begun.append(self._state.next_step)
        step_begin(self)

    monkeypatch.setattr(Collector, "_step_begin", counted)
    c = Collector(tmp_path, profile_start=5, profile_length=2, device_timing_every=10)
    assert c.step_impl == step_impl
    with c:
        for _ in range(40):
            with c.step():
                pass
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == list(range(40))
    timed = {10, 20, 30} if torch.cuda.is_available() else set()
    assert 0 in begun and {10, 20, 30} & set(begun) == timed and len(begun) < 12, begun
    assert all(steps[s]["start_ns"] <= steps[s]["end_ns"] for s in steps)
    assert steps[13]["data_wait_ns"] >= 0 and not steps[13]["profiled"] and steps[5]["profiled"]
    assert json.loads((tmp_path / "rank0/fingerprint.json").read_text())["step_context"] == step_impl


@impls
def test_the_step_decorator_and_the_context_count_the_same_steps(tmp_path, step_impl):
    """``@collector.step`` on a function and ``with collector.step():`` share one step count; a decorated step that
    raises is recorded as interrupted and the error reaches the caller."""
    c = Collector(tmp_path, profile_repeat=0, device_timing=False)

    @c.step
    def train_step(i: int) -> int:
        if i == 7:
            raise KeyError(i)
        return i * 2

    with c:
        assert [train_step(i) for i in range(5)] == [0, 2, 4, 6, 8]
        for _ in range(2):
            with c.step():
                pass
        with pytest.raises(KeyError):
            train_step(7)
        assert train_step.__name__ == "train_step"
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == list(range(8))
    assert steps[7].get("interrupted") is True and not any(steps[s].get("interrupted") for s in range(7))
    with pytest.raises(TypeError, match="function to decorate"):
        c.step(3)


def test_a_close_from_a_signal_handler_between_the_fast_paths_stores_does_not_escape(tmp_path, monkeypatch):
    """SIGTERM's close() lands while the Python step context stores a record into the ring (which close lets go
    of): the step ends without raising, and every step before it is on disk. (The C step context runs no Python
    code between its stores: no handler can run there.)"""
    monkeypatch.setenv(STEP_IMPL_ENV, "python")
    c = Collector(tmp_path, profile_repeat=0, device_timing=False)
    c.start()
    for _ in range(3):
        with c.step():
            pass
    st = c._state
    assert st.fast_below > c.steps_done                    # armed: the next step is the step context's alone
    words = st._words

    class ClosingRing:
        """The ring's words; the first store into them runs close(), as a signal handler between two stores."""

        def __setitem__(self, i: int, value: int) -> None:
            c.close()
            words[i] = value                                 # released by close: raises ValueError

    st._words = ClosingRing()
    with c.step():                                           # must not raise
        pass
    assert c.steps_done == 4
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == [0, 1, 2]


@impls
def test_a_ring_let_go_of_while_armed_sends_the_step_through_the_full_path(tmp_path, step_impl):
    """The step log lets go of its ring (its view released) while the fast path is armed: the next step neither
    raises nor stores into the released memory; its record goes through ``StepLog.record`` (inline from here, as
    after a writer that died) and the steps after it are written too."""
    c = Collector(tmp_path, profile_repeat=0, device_timing=False)
    with c:
        empty_steps(c, 3)
        assert c._state.fast_below > c.steps_done          # armed
        c._steps._to_inline(drain=True)                    # the writer's records so far on disk; the view released
        assert c._state._words is not None                 # the context still holds the (released) view
        empty_steps(c, 3)
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == list(range(6)), sorted(steps)


@pytest.mark.skipif("c" not in STEP_IMPLS, reason="collectors/_fast_step.c not built here (no C compiler)")
def test_the_c_step_context_takes_only_a_ring_it_can_store_into(tmp_path):
    """The C step context accepts only a writable memoryview of 8-byte words as its ring, and a record that would
    not fit in the view is not stored: the step goes through the full path instead."""
    import mmap

    c = Collector(tmp_path, profile_repeat=0, device_timing=False)
    st = c._state
    with pytest.raises(TypeError):
        st._words = bytearray(64)
    with pytest.raises(ValueError):
        st._words = memoryview(bytes(64)).cast("q")       # read-only
    with pytest.raises(ValueError):
        st._words = memoryview(bytearray(64))               # bytes, not 8-byte words
    with c:
        empty_steps(c, 2)
        assert c._state.fast_below > c.steps_done
        small = mmap.mmap(-1, 64)
        st._words = memoryview(small).cast("q")             # 8 words: a record at word 6 does not fit
        st._at, st._ring_end = 6, 8
        with c.step():
            pass
        assert bytes(small) == bytes(64)                    # nothing stored into it
        st._words = None
        small.close()
        with c.step():
            pass
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == [0, 1, 2, 3]


@impls
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_that_steps_writes_nothing_into_the_ranks_steps(tmp_path, step_impl):
    """A process forked mid-run (fast path armed) that goes on stepping must not store into the rank's ring."""
    c = Collector(tmp_path, profile_repeat=0, device_timing=False)
    with c:
        empty_steps(c, 3)
        assert c._state.fast_below > c.steps_done  # armed
        child = os.fork()
        if child == 0:
            empty_steps(c, 50)
            os._exit(0)
        assert os.waitpid(child, 0)[1] == 0
        with c.step():
            pass
    steps, bad = read_steps(tmp_path / "rank0")
    assert bad == 0 and sorted(steps) == [0, 1, 2, 3]


def _endless_run(tmp_path, profile_length: int, size: int, sleep_s: float, min_steps: int,
                 timeout_s: float) -> subprocess.Popen:
    """A process training forever under a collector (window from step 2), returned once ``min_steps`` are written."""
    script = textwrap.dedent(f"""
        import sys, time, torch
        sys.path.insert(0, {str(ROOT)!r})
        from workbench.collectors import Collector
        c = Collector({str(tmp_path)!r}, profile_start=2, profile_length={profile_length})
        with c:
            for i in range(100000):
                with c.step():
                    torch.randn({size}, {size}) @ torch.randn({size}, {size})
                    time.sleep({sleep_s})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    steps_file = tmp_path / "rank0/steps.jsonl"
    deadline = time.time() + timeout_s
    while time.time() < deadline and not (steps_file.exists()
                                          and steps_file.read_bytes().count(b"\n") >= min_steps):
        time.sleep(0.05)
    return proc


def test_sigterm_saves_window_and_run_json_then_dies_of_it(tmp_path):
    proc = _endless_run(tmp_path, profile_length=1000, size=32, sleep_s=0.01, min_steps=6, timeout_s=600)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=600) == -signal.SIGTERM          # the signal still ends the process
    steps, bad = read_steps(tmp_path / "rank0")
    run = json.loads((tmp_path / "run.json").read_text())
    assert bad == 0 and run["stop_reason"] == "SIGTERM" and run["steps"] == len(steps) >= 6
    assert sorted(steps) == list(range(len(steps)))             # every step that ran, none more
    assert [s for s, r in steps.items() if r.get("interrupted")] in ([], [run["interrupted_step"]])
    trace = next((tmp_path / "rank0/trace").glob("*.json.gz"))
    last = max(steps)
    assert trace.name.split(".")[1] == f"steps2-{last}"
    names = {e["name"] for e in trace_events(trace) if e.get("name", "").startswith("ProfilerStep#")}
    assert names == {f"ProfilerStep#{s}" for s in range(2, last + 1)}


def test_profile_ranks_excludes_this_rank(tmp_path):
    c = Collector(tmp_path, profile_start=0, profile_ranks=[1])
    train(c, 3)
    assert not (tmp_path / "rank0/trace").exists()


def test_compile_capture_tags_recompiles_with_the_step(tmp_path):
    c = Collector(tmp_path, profile_repeat=0)
    train(c, 6, compiled=True, sizes={4: 6})
    logs = list((tmp_path / "rank0/compile").glob("dedicated_log_torch_trace_rank_0_*.log"))
    assert len(logs) == 1
    first = logs[0].read_text().splitlines()[0]
    assert first.startswith("V") and "] {" in first          # TORCH_TRACE line format
    metrics = compile_metrics(tmp_path / "rank0")
    assert "0/1" in metrics
    assert metrics["0/1"]["recompile_user_contexts"] == ["step=4"]
    assert "size mismatch" in metrics["0/1"]["recompile_reason"]
    assert any(r.get("artifact", {}).get("name") == "torch_version" for r in compile_records(tmp_path / "rank0"))


def test_compile_log_reads_with_tlparse(tmp_path):
    import shutil

    exe = shutil.which("tlparse") or (Path(sys.executable).parent / "tlparse")
    if not Path(exe).exists():
        pytest.skip("tlparse is not installed")
    c = Collector(tmp_path, profile_repeat=0)
    train(c, 3, compiled=True, sizes={2: 6})
    log = next((tmp_path / "rank0/compile").glob("*.log"))
    out = subprocess.run([str(exe), str(log), "-o", str(tmp_path / "tl"), "--no-browser", "--overwrite"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "tl/index.html").exists()
    assert "0_1" in " ".join(p.name for p in (tmp_path / "tl").iterdir())


def test_nothing_emitted_while_compiling(tmp_path):
    c = Collector(tmp_path, profile_start=0, profile_length=2)

    def fn(x):
        with c.range("inside"):
            return x * 2

    cfn = torch.compile(fn, backend="aot_eager", fullgraph=True)   # a graph break would fail here
    with c:
        for _ in range(2):
            with c.step():
                cfn(torch.randn(3))
    assert c.errors == []


def test_failing_profiler_skips_window_training_goes_on(tmp_path, monkeypatch, caplog):
    import torch.profiler

    class Broken:
        def __init__(self, *a, **k):
            raise RuntimeError("kineto exploded")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    c = Collector(tmp_path, profile_start=1, profile_length=1, profile_repeat=3, profile_every=2)
    with caplog.at_level(logging.WARNING, logger="workbench.collectors"):
        train(c, 7)
    assert len(c.errors) == 1 and "kineto exploded" in c.errors[0]
    assert sum("kineto exploded" in r.message for r in caplog.records) == 1     # logged once
    steps, bad = read_steps(tmp_path / "rank0")
    assert sorted(steps) == list(range(7)) and bad == 0
    fp = json.loads((tmp_path / "rank0/fingerprint.json").read_text())
    assert "kineto exploded" in fp["errors"][0]


def test_failing_export_is_logged(tmp_path, monkeypatch):
    import torch.profiler

    def boom(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", boom)
    c = Collector(tmp_path, profile_start=1, profile_length=1)
    train(c, 4)
    assert "No space left" in c.errors[0]
    assert sorted(read_steps(tmp_path / "rank0")[0]) == [0, 1, 2, 3]


def test_window_is_exported_off_the_training_thread(tmp_path, monkeypatch):
    """The trace is written by a background thread, and close() waits for it: the file is complete after close."""
    import threading

    import torch.profiler

    real = torch.profiler.profile.export_chrome_trace
    seen = []

    def export(self, path):
        seen.append((threading.current_thread().name, path.endswith(".gz")))
        return real(self, path)

    monkeypatch.setattr(torch.profiler.profile, "export_chrome_trace", export)
    c = Collector(tmp_path, profile_start=1, profile_length=2)
    train(c, 5)
    assert seen == [("workbench-trace-export", False)]        # Kineto's JSON, gzipped by the collector itself
    (trace,) = c.trace_files
    names = {e.get("name") for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}
    assert {"ProfilerStep#1", "ProfilerStep#2"} <= names
    left = sorted(p.name for p in trace.parent.iterdir() if p.name != "exports.jsonl")   # the exports' own log
    assert left == [trace.name]   # no temp folder left


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_full_disk_is_logged_not_raised(tmp_path, caplog):
    rank = tmp_path / "rank0"
    (rank / "compile").mkdir(parents=True)
    (rank / "steps.jsonl").symlink_to("/dev/full")
    (rank / f"compile/dedicated_log_torch_trace_rank_0_{os.getpid()}.log").symlink_to("/dev/full")
    c = Collector(tmp_path, profile_repeat=0)
    with caplog.at_level(logging.WARNING, logger="workbench.collectors"):
        c.start()
        model = torch.compile(Tiny(), backend="aot_eager")
        for _ in range(3):
            with c.step():
                model(torch.randn(2, 8)).sum().backward()
        c.close()
    assert c.steps_done == 3
    assert {e.split(":")[0] for e in c.errors} == {"steps", "compile_capture"}
    assert all("No space left" in e for e in c.errors)
    assert len([r for r in caplog.records if "No space left" in r.message]) == 2


def test_sigkill_mid_run_leaves_completed_steps_readable(tmp_path):
    proc = _endless_run(tmp_path, profile_length=1, size=64, sleep_s=0.002, min_steps=50, timeout_s=600)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    steps, bad = read_steps(tmp_path / "rank0")
    assert len(steps) >= 50 and bad <= 1
    assert sorted(steps) == list(range(len(steps)))                 # every completed step, in order
    assert json.loads((tmp_path / "run.json").read_text())["world_size"] == 1
    assert json.loads((tmp_path / "rank0/fingerprint.json").read_text())["rank"] == 0
    assert len(list((tmp_path / "rank0/trace").glob("*.json.gz"))) == 1   # the window before the kill
    run = open_run(tmp_path)
    if run is not None:
        collector_steps = run.steps.filter(run.steps["source"] == "collector")
        assert collector_steps.height >= 50


def test_compile_config_applied_in_thread_and_recorded(tmp_path):
    pytest.importorskip("workbench.compile_config")
    cfg = tmp_path / "cc.toml"
    cfg.write_text('[dynamo]\nrecompile_limit = 3\n[compile]\ndynamic = false\n[env]\nTORCH_NCCL_TRACE_BUFFER_SIZE = "123"\n')
    import torch._dynamo.config as dcfg

    before, env_before = dcfg.recompile_limit, os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE")
    try:
        c = Collector(tmp_path / "run", compile_config=cfg, profile_repeat=0)
        assert os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "123"     # env applied at construction
        assert c.compile_kwargs == {"dynamic": False}
        with c:
            assert dcfg.recompile_limit == 3                       # config applied in this thread
            model = c.compile(Tiny(), backend="aot_eager")
            for n in (2, 3, 4, 5, 6):                              # dynamic=False: one compile per size
                with c.step():
                    model(torch.randn(n, 8)).sum().backward()
        metrics = compile_metrics(tmp_path / "run/rank0")
        ok = [k for k, m in metrics.items() if m["fail_type"] is None]
        assert len(ok) == 3 and len(metrics) == 4                  # limit (3) hit: the 4th size fails
        run = json.loads((tmp_path / "run/run.json").read_text())
        assert run["compile_config"]["dynamo"] == {"recompile_limit": 3}
        assert run["compile_config_path"] == str(cfg.resolve())
    finally:
        dcfg.recompile_limit = before
        os.environ.pop("TORCH_NCCL_TRACE_BUFFER_SIZE", None)
        if env_before is not None:
            os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = env_before


def test_compile_config_unknown_key_names_the_closest(tmp_path):
    pytest.importorskip("workbench.compile_config")
    from workbench.errors import InputError

    cfg = tmp_path / "cc.toml"
    cfg.write_text("[dynamo]\nrecompile_limt = 3\n")
    with pytest.raises(InputError, match="recompile_limit"):
        Collector(tmp_path / "run", compile_config=cfg)


def test_compile_config_from_env_var(tmp_path, monkeypatch):
    pytest.importorskip("workbench.compile_config")
    cfg = tmp_path / "cc.toml"
    cfg.write_text("[compile]\nfullgraph = true\n")
    monkeypatch.setenv("WORKBENCH_COMPILE_CONFIG", str(cfg))
    c = Collector(tmp_path / "run")
    assert c.compile_kwargs == {"fullgraph": True}


def test_window_detaches_cupti_unless_the_user_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "placeholder")     # so that monkeypatch restores the original state
    monkeypatch.delenv("TEARDOWN_CUPTI")
    train(Collector(tmp_path / "a", profile_start=1, profile_length=1), 3)
    assert os.environ["TEARDOWN_CUPTI"] == "1"               # Kineto detaches CUPTI after the window
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    train(Collector(tmp_path / "b", profile_start=1, profile_length=1), 3)
    assert os.environ["TEARDOWN_CUPTI"] == "0"               # the user's (or torch's CUDA-graph) choice stays
    assert len(list((tmp_path / "b/rank0/trace").glob("*.json.gz"))) == 1
