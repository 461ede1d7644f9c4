from __future__ import annotations

import threading
import tomllib
from pathlib import Path

import pytest

from workbench.compile_config import CompileConfig, MarkDynamic, dump_compile_config, load_compile_config
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
TORCH_WB_FLAG = true
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
    assert cfg.env == {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']", "TORCH_WB_FLAG": "1"}
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
    # validate=False is what happens when torch is not importable: unknown torch keys pass, structure is checked
    cfg = load_compile_config(write(tmp_path, "[dynamo]\nnot_a_key = 1\n"), validate=False)
    assert cfg.dynamo == {"not_a_key": 1} and cfg.validated_against is None
    with pytest.raises(InputError):
        load_compile_config(write(tmp_path, "[stance]\nstance = 'nope'\n"), validate=False)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_compile_config(tmp_path / "nope.toml")


def test_apply_env():
    cfg = CompileConfig.from_dict({"env": {"TORCH_WB_TEST_VAR": "1"}})
    env: dict[str, str] = {}
    prev = cfg.apply_env(env)
    assert env == {"TORCH_WB_TEST_VAR": "1"} and prev == {"TORCH_WB_TEST_VAR": None}


def test_apply_in_thread_is_per_thread():
    import torch._dynamo.config as dcfg
    import torch._inductor.config as icfg

    cfg = CompileConfig.from_dict({"dynamo": {"recompile_limit": 3, "reorderable_logging_functions": ["print"]},
                                   "inductor": {"triton.cudagraphs": True}})
    seen = {}

    def worker():
        prev = cfg.apply_in_thread()
        seen["inside"] = (dcfg.recompile_limit, icfg.triton.cudagraphs, print in dcfg.reorderable_logging_functions)
        seen["prev"] = prev

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["inside"] == (3, True, True)
    assert seen["prev"]["dynamo.recompile_limit"] == 8
    assert dcfg.recompile_limit == 8  # the main thread is untouched


def test_mark_dynamic_inputs():
    import torch

    cfg = CompileConfig.from_dict({"mark_dynamic": {"x": {"dim": 0, "min": 2, "max": 64}, "batch.y": 1}})

    def f(x, batch):
        return x

    x, y = torch.zeros(4, 3), torch.zeros(2, 5)
    assert cfg.mark_dynamic_inputs((x,), {"batch": {"y": y}}, fn=f) == 2
    assert 0 in getattr(x, "_dynamo_dynamic_indices", set())
    assert 1 in getattr(y, "_dynamo_dynamic_indices", set())


def test_stance_after_step():
    import torch

    cfg = CompileConfig.from_dict({"stance": {"stance": "eager_on_recompile", "after_step": 2}})
    cfg.apply_in_thread()
    try:
        assert cfg.on_step_end(1) == []
        assert cfg.on_step_end(2) == ["stance=eager_on_recompile"]
        assert cfg.on_step_end(3) == []
    finally:
        torch.compiler.set_stance("default")


def test_import_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys, workbench.compile_config as c; "
            "c.CompileConfig.from_dict({'compile': {'dynamic': True}}, validate=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
