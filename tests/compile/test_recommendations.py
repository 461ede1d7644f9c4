"""Findings → ranked fixes → compile-config TOML that loads and validates against the installed torch."""

from __future__ import annotations

import tomllib

import polars as pl
import pytest

from workbench import schema
from workbench.analyses.recommendations import RECOMMENDATIONS, input_arg, recommend, to_compile_config
from workbench.analyses.recompiles import recompile_findings
from workbench.compile_config import CompileConfig
from workbench.compile_log import read_compile_logs

SP = "torch2.13-cpu/single-process"

# folder -> (a setting the TOML applies as (section, key, value), or None; fix ids expected among the fixes)
EXPECTED = {
    "torch2.13-cpu/2rank-gloo-divergent-shape": (("mark_dynamic", "0", {"dim": 0}),
                                                 {"guard_collectives", "eager_on_recompile", "same_shapes"}),
    f"{SP}/shape": (("mark_dynamic", "x", {"dim": 0}), {"dynamic_true", "same_shapes"}),
    f"{SP}/module": (("mark_dynamic", "0", {"dim": 0}), {"dynamic_sources"}),
    f"{SP}/int_arg": (("compiler", "dynamic_sources", "L['n']"), {"int_as_tensor"}),
    f"{SP}/limit": (("dynamo", "recompile_limit", 16), {"cast_at_boundary", "fail_on_limit"}),
    f"{SP}/graph_break": (("dynamo", "reorderable_logging_functions", ["print"]), {"branchless", "guard_print"}),
    f"{SP}/fullgraph_fail": (("compile", "fullgraph", False), {"branchless"}),
    f"{SP}/dtype": (None, {"cast_at_boundary"}),
    f"{SP}/global": (None, {"global_as_argument"}),
    f"{SP}/requires_grad": (None, {"consistent_requires_grad"}),
    f"{SP}/grad_mode": (None, {"one_mode_per_function"}),
    "torch2.13-cpu/2rank-gloo-divergent-shape-guard-collectives": (("mark_dynamic", "0", {"dim": 0}),
                                                                    {"reuse_backend"}),
}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_recommendations_for_sample_logs(compile_logs, folder):
    compiles, _ = read_compile_logs([compile_logs / folder])
    findings = recompile_findings(compiles)
    recs = recommend(findings, compiles)
    assert recs.schema == pl.Schema(RECOMMENDATIONS)
    assert recs["rank"].to_list() == list(range(1, recs.height + 1))
    setting, fix_ids = EXPECTED[folder]
    assert fix_ids <= set(recs["fix_id"]), recs["fix_id"].to_list()
    text = to_compile_config(recs)
    data = tomllib.loads(text)
    cfg = CompileConfig.from_dict(data, source=folder)  # validates against the installed torch
    assert cfg.validated_against
    if setting is None:
        assert recs.filter(pl.col("apply")).height == 0
    else:
        sec, key, value = setting
        assert data[sec][key] == value, text
        # the comment above the setting names the finding it answers
        lines = text.splitlines()
        idx = next(i for i, line in enumerate(lines) if line.startswith(f"{key} =") or line.startswith(f'"{key}" ='))
        assert any(line.startswith("# answers ") for line in lines[max(0, idx - 3):idx])
    # code fixes never point into torch's own files
    assert not recs["location"].drop_nulls().str.contains("site-packages/torch").any()


def test_divergent_first_and_apply_once(compile_logs):
    compiles, _ = read_compile_logs([compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape"])
    recs = recommend(recompile_findings(compiles))
    first = recs.row(0, named=True)
    assert first["finding_kind"] == "divergent_recompile" and first["fix_id"] == "mark_dynamic" and first["apply"]
    assert recs.filter(pl.col("apply")).height == 1  # the same mark_dynamic for recompile_shape is not re-applied


def test_empty_and_other_findings():
    assert recommend(schema.empty(schema.FINDINGS)).height == 0
    f = schema.conform(pl.DataFrame([{"kind": "straggler", "severity": "high", "ranks": [2], "steps": [],
                                      "cost_ns": 5, "evidence": "{}", "message": "Rank 2: data loading wait",
                                      "source": "stragglers"}]), schema.FINDINGS)
    recs = recommend(f)
    assert recs["fix_id"].to_list() == ["faster_data_loading"]
    assert "[" not in to_compile_config(recs).split("# Alternatives")[0].replace("# ", "")


@pytest.mark.parametrize("src,arg", [("L['x'] dim 0: 4 -> 8", "x"), ("L['args'][0] dim 0", "0"),
                                     ("L['kwargs']['ids']", "ids"), ("L['batch']['ids']", "batch.ids"),
                                     ("L['self'].w", None), (None, None)])
def test_input_arg(src, arg):
    assert input_arg(src) == arg
