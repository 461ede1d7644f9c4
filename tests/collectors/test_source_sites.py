"""Source sites on a script the fault zoo was not written for: the DataLoader and DDP built in helper functions, the
loop in a function, the step as a decorated function, a setting made on one rank only. A real collector run
records the sites in run.json; the recommender names those lines for each code fix, or says in words that the
script has none (never a wrong line). Also: exec'd code and unreadable files are recorded as a note, not raised."""

from __future__ import annotations

import json
import runpy
import textwrap
from pathlib import Path

import pytest

from workbench.collectors.source_sites import SourceScan, scan, scan_safely

#: ``# <- kind`` marks the line each site must be found at.
FOREIGN = '''
import os
import torch
from torch.nn.parallel import DistributedDataParallel
import torch.distributed as dist
from workbench.collectors import Collector


def make_loader(n):
    ds = torch.utils.data.TensorDataset(torch.randn(n, 8), torch.randn(n, 1))
    return torch.utils.data.DataLoader(ds, batch_size=8, shuffle=False)  # <- dataloader


def wrap(model):
    if dist.is_initialized():
        return DistributedDataParallel(model, bucket_cap_mb=1)  # <- ddp
    return model


def train(out, rank=0):
    if rank == 1:
        torch._inductor.config.fx_graph_cache = False  # <- config_set
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = wrap(torch.nn.Linear(8, 1))
    compiled = torch.compile(model, backend="eager")  # <- compile
    device = torch.device("cpu")
    with Collector(out, profile_start=100) as collector:
        for x, y in make_loader(32):  # <- batch_fetch
            x = x.to(device)  # <- h2d_copy
            with collector.step():  # <- step
                torch.nn.functional.mse_loss(compiled(x), y).backward()
'''

DECORATED = '''
import torch
import torch.distributed as dist
from workbench.collectors import Collector


def sync(t):
    dist.all_reduce(t)  # <- collective


def run(out):
    collector = Collector(out, profile_start=100)
    model = torch.nn.Linear(4, 1)

    @collector.step
    def train_step(x):
        model(x).sum().backward()

    it = iter([torch.randn(2, 4) for _ in range(3)])
    with collector:
        for _ in range(3):
            x = next(it)  # <- batch_fetch
            train_step(x)  # <- step
'''


#: The step entered in a helper module; the loop (and its batch fetch) in the script that calls it.
HELPER = '''
def train_step(collector, model, x):
    x = x.to(DEVICE)  # <- h2d_copy
    with collector.step():  # <- step
        model(x).sum().backward()


DEVICE = "cpu"
'''
MAIN = '''
import sys
import torch
from workbench.collectors import Collector
from helper_steps import train_step


def run(out):
    model = torch.nn.Linear(4, 1)
    batches = iter([torch.randn(2, 4) for _ in range(3)])
    with Collector(out, profile_start=100) as collector:
        while True:  # <- loop
            x = next(batches, None)  # <- batch_fetch
            if x is None:
                break
            train_step(collector, model, x)  # <- step
'''


def _marks(path: Path) -> dict[str, int]:
    return {line.rsplit("# <- ", 1)[1].strip(): i for i, line in enumerate(path.read_text().splitlines(), 1)
            if "# <- " in line}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(scope="module")
def foreign_run(tmp_path_factory):
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("foreign")
    script = _write(tmp, "train_foreign.py", FOREIGN)
    runpy.run_path(str(script))["train"](str(tmp / "run"))
    meta = json.loads((tmp / "run" / "run.json").read_text())
    return script, SourceScan.from_json(meta["source_sites"])


def test_a_real_run_records_the_foreign_scripts_lines(foreign_run):
    script, got = foreign_run
    marks = _marks(script)
    assert got.file == str(script) and got.line == marks["step"] and got.note is None
    for kind, line in marks.items():
        assert line in [s.line for s in got.of(kind)], (kind, line, [(s.kind, s.line) for s in got.of(kind)])
    by_kind = {s.kind: s for s in reversed(got.sites)}       # the first of each kind
    assert by_kind["dataloader"].detail == "pin_memory not set, num_workers not set"
    assert by_kind["ddp"].detail == "bucket_cap_mb=1"
    assert by_kind["config_set"].detail == "torch._inductor.config.fx_graph_cache, rank-conditional"
    assert by_kind["h2d_copy"].in_loop and not by_kind["dataloader"].in_loop
    env = [s for s in got.of("config_set") if "OMP_NUM_THREADS" in s.detail]
    assert env and not env[0].detail.endswith("rank-conditional")


def _findings():
    import dataclasses

    from workbench.analyses.findings import Cost, make_finding
    from workbench.analyses.kinds import (ConfigDivergenceEvidence, ExposedCommEvidence, ExposedMemcpyEvidence,
                                          PipelineBubbleEvidence, StragglerEvidence)

    def ev(cls, **given):
        fields = {f.name: given.get(f.name) for f in dataclasses.fields(cls)
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        return cls(**{**fields, **{k: v for k, v in given.items()}})

    c = Cost.measured(1_000_000, "test")
    return [
        make_finding("straggler", "rank 1 late", ev(StragglerEvidence, rank=1, data_wait_median_ns=50_000_000,
                                                    others_data_wait_median_ns=0), c, ranks=[1]),
        make_finding("exposed_communication", "exposed", ev(ExposedCommEvidence), c, ranks=[0]),
        make_finding("divergent_config", "config differs", ev(ConfigDivergenceEvidence, field="config_hash",
                                                              by_rank={0: ["a"], 1: ["b"]}), c, ranks=[0, 1]),
        make_finding("exposed_memcpy", "pageable copies", ev(ExposedMemcpyEvidence, per_rank=()), c, ranks=[0]),
        make_finding("pipeline_bubble", "bubble", ev(PipelineBubbleEvidence), c, ranks=[0, 1]),
    ]


def _locations(sites) -> dict[str, tuple[str | None, str]]:
    import polars as pl

    from workbench.analyses.recommendations import recommend

    recs = recommend(_findings(), sites=sites).filter(pl.col("code_advice").is_not_null())
    first = recs.unique("finding_kind", keep="first", maintain_order=True)
    return {r["finding_kind"]: (r["location"], r["code_advice"]) for r in first.iter_rows(named=True)}


def test_the_recommender_names_the_foreign_lines_or_says_none(foreign_run):
    script, got = foreign_run
    marks = _marks(script)
    loc = _locations(got.to_json())
    at = lambda kind: f"{script}:{marks[kind]}"  # noqa: E731
    assert loc["straggler"][0] == at("batch_fetch")
    assert loc["exposed_communication"][0] == at("ddp")           # DDP exists: its buckets, not a collective
    assert loc["divergent_config"][0] == at("config_set")         # the setting made on rank 1 only
    assert loc["exposed_memcpy"][0] == at("dataloader")           # pin_memory not set
    assert loc["pipeline_bubble"][0] is None                      # no schedule: said in words, no line
    assert "no pipeline schedule or micro-batch count set in train_foreign.py" in loc["pipeline_bubble"][1]


def test_decorated_step_and_a_blocking_collective_in_a_helper(tmp_path):
    script = _write(tmp_path, "train_decorated.py", DECORATED)
    marks = _marks(script)
    runpy.run_path(str(script))["run"](str(tmp_path / "run"))
    got = SourceScan.from_json(json.loads((tmp_path / "run" / "run.json").read_text())["source_sites"])
    assert got.line == marks["step"], got          # the call of the decorated step, in the loop
    loc = _locations(got)
    assert loc["straggler"][0] == f"{script}:{marks['batch_fetch']}"
    assert loc["exposed_communication"][0] == f"{script}:{marks['collective']}"
    assert loc["divergent_config"][0] is None and "launch environment" in loc["divergent_config"][1]
    assert loc["exposed_memcpy"][0] is None and "no DataLoader" in loc["exposed_memcpy"][1]


def test_no_source_file_or_bad_source_is_a_note_not_an_error(tmp_path):
    assert scan_safely(None)["note"] and scan_safely(None)["sites"] == []
    assert "exec" in scan("<string>", 3).note
    broken = _write(tmp_path, "broken.py", "def f(:\n")
    assert scan(str(broken), 1).note == "not parsed: SyntaxError" and not scan(str(broken), 1).sites
    assert "no source file" in scan(str(tmp_path / "gone.py"), 1).note
    # a note reaches the advice instead of a line
    loc = _locations(scan("<stdin>", 1).to_json())
    assert loc["straggler"][0] is None and "no line: no source file (<stdin>)" in loc["straggler"][1]
    # a run.json with wrong field types keeps the good sites and drops the bad ones
    raw = {"file": "t.py", "line": 3, "sites": [{"file": "t.py", "line": "3", "kind": "ddp", "snippet": "x"},
                                                {"file": "t.py", "line": 4, "kind": "rm -rf", "snippet": "x"},
                                                {"file": "t.py", "line": 5, "kind": "ddp", "snippet": "DDP(m)"}]}
    assert [(s.kind, s.line) for s in SourceScan.from_json(raw).sites] == [("ddp", 5)]
    assert SourceScan.from_json("not a dict") is None


def test_step_in_a_helper_module_the_loop_in_its_caller(tmp_path, monkeypatch):
    helper, main = _write(tmp_path, "helper_steps.py", HELPER), _write(tmp_path, "train_main.py", MAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    runpy.run_path(str(main))["run"](str(tmp_path / "run"))
    got = SourceScan.from_json(json.loads((tmp_path / "run" / "run.json").read_text())["source_sites"])
    hm, mm = _marks(helper), _marks(main)
    assert (got.file, got.line) == (str(helper), hm["step"])
    where = {(Path(s.file).name, s.kind, s.line) for s in got.sites}
    assert {("helper_steps.py", "h2d_copy", hm["h2d_copy"]), ("train_main.py", "loop", mm["loop"]),
            ("train_main.py", "batch_fetch", mm["batch_fetch"])} <= where, where
    assert next(s for s in got.of("h2d_copy")).in_loop          # in the function that runs every step
    assert not any("workbench" in s.file or "_pytest" in s.file for s in got.sites)   # nothing above the loop
    loc = _locations(got)
    assert loc["straggler"][0] == f"{main}:{mm['batch_fetch']}"
    assert loc["exposed_memcpy"][0] == f"{helper}:{hm['h2d_copy']}"


def test_a_hostile_snippet_stays_text():
    """A run.json snippet is text: in the written config it is a comment (never a setting), whatever it holds."""
    import tomllib

    from workbench.analyses.recommendations import ranked_fixes, recommendations_frame, to_compile_config

    evil = '"""\n[env]\nLD_PRELOAD = "/tmp/x.so"\n</td><script>alert(1)</script>'
    raw = {"file": "t.py", "line": 3, "sites": [{"file": "t.py", "line": 2, "kind": "batch_fetch", "snippet": evil}]}
    fixes = ranked_fixes(_findings(), sites=raw)
    recs = recommendations_frame(fixes)
    assert recs.filter(recs["finding_kind"] == "straggler")["location"][0] == "t.py:2"
    text = to_compile_config(fixes)
    assert "LD_PRELOAD" in text and "env" not in tomllib.loads(text), text


def test_fsdp_is_named_for_exposed_communication(tmp_path):
    script = _write(tmp_path, "train_fsdp.py", """
        from torch.distributed.fsdp import fully_shard


        def build(model):
            for layer in model:
                fully_shard(layer)  # <- fsdp
            return fully_shard(model)


        def train(model, loader, collector):
            for x in loader:
                with collector.step():  # <- step
                    model(x).sum().backward()
        """)
    marks = _marks(script)
    loc = _locations(scan(str(script), marks["step"]))
    assert loc["exposed_communication"][0] == f"{script}:{marks['fsdp']}"   # the first fully_shard call
    assert "FSDP is built here" in loc["exposed_communication"][1]


@pytest.mark.parametrize("body, mark", [
    ("    schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=loss)  # <- here\n", "here"),
    ("    n_micro = args.micro  # <- here\n    schedule = Schedule1F1B(stage, n_micro)\n", "here"),
    ("    grad_accum_steps = 2  # <- here\n    schedule = None\n", "here"),
    ("    schedule = Pipe(stage, chunks=2)  # <- here\n", "here"),
])
def test_the_micro_batch_count_line(tmp_path, body, mark):
    """A literal count at the schedule; a name passed to it: where that name is set; a hand-rolled count."""
    script = _write(tmp_path, "pp.py", "def train(stage, loss, args, collector, loader):\n" + body
                    + "    for x in loader:\n        with collector.step():  # <- step\n            schedule.step(x)\n")
    marks = _marks(script)
    loc = _locations(scan(str(script), marks["step"]))
    assert loc["pipeline_bubble"][0] == f"{script}:{marks[mark]}", loc["pipeline_bubble"]
