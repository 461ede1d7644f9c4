"""The collector's hang files (rank<R>/hang/), from real one-rank gloo processes: the Flight Recorder dump on
close, the error and the step it left, the watchdog's stall dump and heartbeat, the fatal traceback of an abort."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.flight_recorder import load_hang_tables, read_dump

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent('''
    import json, os, sys, time, socket, traceback
    import torch, torch.distributed as dist
    from workbench.collectors import Collector

    def run(mode, out):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        with Collector(out, profile_repeat=0) as c:
            for step in range(4):
                with c.step():
                    dist.all_reduce(torch.ones(3))
                    if mode == "error" and step == 2:
                        raise RuntimeError("planted error")
                    if mode == "stall" and step == 1:
                        time.sleep(3.5)
                    if mode == "abort" and step == 1:
                        os.abort()                                    # the planted abort

    # one process per mode, forked after the imports (so torch is imported once, not once per mode)
    pids = {}
    for mode, out in zip(sys.argv[1::2], sys.argv[2::2]):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                run(mode, out)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
        pids[pid] = mode
    codes = {}
    for _ in list(pids):
        pid, status = os.wait()
        codes[pids[pid]] = os.waitstatus_to_exitcode(status)
    print(json.dumps(codes))
''')
ABORT_LINE = next(i for i, line in enumerate(WORKER.splitlines(), 1) if "the planted abort" in line)
MODES = ("ok", "error", "stall", "abort")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each mode in its own real one-rank gloo process (forked from one that imported torch)."""
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("capture")
    script = tmp / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WORKBENCH_HANG_STALL_S": "1"}
    env.pop("RANK", None)
    args = [a for m in MODES for a in (m, str(tmp / m))]
    p = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    codes = json.loads(p.stdout.strip().splitlines()[-1])
    return {m: (tmp / m, codes[m]) for m in MODES}


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rank0/hang/events.jsonl").read_text().splitlines()]


def test_clean_exit_dumps_the_flight_recorder(runs):
    out, rc = runs["ok"]
    assert rc == 0
    ev = _events(out)
    assert [e["event"] for e in ev] == ["start", "dump", "fr_coverage", "exit"], ev
    assert ev[2]["recorded"] == 4 and ev[2]["lost"] == 0      # every collective kept (docs/critical-path.md)
    assert ev[0]["pg_before_collector"] is True and ev[0]["backend"] == "gloo"
    assert ev[-1]["reason"] == "closed" and ev[-1]["steps_done"] == 4
    dump = read_dump(out / "rank0/hang/fr_trace_rank_0")
    colls = [e for e in dump.entries if e.get("profiling_name") == "gloo:all_reduce"]
    assert len(colls) == 4 and [e["collective_seq_id"] for e in colls] == [1, 2, 3, 4]
    assert not (out / "rank0/hang/fatal.txt").exists()     # the empty faulthandler file is removed


def test_an_error_records_the_step_it_left(runs):
    out, rc = runs["error"]
    assert rc != 0
    ev = {e["event"]: e for e in _events(out)}
    assert ev["error"]["step"] == 2 and "planted error" in ev["error"]["error"]
    assert ev["exit"]["reason"] == "exception" and ev["dump"]["reason"] == "exception"
    state = load_hang_tables(out).rank_state.row(0, named=True)
    assert state["error_step"] == 2 and state["exit_reason"] == "exception" and state["dumps"] == 1


def test_a_stalled_step_gets_a_dump_and_heartbeats(runs):
    out, rc = runs["stall"]
    assert rc == 0
    ev = _events(out)
    stalled = [e for e in ev if e["event"] == "stalled"]
    assert len(stalled) == 1 and stalled[0]["step"] == 1, ev
    assert any(e["event"] == "dump" and e["reason"] == "stalled" for e in ev)
    beat = json.loads((out / "rank0/hang/heartbeat.jsonl").read_text())
    assert beat["time_ns"] > ev[0]["time_ns"]


def test_an_abort_leaves_the_line_it_was_at(runs):
    out, rc = runs["abort"]
    assert rc != 0
    state = load_hang_tables(out).rank_state.row(0, named=True)
    assert state["fatal"] is True and state["exit_reason"] is None
    assert state["fatal_call_site"].endswith(f"worker.py:{ABORT_LINE} in run"), state["fatal_call_site"]
    steps = [json.loads(x) for x in (out / "rank0/steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0]   # the step writer wrote it after the abort; the step it died in: never
