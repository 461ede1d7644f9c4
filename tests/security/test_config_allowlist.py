"""The allowlist itself: every key it admits exists in the installed torch with the type its rule says, the docs
show exactly the table, no string rule admits a flag, a path or ``module:attr``, and every config the recommenders
write passes it (so no fix is lost)."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import pytest
from typer.testing import CliRunner

from workbench import config_policy as policy
from workbench.compile_config import CONFIG_MODULES, STANCE_KEYS, load_compile_config, writable_problem

REPO = Path(__file__).resolve().parents[2]


def _torch_types(vtype) -> set:
    """The plain values/types a torch config type admits: {bool, int, str, 'lit', ...}."""
    origin = get_origin(vtype)
    if origin is Literal:
        return set(get_args(vtype))
    if origin is Union or type(vtype).__name__ == "UnionType":
        return set().union(*(_torch_types(a) for a in get_args(vtype)))
    return {vtype}


def test_every_allowed_torch_key_exists_with_the_type_its_rule_says():
    pytest.importorskip("torch")
    for section, modname in CONFIG_MODULES.items():
        cfg = importlib.import_module(modname)._config
        for key, rule in policy.ALLOWED[section].items():
            assert key in cfg, f"[{section}] {key} is not a key of {modname}"
            admitted = _torch_types(cfg[key].value_type)
            if rule.kind == "bool":
                assert bool in admitted, (section, key, admitted)
            elif rule.kind == "int":
                assert int in admitted, (section, key, admitted)
            elif rule.kind == "text":
                assert str in admitted, (section, key, admitted)
            elif rule.kind == "choice":
                for c in rule.choices:
                    assert c in admitted or type(c) in admitted, (section, key, c, admitted)
            elif rule.kind == "names":
                assert get_origin(cfg[key].value_type) in (set, list), (section, key)


def test_compile_and_stance_keys_are_torchs():
    torch = pytest.importorskip("torch")
    params = set(inspect.signature(torch.compile).parameters)
    assert set(policy.ALLOWED["compile"]) <= params
    assert set(policy.ALLOWED["stance"]) <= set(STANCE_KEYS)
    import torch._dynamo

    for backend in policy.BACKENDS:                # torch's own, registered in every build
        assert backend in set(torch._dynamo.list_backends(exclude_tags=())) | {"inductor"}, backend


def test_recommender_keys_are_part_of_the_allowlist():
    for section, keys in policy.RECOMMENDER_KEYS.items():
        assert section in policy.ALLOWED or section == "mark_dynamic"
        assert keys == {"*"} or keys <= set(policy.ALLOWED[section]), (section, keys - set(policy.ALLOWED[section]))


def test_docs_show_exactly_the_table():
    docs = (REPO / "docs/compile-config.md").read_text()
    assert policy.markdown_table() in docs


#: Strings that must never pass a text rule: flags, paths, module:attr, shell, line breaks, other sources.
HOSTILE = ["-B/tmp/x", "native -B/tmp/", "/tmp/x", "../x", "a/../../x", "os:system", "evilmod.backend",
           "$(touch /tmp/x)", "x;id", "x\ny", "L['x']\n", "L['x'] ", "~/x", "C:\\x", "", "x" * 2000]


@pytest.mark.parametrize("section, key", [(s, k) for s, keys in policy.ALLOWED.items() for k, r in keys.items()
                                          if r.kind == "text"])
def test_text_rules_take_their_example_and_no_flag_path_or_code(section, key):
    rule = policy.rule(section, key)
    assert rule.problem(rule.example) is None
    for value in HOSTILE:
        assert rule.problem(value) is not None, (section, key, value)


@pytest.mark.parametrize("section, key, value", [
    ("dynamo", "recompile_limit", -1), ("dynamo", "recompile_limit", 0), ("dynamo", "recompile_limit", True),
    ("dynamo", "recompile_limit", 1 << 40), ("dynamo", "automatic_dynamic_shapes", 1),
    ("dynamo", "optimize_ddp", "evil"), ("dynamo", "optimize_ddp", 1),
    ("dynamo", "reorderable_logging_functions", "print"), ("dynamo", "reorderable_logging_functions", ["exec"]),
    ("dynamo", "reorderable_logging_functions", ["os.system"]), ("inductor", "triton.max_tiles", 4),
    ("inductor", "cpp.threads", 0), ("compile", "backend", "tvm"), ("compile", "mode", "fast"),
    ("stance", "force_backend", "x.y"), ("env", "CUBLAS_WORKSPACE_CONFIG", ":1:1"), ("env", "NCCL_DEBUG", "info"),
])
def test_values_outside_a_rule_are_refused(section, key, value):
    assert policy.key_problem(section, key, value) is not None


@pytest.mark.parametrize("section, key", [
    ("dynamo", "debug_inductor_config_override"), ("inductor", "cpp.cxx"), ("inductor", "cpp.march"),
    ("inductor", "cuda.compile_opt_level"), ("inductor", "fx_graph_remote_cache"), ("compiler", "job_id"),
    ("inductor", "torchinductor_worker_logpath"), ("env", "OMP_TOOL_LIBRARIES"), ("env", "TRITON_CACHE_MANAGER"),
    ("env", "TORCH_LOGS_OUT"), ("env", "TORCH_TRACE"), ("env", "TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS"),
    ("env", "TORCHINDUCTOR_CACHE_DIR"), ("env", "TORCHINDUCTOR_REDIS_HOST"), ("compile", "shapes_spec"),
])
def test_the_doors_are_not_in_the_allowlist(section, key):
    assert policy.rule(section, key) is None


#: Every config a fixer in analyses/recommendations.py can write, with representative values.
FIX_CONFIGS = [
    {"compiler": {"dynamic_sources": "L['x']:0"}}, {"compiler": {"dynamic_sources": "L['args'][0]:0"}},
    {"compiler": {"dynamic_sources": "L['batch']['ids']:1"}}, {"compiler": {"dynamic_sources": "L['n']"}},
    {"compiler": {"dynamic_sources": "L['self'].weight:0"}},
    {"mark_dynamic": {"x": {"dim": 0}}}, {"mark_dynamic": {"0": {"dim": 1}}},
    {"mark_dynamic": {"batch.ids": {"dim": 1}}},
    {"stance": {"stance": "eager_on_recompile", "after_step": 1}}, {"distributed": {"guard_collectives": True}},
    {"compile": {"dynamic": True}}, {"dynamo": {"specialize_float": False}}, {"dynamo": {"recompile_limit": 16}},
    {"dynamo": {"accumulated_recompile_limit": 512}}, {"dynamo": {"fail_on_recompile_limit_hit": True}},
    {"dynamo": {"reorderable_logging_functions": ["print"]}}, {"dynamo": {"capture_scalar_outputs": True}},
    {"dynamo": {"capture_dynamic_output_shape_ops": True}}, {"compile": {"fullgraph": False}},
    {"cache": {"load": "compile_cache.bin", "save": "compile_cache.bin", "save_after_step": 3},
     "inductor": {"fx_graph_cache": True}},
    {"inductor": {"reorder_for_compute_comm_overlap": False}}, {"compile": {"mode": "reduce-overhead"}},
]


@pytest.mark.parametrize("config", FIX_CONFIGS, ids=lambda c: json.dumps(c)[:60])
def test_every_fix_config_can_be_written(config):
    assert writable_problem(config) is None


def test_the_fix_configs_above_are_every_config_site_of_the_recommenders():
    """Guards the list above: a new ``config={...}`` in a fixer must be added to FIX_CONFIGS."""
    text = (REPO / "analyses/recommendations.py").read_text()
    keys = set(re.findall(r'config=\{"(\w+)": \{"?(\w+)', text))
    listed = {(s, k) for c in FIX_CONFIGS for s, b in c.items() for k in b}
    missing = {(s, k) for s, k in keys if not any(ls == s and (lk == k or s == "mark_dynamic" or k == "key")
                                                 for ls, lk in listed)}
    assert not missing, missing


def _runs(data_dir: Path) -> list[Path]:
    logs = data_dir / "compile_logs/torch2.13-cpu"
    single = sorted(p for p in (logs / "single-process").iterdir() if p.is_dir())   # one job each
    return [p for p in sorted(logs.iterdir()) if p.is_dir() and p.name != "single-process"] + single + \
        [p for p in sorted((REPO / "sample_traces").iterdir()) if p.is_dir()]


def test_workbench_recommend_output_passes_the_policy(data_dir, tmp_path):
    """``workbench recommend -o`` on every bundled run writes a config that loads without any opt-in, with every
    applied fix written (none refused) and every alternative's config writable too."""
    from workbench.cli import app as cli

    written = 0
    for run in _runs(data_dir):
        out = tmp_path / f"{run.name}.toml"
        res = CliRunner().invoke(cli, ["recommend", str(run), "-o", str(out), "--json"])
        assert res.exit_code == 0, (run.name, res.output[-2000:])
        if not out.exists():
            continue
        text = out.read_text()
        assert "Refused by the config allowlist" not in text, (run.name, text)
        load_compile_config(out)
        written += bool(tomllib.loads(text))
        for cfg in re.findall(r"^#\s+config (\{.*\})$", text, re.M):   # the alternatives, as comments
            try:
                data = json.loads(cfg)
            except ValueError:
                continue                                                # cut at 200 characters
            assert writable_problem(data) is None, (run.name, data)
    assert written >= 3


def test_the_apps_apply_writes_a_config_that_passes(repo_dir, tmp_path):
    pytest.importorskip("dash")
    from workbench.app import page_recommendations
    from workbench.app.store import RunStore

    for name in ("cpu-recompile-before", "cpu-gloo-4rank"):
        run_dir = tmp_path / name
        shutil.copytree(repo_dir / "sample_traces" / name, run_dir)
        store = RunStore([run_dir])
        got = page_recommendations.apply(store, store.entries[0].id)
        if got is None:
            continue
        path, _ = got
        assert "Refused by the config allowlist" not in path.read_text()
        load_compile_config(path)
