"""Applied means took effect: real torch 2.13 CPU runs of the issue's case (``torch.compile(model,
dynamic=False)`` called before the collector, 10 lengths on dim 1), with a compile config applied by the collector.

The collector records ``took_effect`` beside ``applied`` after the first compile; ``analyze`` reports a setting
applied without effect as ``config_no_effect``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.analyses.kinds import Kind

HERE = Path(__file__).resolve().parent


def _run(tmp: Path, name: str, toml: str) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(toml)
    out = tmp / name
    subprocess.run([sys.executable, str(HERE / "fix_effect_worker.py"), "--out", str(out), "--compile-config",
                    str(cfg)], check=True, timeout=900, capture_output=True)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("effect")
    return {"acts": _run(tmp, "acts", "[compiler]\ndynamic_sources = \"L['x']:1\"\n"),
            "no_effect": _run(tmp, "no_effect", "[compiler]\ndynamic_sources = \"L['y']:1\"\n"
                                                "[dynamo]\nspecialize_float = false\nrecompile_limit = 16\n")}


def _records(run: Path) -> dict[str, dict]:
    return {r["setting"]: r for r in json.loads((run / "run.json").read_text())["compile_config_applied"]}


def test_dynamic_sources_took_effect_on_a_model_compiled_before_the_collector(runs) -> None:
    import workbench

    rec = _records(runs["acts"])["compiler.dynamic_sources"]
    assert rec["applied"] is True and rec["took_effect"] is True and "L['x'].size()[1]" in rec["effect"]
    run = workbench.open(runs["acts"])
    assert run.compiles.height == 1     # one dynamic graph for the 10 lengths: it acted


def test_applied_without_effect_is_recorded_and_reported(runs) -> None:
    import workbench
    from workbench.analyses.summary import analyze

    recs = _records(runs["no_effect"])
    ds, sf, rl = recs["compiler.dynamic_sources"], recs["dynamo.specialize_float"], recs["dynamo.recompile_limit"]
    assert ds["applied"] is True and ds["took_effect"] is False and "no symbol for L['y'] dim 1" in ds["effect"]
    assert sf["applied"] is True and sf["took_effect"] is False and "torch 2.13" in sf["effect"]
    assert rl["applied"] is True and rl["took_effect"] is True
    found = [f for f in analyze(workbench.open(runs["no_effect"]))["findings"] if f["kind"] == Kind.CONFIG_NO_EFFECT]
    assert sorted(f["evidence"]["setting"] for f in found) == ["compiler.dynamic_sources", "dynamo.specialize_float"]
