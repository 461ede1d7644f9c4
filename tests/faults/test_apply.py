"""The compile config applies through the plain surface (``Collector(path, compile_config=...)``, ``with
collector:``, ``with collector.step():``, the user's own ``torch.compile``), every setting is recorded as applied or
not (with the reason) in run.json, nothing raises into training, and ``workbench analyze`` says what was not
applied. Single process, a counting backend: fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from workbench.collectors import Collector  # noqa: E402


class Counter:
    """A torch.compile backend that counts compiles and runs the graph as is."""

    def __init__(self) -> None:
        self.frames = 0

    def __call__(self, gm, example_inputs):
        self.frames += 1
        return gm.forward


def _train(run: Path, config_text: str, *, compile_before: bool = False, dynamic: bool | None = False,
           sizes=(3, 4, 5, 6, 7)) -> tuple[int, dict, Collector]:
    cfg = run.parent / f"{run.name}.toml"
    cfg.write_text(config_text)
    counter = Counter()
    model = torch.nn.Linear(8, 2)
    compiled = torch.compile(model, backend=counter, dynamic=dynamic) if compile_before else None
    collector = Collector(run, compile_config=str(cfg), profile_repeat=0)
    if compiled is None:
        compiled = torch.compile(model, backend=counter, dynamic=dynamic)   # the user's own call
    with collector:
        for n in sizes:
            with collector.step():
                compiled(torch.randn(n, 8)).sum().backward()
    torch._dynamo.reset()
    meta = json.loads((run / "run.json").read_text())
    return counter.frames, {r["setting"]: r for r in meta["compile_config_applied"]}, collector


def test_compile_kwargs_override_the_users_dynamic_false(tmp_path):
    frames, rec, _ = _train(tmp_path / "run", "[compile]\ndynamic = true\n")
    assert frames == 1                                   # one dynamic graph for 5 sizes (dynamic=False alone: 5)
    assert rec["compile.dynamic"]["applied"] and "dynamic=False" in rec["compile.dynamic"]["how"]


def test_mark_dynamic_without_instrument(tmp_path):
    frames, rec, _ = _train(tmp_path / "run", "[mark_dynamic]\ninput = 0\n")
    assert frames == 1
    assert rec["mark_dynamic.input:0"]["applied"]


def test_dynamic_sources_applies_to_a_model_compiled_before_the_collector(tmp_path):
    frames, rec, _ = _train(tmp_path / "run", "[compiler]\ndynamic_sources = \"L['args'][0]:0\"\n",
                            compile_before=True)
    assert frames == 1
    assert rec["compiler.dynamic_sources"]["applied"]


def test_compile_section_not_applied_when_compiled_before_the_collector_is_recorded_and_analysed(tmp_path):
    frames, rec, _ = _train(tmp_path / "run", "[compile]\ndynamic = true\n", compile_before=True)
    assert frames == 5                                   # nothing changed ...
    r = rec["compile.dynamic"]
    assert r["applied"] is False and "torch.compile was not called" in r["reason"]   # ... and it says so
    import workbench
    from workbench.analyses.summary import analysis_tables

    roots = analysis_tables(workbench.open(tmp_path / "run")).roots
    na = [f for f in roots if f.kind == "config_not_applied"]
    assert na and na[0].message.startswith("config compile.dynamic not applied"), [f.kind for f in roots]
    assert na[0].evidence.setting == "compile.dynamic"


def test_bad_mark_dynamic_range_is_refused_not_raised(tmp_path):
    frames, rec, collector = _train(tmp_path / "run", "[mark_dynamic]\ninput = { dim = 0, min = 5, max = 64 }\n")
    r = rec["mark_dynamic.input:0"]
    assert r["applied"] is False and "outside min=5, max=64" in r["reason"]
    assert frames >= 2 and collector.steps_done == 5      # training ran every step


def test_bad_options_and_backend_are_refused_at_compile_time(tmp_path):
    """A config that skipped validation (validate=False) still never raises from torch.compile."""
    from workbench.collectors.apply import ConfigApplier
    from workbench.compile_config import CompileConfig

    cfg = CompileConfig.from_dict({"compile": {"backend": "no_such_backend", "options": {"no_such_option": 1}}},
                                  validate=False, allow_unsafe=True)
    errors: list[str] = []
    applier = ConfigApplier(cfg, lambda c, e: errors.append(c))
    applier.install()
    try:
        counter = Counter()
        compiled = torch.compile(torch.nn.Linear(4, 2), backend=counter)
        compiled(torch.randn(2, 4))
    finally:
        applier.close(1)
        torch._dynamo.reset()
    rec = {r["setting"]: r for r in applier.report()}
    assert rec["compile.backend"]["applied"] is False and "not registered" in rec["compile.backend"]["reason"]
    assert rec["compile.options"]["applied"] is False and "no_such_option" in rec["compile.options"]["reason"]
    assert counter.frames == 1 and torch.compile is not applier._wrapper   # compiled as written; unwrapped
