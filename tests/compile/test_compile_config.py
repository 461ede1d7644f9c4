from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import pytest

from workbench.collectors.apply import ConfigApplier
from workbench.compile_config import NO_CONFIG_HASH, CompileConfig, MarkDynamic, config_hash, dump_compile_config, \
    load_compile_config
from workbench.errors import InputError

FULL = """
[dynamo]
recompile_limit = 16
automatic_dynamic_shapes = true
reorderable_logging_functions = ["print"]
[inductor]
fx_graph_cache = true
triton.cudagraphs = false
[compiler]
dynamic_sources = "L['x']"
[compile]
dynamic = true
backend = "aot_eager"
options = { "triton.cudagraphs" = false }
[stance]
stance = "eager_on_recompile"
after_step = 2
[env]
TORCH_COMPILE_DYNAMIC_SOURCES = "L['x']"
TORCHDYNAMO_VERBOSE = true
[mark_dynamic]
x = { dim = 0, min = 2, max = 64 }
"1" = [0, 1]
[distributed]
guard_collectives = true
barrier_after_step = 1
[cache]
save = "cache.bin"
save_after_step = 3
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "fixes.toml"
    p.write_text(text)
    return p


def test_load_full(tmp_path):
    cfg = load_compile_config(write(tmp_path, FULL))
    assert cfg.dynamo["recompile_limit"] == 16
    assert cfg.inductor == {"fx_graph_cache": True, "triton.cudagraphs": False}
    assert cfg.compile_kwargs == {"dynamic": True, "backend": "aot_eager", "options": {"triton.cudagraphs": False}}
    assert cfg.env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']", "TORCHDYNAMO_VERBOSE": "1"}
    assert cfg.mark_dynamic == [MarkDynamic("x", 0, 2, 64), MarkDynamic("1", 0), MarkDynamic("1", 1)]
    assert cfg.validated_against is not None
    assert cfg.dynamic_sources() == "L['x']"


def test_roundtrip_dump(tmp_path):
    cfg = load_compile_config(write(tmp_path, FULL))
    text = dump_compile_config(cfg.to_dict(), {"dynamo.recompile_limit": "answers finding 3\nsecond line",
                                                "stance": "after warm-up"}, header="made by a test")
    assert "# answers finding 3\n# second line\nrecompile_limit = 16" in text
    assert "# after warm-up\n[stance]" in text
    again = CompileConfig.from_dict(tomllib.loads(text), source="dumped")
    assert again.to_dict() == cfg.to_dict()
    assert again.config_hash() == cfg.config_hash()


def test_config_hash_tells_configs_apart_and_no_config_is_one_value():
    """Issue 32: the diff showed one hash for no config and for a ``mark_dynamic`` config."""
    configs = [{"mark_dynamic": {"0": {"dim": 0}}}, {"mark_dynamic": {"0": {"dim": 1}}},
               {"mark_dynamic": {"x": {"dim": 0}}}, {"compile": {"dynamic": True}}, {"compile": {"dynamic": False}},
               {"dynamo": {"recompile_limit": 16}}, {"dynamo": {"recompile_limit": "16"}},
               {"env": {"TORCH_LOGS": "recompiles"}}, {"dynamo": {"recompile_limit": 16}, "compile": {"dynamic": True}}]
    hashes = [config_hash(c) for c in configs]
    assert len(set(hashes)) == len(configs) and NO_CONFIG_HASH not in hashes
    assert config_hash(None) == config_hash({}) == config_hash({"dynamo": {}, "env": {}}) == NO_CONFIG_HASH
    assert CompileConfig.from_dict({}, validate=False).config_hash() == NO_CONFIG_HASH
    both = {"dynamo": {"recompile_limit": 16, "cache_size_limit": 8}, "compile": {"dynamic": True}}
    reordered = {"compile": {"dynamic": True}, "dynamo": {"cache_size_limit": 8, "recompile_limit": 16}}
    assert config_hash(both) == config_hash(reordered)
    cfg = CompileConfig.from_dict({"mark_dynamic": {"0": {"dim": 0}}}, validate=False)
    assert cfg.config_hash() == config_hash(cfg.to_dict()) == hashes[0]   # what run.json stores hashes the same


@pytest.mark.parametrize("text,needle", [
    ("[dynamo]\nrecompile_limt = 3\n", "did you mean 'recompile_limit'"),
    ("[inductor]\nfx_graph_cach = true\n", "did you mean 'fx_graph_cache'"),
    ("[compiler]\ndynamic_source = 'x'\n", "did you mean 'dynamic_sources'"),
    ("[compile]\nfulgraph = true\n", "did you mean 'fullgraph'"),
    ("[compile]\noptions = { max_autotun = true }\n", "did you mean 'max_autotune'"),
    ("[dynamoo]\n", "did you mean 'dynamo'"),
    ("[stance]\nstance = 'eager_on_recompil'\n", "did you mean 'eager_on_recompile'"),
    ("[stance]\nafter = 3\nstance = 'default'\n", "did you mean 'after_step'"),
    ("[distributed]\nguard_collective = true\n", "did you mean 'guard_collectives'"),
    ("[mark_dynamic]\nx = { dm = 0 }\n", "did you mean 'dim'"),
    ("[dynamo]\nrecompile_limit = 'many'\n", "must be int"),
    ("[compile]\nmode = 'fast'\n", "is not one of"),
    ("[dynamo\n", "not valid TOML"),
])
def test_errors_name_file_key_and_closest(tmp_path, text, needle):
    p = write(tmp_path, text)
    with pytest.raises(InputError) as exc:
        load_compile_config(p)
    assert str(p) in str(exc.value)
    assert needle in str(exc.value)


def test_structure_only_without_torch(tmp_path):
    # validate=False is what happens when torch is not importable: the structure and the allowlist are checked
    cfg = load_compile_config(write(tmp_path, "[dynamo]\nrecompile_limit = 4\n"), validate=False)
    assert cfg.dynamo == {"recompile_limit": 4} and cfg.validated_against is None
    with pytest.raises(InputError, match="not in the allowlist"):
        load_compile_config(write(tmp_path, "[dynamo]\nnot_a_key = 1\n"), validate=False)
    cfg = load_compile_config(write(tmp_path, "[dynamo]\nnot_a_key = 1\n"), validate=False, allow_unsafe=True)
    assert cfg.dynamo == {"not_a_key": 1}
    with pytest.raises(InputError):
        load_compile_config(write(tmp_path, "[stance]\nstance = 'nope'\n"), validate=False)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_compile_config(tmp_path / "nope.toml")


def _applier(data: dict) -> ConfigApplier:
    return ConfigApplier(CompileConfig.from_dict(data), lambda component, exc: None)


def test_apply_env():
    env: dict[str, str] = {}
    prev = _applier({"env": {"TORCH_LOGS": "recompiles"}}).apply_env(env)
    assert env == {"TORCH_LOGS": "recompiles"} and prev == {"TORCH_LOGS": None}


def test_apply_in_thread_is_per_thread():
    import torch._dynamo.config as dcfg
    import torch._inductor.config as icfg

    applier = _applier({"dynamo": {"recompile_limit": 3, "reorderable_logging_functions": ["print"]},
                        "inductor": {"triton.cudagraphs": True}})
    seen = {}

    def worker():
        prev = applier.apply_in_thread()
        seen["inside"] = (dcfg.recompile_limit, icfg.triton.cudagraphs, print in dcfg.reorderable_logging_functions)
        seen["prev"] = prev
        applier.close(0)            # restores this thread's values
        seen["after"] = dcfg.recompile_limit

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["inside"] == (3, True, True)
    assert seen["prev"]["dynamo.recompile_limit"] == 8 and seen["after"] == 8
    assert dcfg.recompile_limit == 8  # the main thread is untouched


def test_mark_dynamic_inputs():
    import torch

    applier = _applier({"mark_dynamic": {"x": {"dim": 0, "min": 2, "max": 64}, "batch.y": 1}})

    def f(x, batch):
        return x

    x, y = torch.zeros(4, 3), torch.zeros(2, 5)
    assert len(applier.mark((x,), {"batch": {"y": y}}, f)) == 2
    assert 0 in getattr(x, "_dynamo_dynamic_indices", set())
    assert 1 in getattr(y, "_dynamo_dynamic_indices", set())


def test_stance_after_step():
    import torch

    applier = _applier({"stance": {"stance": "eager_on_recompile", "after_step": 2}})
    applier.apply_in_thread()
    try:
        assert applier.on_step_end(1) == []
        assert applier.on_step_end(2) == ["stance=eager_on_recompile"]
        assert applier.on_step_end(3) == []
    finally:
        torch.compiler.set_stance("default")


def test_a_config_built_by_hand_passes_the_allowlist_when_applied():
    with pytest.raises(InputError, match="cpp.cxx"):
        ConfigApplier(CompileConfig(inductor={"cpp.cxx": "/tmp/evil"}), lambda c, e: None)


def test_dump_writes_any_allowed_key_and_reads_back(tmp_path):
    cfg = load_compile_config(write(tmp_path, "[dynamo]\nsuppress_errors = true\n[inductor]\n\"cpp.threads\" = 4\n"))
    again = CompileConfig.from_dict(tomllib.loads(cfg.dump(header="mine")))
    assert again.to_dict() == cfg.to_dict() == {"dynamo": {"suppress_errors": True}, "inductor": {"cpp.threads": 4}}


def test_import_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys, workbench.compile_config as c, workbench.config_policy, workbench.compile_cache; "
            "c.CompileConfig.from_dict({'compile': {'dynamic': True}}, validate=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
