"""Typed findings → ranked fixes (best first) → compile-config TOML that loads and validates against the installed
torch."""

from __future__ import annotations

import tomllib

import polars as pl
import pytest

from workbench.analyses.recommendations import (
    RECOMMENDATIONS, input_arg, ranked_fixes, recommend, recommendations_frame, to_compile_config,
)
from workbench.analyses.recompiles import recompile_finding_list
from workbench.compile_config import CompileConfig
from workbench.compile_log import read_compile_logs

SP = "torch2.13-cpu/single-process"

# folder -> (a setting the TOML applies as (section, key, value), or None; fix ids expected among the fixes)
EXPECTED = {
    "torch2.13-cpu/2rank-gloo-divergent-shape": (("compiler", "dynamic_sources", "L['args'][0]:0"),
                                                 {"mark_dynamic", "guard_collectives", "eager_on_recompile",
                                                  "same_shapes"}),
    f"{SP}/shape": (("compiler", "dynamic_sources", "L['x']:0"), {"mark_dynamic", "dynamic_true", "same_shapes"}),
    f"{SP}/module": (("compiler", "dynamic_sources", "L['args'][0]:0"), {"mark_dynamic"}),
    f"{SP}/int_arg": (("compiler", "dynamic_sources", "L['n']"), {"int_as_tensor"}),
    # the limit was hit by dtype changes: the cast is the fix; a raised limit is only an (unapplied) alternative
    f"{SP}/limit": (None, {"cast_at_boundary", "raise_recompile_limit", "fail_on_limit"}),
    f"{SP}/graph_break": (("dynamo", "reorderable_logging_functions", ["print"]), {"branchless", "guard_print"}),
    f"{SP}/fullgraph_fail": (("compile", "fullgraph", False), {"branchless"}),
    f"{SP}/dtype": (None, {"cast_at_boundary"}),
    f"{SP}/global": (None, {"global_as_argument"}),
    f"{SP}/requires_grad": (None, {"consistent_requires_grad"}),
    f"{SP}/grad_mode": (None, {"one_mode_per_function"}),
    "torch2.13-cpu/2rank-gloo-divergent-shape-guard-collectives": (("compiler", "dynamic_sources",
                                                                     "L['args'][0]:0"), {"reuse_backend"}),
}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_recommendations_for_sample_logs(compile_logs, folder):
    compiles, _ = read_compile_logs([compile_logs / folder])
    findings = recompile_finding_list(compiles)
    fixes = ranked_fixes(findings)
    recs = recommendations_frame(fixes)
    assert recs.schema == pl.Schema(RECOMMENDATIONS)
    assert recs["rank"].to_list() == list(range(1, recs.height + 1))
    setting, fix_ids = EXPECTED[folder]
    assert fix_ids <= set(recs["fix_id"]), recs["fix_id"].to_list()
    text = to_compile_config(fixes)
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
    recs = recommend(recompile_finding_list(compiles))
    first = recs.row(0, named=True)
    assert first["finding_kind"] == "divergent_recompile" and first["fix_id"] == "dynamic_sources" and first["apply"]
    assert first["gain"] == 1.0 and "torch.compile" in first["why"]
    assert recs.filter(pl.col("apply")).height == 1
    # best fix first: one dynamic graph, then drop_last/padding, and guard collectives after both
    ids = recs["fix_id"].to_list()
    assert ids.index("same_shapes") < ids.index("guard_collectives")


def test_recompile_limit_prefers_one_dynamic_graph(compile_logs):
    """A limit hit by shape changes: the fix is one dynamic graph, never a raised recompile_limit."""
    from workbench.analyses.findings import Cost, make_finding
    from workbench.analyses.kinds import CompileGroupEvidence

    ev = CompileGroupEvidence(cause="limit", cause_detail="recompile_limit",
                              sources=("recompile_limit=8 hit: frame now runs eager; last guard failure: shape "
                                       "L['x'] dim 1: 22 -> 24",), co_name="forward", co_filename="/u/train.py",
                              co_firstlineno=10, compile_ids=("0/8",), count=1, compile_ns=10)
    f = make_finding("recompile_limit", "limit", ev, Cost.measured(10, "x"), ranks=[0], steps=[8])
    recs = recommend([f])
    applied = recs.filter(pl.col("apply"))
    assert applied["fix_id"].to_list() == ["dynamic_sources"]
    assert applied["config"].to_list() == ['{"compiler": {"dynamic_sources": "L[\'x\']:1"}}']
    assert recs["fix_id"].to_list().index("raise_recompile_limit") > 0


def test_the_compile_config_is_written_from_typed_fixes_only(compile_logs):
    """The RECOMMENDATIONS frame is a view: the config is written from the typed fixes, and a frame is refused."""
    compiles, _ = read_compile_logs([compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape-guard-collectives"])
    fixes = ranked_fixes(recompile_finding_list(compiles))
    assert tomllib.loads(to_compile_config(fixes))["compiler"]["dynamic_sources"] == "L['args'][0]:0"
    with pytest.raises(TypeError, match="not the RECOMMENDATIONS frame"):
        to_compile_config(recommendations_frame(fixes))


def test_empty_and_other_findings():
    from workbench.analyses.findings import Cost, make_finding
    from workbench.analyses.kinds import StragglerEvidence

    assert recommend([]).height == 0
    ev = StragglerEvidence(rank=2, signal="step start", events=8, held_count=7, held_back_ns=5, held_share_pct=80.0,
                           typical_share_pct=10.0, first_step=1, trend=None, held_steps=(1, 2),
                           data_wait_median_ns=60_000_000, others_data_wait_median_ns=100_000)
    recs = recommend([make_finding("straggler", "Rank 2: data loading wait", ev, Cost.measured(5, "x"), ranks=[2])])
    assert recs["fix_id"].to_list() == ["faster_data_loading"]
    assert recs["apply"].to_list() == [False]


@pytest.mark.parametrize("src,arg", [("L['x'] dim 0: 4 -> 8", "x"), ("L['args'][0] dim 0", "0"),
                                     ("L['kwargs']['ids']", "ids"), ("L['batch']['ids']", "batch.ids"),
                                     ("L['self'].w", None), (None, None)])
def test_input_arg(src, arg):
    assert input_arg(src) == arg
