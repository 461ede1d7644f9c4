"""GPU idle attributed to what the host did (analyses/idle_causes.py, idle_findings.py), on Kineto traces built
here with known timings: every gap's cause is known by construction (the block of host code that left the GPU
waiting), read through the real ingest (``workbench.open`` of the JSON) and the whole analysis."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.idle_causes import idle_attribution
from workbench.analyses.idle_findings import site_of
from workbench.analyses.kinds import Kind
from workbench.analyses.recommendations import recommend
from workbench.analyses.summary import analysis_tables

BASE_NS = 1_700_000_000_000_000_000
PARAMS = 24
STEPS = 4


@dataclass
class Builder:
    """One rank's trace on one GPU (stream 7), times in µs; ``truth``: per step, idle µs per cause by
    construction."""

    ev: list[dict] = field(default_factory=list)
    t: float = 1000.0          # the host's clock
    gpu: float = 0.0           # when the stream is free
    corr: int = 1
    block: str = "start"       # the host block since the last launch
    step_no: int = 0
    truth: dict[int, dict[str, float]] = field(default_factory=dict)

    def op(self, name: str, start: float, end: float, cat: str = "cpu_op") -> None:
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": start, "dur": end - start})

    def launch(self, block: str, kernel_us: float, name: str = "triton_poi_fused_0") -> float:
        """Launch one kernel from host block ``block`` now (4 µs call); returns its end. The gap before it is
        charged to what the host did since the previous launch: a sync that drained the queue, the data loading or
        loop code before the step, else ``block``."""
        self.ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                        "ts": self.t, "dur": 4.0, "args": {"correlation": self.corr, "cbid": 211}})
        start = max(self.t + 6.0, self.gpu)
        if self.gpu and start > self.gpu and self.t > self.gpu:
            cause = self.block if self.block in ("sync", "data", "between") else block
            mine = self.truth.setdefault(self.step_no, {})
            mine[cause] = mine.get(cause, 0.0) + (start - self.gpu)
        self.ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": start,
                        "dur": kernel_us, "args": {"device": 0, "stream": 7, "correlation": self.corr}})
        self.corr += 1
        self.t += 4.0
        self.gpu = start + kernel_us
        self.block = block
        return self.gpu

    def compiled(self, kernels: int = 30) -> None:
        a = self.t
        for _ in range(kernels):
            self.launch("launch", 3.0)
            self.t += 11.0
        self.op("Torch-Compiled Region: 0/0", a, self.t + 1)
        self.t += 2

    def item_syncs(self) -> None:
        for _ in range(PARAMS):
            a = self.t
            end = self.launch("norm", 5.0, "reduce_kernel")
            self.op("aten::linalg_vector_norm", a, self.t + 1)
            self.t += 2
            s = self.t
            self.ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                            "ts": s + 2, "dur": end - s})
            self.t = end + 8
            self.op("aten::_local_scalar_dense", s + 1, self.t - 1)
            self.op("aten::item", s, self.t)
            self.block = "sync"
            self.t += 20.0             # the Python loop to the next parameter

    def optimizer(self, fused: bool) -> None:
        a = self.t
        if fused:
            b = self.t
            self.launch("optimizer", 40.0, "fused_adamw_kernel")
            self.op("aten::_fused_adamw_", b, self.t + 2)
            self.t += 3
        else:
            for _ in range(PARAMS):
                for _ in range(3):
                    b = self.t
                    self.launch("optimizer", 2.0, "elementwise_kernel")
                    self.op("aten::mul_", b, self.t + 1)
                    self.t += 8.0
        self.op("Optimizer.step#AdamW.step", a, self.t + 1, cat="user_annotation")
        self.t += 2

    def step(self, s: int, fault: str) -> None:
        a = self.t
        self.step_no = s
        if fault == "data":
            self.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", self.t + 1, self.t + 3001,
                    cat="user_annotation")
            self.t += 3002
            self.block = "data"
        else:
            self.t += 30.0             # the loop itself
            self.block = "between"
        self.compiled()
        if fault == "item":
            self.item_syncs()
        self.optimizer(fused=fault != "unfused")
        self.t += 5
        self.op(f"ProfilerStep#{s}", a, self.t, cat="user_annotation")
        self.t += 1

    def write(self, path: Path) -> Path:
        self.ev.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python3"}})
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                         "totalGlobalMem": 85045379072, "computeMajor": 9,
                                                         "computeMinor": 0, "numSms": 132}],
               "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
               "baseTimeNanoseconds": BASE_NS, "traceEvents": self.ev}
        path.write_text(json.dumps(doc))
        return path


def _run(tmp_path: Path, fault: str) -> tuple[Builder, workbench.Run]:
    b = Builder()
    for s in range(1, STEPS + 1):
        b.step(s, fault)
    return b, workbench.open(b.write(tmp_path / f"{fault}.json"))


def _by_cause(b: Builder, run: workbench.Run) -> tuple[dict[str, float], dict[str, float]]:
    """(attributed, planted) µs per cause over the steps the analysis window holds."""
    a = idle_attribution(run.kernels, run.events, run.steps)
    steps = set(a["step"].to_list())
    truth: dict[str, float] = {}
    for s in steps:
        for c, us in b.truth.get(s, {}).items():
            truth[c] = truth.get(c, 0.0) + us
    return {c: ns / 1e3 for c, ns in a.group_by("cause").agg(pl.col("ns").sum()).iter_rows()}, truth


@pytest.mark.parametrize("fault,cause", [("item", "sync"), ("unfused", "optimizer"), ("data", "data")])
def test_each_gap_goes_to_the_host_block_that_left_the_gpu_waiting(tmp_path, fault, cause):
    b, run = _run(tmp_path, fault)
    got, truth = _by_cause(b, run)
    assert got[cause] == pytest.approx(truth[cause], rel=0.02), (got, truth)
    assert got["launch"] == pytest.approx(truth["launch"], rel=0.02)   # the compiled region's own launches


def test_the_clean_run_is_the_models_own_launch_bound_nature(tmp_path):
    b, run = _run(tmp_path, "clean")
    got, truth = _by_cause(b, run)
    assert got["launch"] == pytest.approx(truth["launch"], rel=0.02)
    roots = list(analysis_tables(run).roots)
    kinds = [f.kind for f in roots]
    assert Kind.HOST_SYNC not in kinds and Kind.UNFUSED_OPTIMIZER not in kinds and Kind.DATA_LOADING not in kinds
    lb = next(f for f in roots if f.kind in (Kind.LAUNCH_BOUND, Kind.HOST_BOUND))
    assert "the model's own launch-bound nature" in lb.message and "not a fault of the code" in lb.message
    assert lb.cost_ns == pytest.approx(truth["launch"] * 1e3, rel=0.02)


@pytest.mark.parametrize("fault,kind,fix", [("item", Kind.HOST_SYNC, "defer_sync"),
                                            ("unfused", Kind.UNFUSED_OPTIMIZER, "fused_optimizer"),
                                            ("data", Kind.DATA_LOADING, "loader_workers")])
def test_a_fault_is_its_own_finding_with_a_fix_that_acts_on_it(tmp_path, fault, kind, fix):
    b, run = _run(tmp_path, fault)
    _, truth = _by_cause(b, run)
    roots = list(analysis_tables(run).roots)
    f = next(f for f in roots if f.kind == kind)
    assert f.cost_ns == pytest.approx(truth[{"item": "sync", "unfused": "optimizer", "data": "data"}[fault]] * 1e3,
                                      rel=0.02)
    analysed = set(idle_attribution(run.kernels, run.events, run.steps)["step"].to_list())
    assert set(f.evidence.by_step) <= analysed and len(f.evidence.by_step) >= 2
    recs = recommend(roots)
    mine = recs.filter(pl.col("finding_kind") == kind.value)
    assert mine["fix_id"][0] == fix and not mine["apply"].any()           # a code fix, never a setting
    lb = [g for g in roots if g.kind in (Kind.LAUNCH_BOUND, Kind.HOST_BOUND)]
    for g in lb:                    # launch overhead costs the compiled region's launches only
        assert g.cost_ns == pytest.approx(truth["launch"] * 1e3, rel=0.02)


def test_lines_come_from_the_collectors_scan_of_the_training_script():
    from workbench.collectors.source_sites import scan

    src = Path(__file__).resolve().parents[2] / "zoo" / "workbench_zoo" / "faults" / "_gpu_idle.py"
    text = src.read_text().splitlines()
    step_line = next(i for i, line in enumerate(text, 1) if "with collector.step():" in line)
    sc = scan(str(src), step_line)

    def line_of(mark: str) -> int:
        return next(i for i, line in enumerate(text, 1) if f"# fix here: {mark}" in line)

    assert site_of("sync", "aten::item", sc).line == line_of("item_sync")
    assert site_of("sync", "aten::_local_scalar_dense", sc).line == line_of("item_sync")
    assert site_of("sync", "aten::to", sc).line == line_of("dtoh_sync")
    opt = site_of("optimizer", "AdamW step (per-parameter)", sc)
    assert opt.line == line_of("unfused_optimizer") and "foreach=False" in opt.detail
    data = site_of("data", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", sc)
    assert data.line == line_of("cpu_dataload") and "num_workers=0" in data.detail
