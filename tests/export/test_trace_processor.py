"""Perfetto's own trace processor on the written files, with SQL (the same importer ui.perfetto.dev runs).

No package registry reachable here ships a trace_processor_shell binary: PyPI's ``perfetto`` downloads it at run
time (which this workplace forbids), and neither Debian nor npm has one. So this test runs only where a binary is
given (``WORKBENCH_TRACE_PROCESSOR=/path/to/trace_processor_shell``, or one on PATH) and is skipped elsewhere."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import workbench
from workbench.export import export_run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
BINARY = os.environ.get("WORKBENCH_TRACE_PROCESSOR") or shutil.which("trace_processor_shell")

pytestmark = pytest.mark.skipif(not BINARY, reason="no trace_processor_shell binary (none installs from the "
                                                   "package registries here; set WORKBENCH_TRACE_PROCESSOR)")


@pytest.mark.parametrize("out", ["run.pftrace", "run.json"])
def test_sql_sees_every_rank_slice_and_flow(tmp_path, out):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    run = workbench.open(SAMPLES / "cpu-gloo-4rank")
    summary = export_run(run, tmp_path / out)
    tp = TraceProcessor(trace=str(tmp_path / out), config=TraceProcessorConfig(bin_path=BINARY))
    try:
        procs = [r.name for r in tp.query("select name from process where name like 'rank %' order by pid")]
        assert procs == [f"rank {r} · vm · CPU" for r in range(4)]
        n = next(iter(tp.query("select count(*) as n from slice"))).n
        assert n == summary["slices"] + summary["findings_drawn"]
        flows = next(iter(tp.query("select count(*) as n from flow"))).n
        assert flows == summary["flows"] > 0
        waits = tp.query("select s1.name as a, s2.name as b from flow f join slice s1 on f.slice_out = s1.id "
                         "join slice s2 on f.slice_in = s2.id")
        assert all(r.a.startswith("wait for rank") for r in waits)
    finally:
        tp.close()
