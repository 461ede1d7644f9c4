"""The doors of issue 35, each tried as an attacker would: a compile config the old blocklist accepted, given to a
real ``Collector(path, compile_config=...)``, then two compiled steps (inductor, torch 2.13 CPU). Each payload
would create ``<tmp>/EXECUTED-<case>`` if it ran: a planted compiler or ``cc1plus`` (tiny shell scripts), a module
that touches the marker when imported, or the marker path itself as the file a setting would write. Every config
is refused with one line naming the file and the key, and no marker appears. The control runs (the caller's own
``allow_unsafe=True``) show the payloads are live. The ``[cache]`` bundle doors are in ``test_config_cache.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from workbench.collectors import Collector  # noqa: E402
from workbench.errors import InputError  # noqa: E402

#: (case, config text, what the refusal names). ``{dir}``: the folder of the planted programs; ``{marker}``: the
#: file the payload would create.
DOORS = [
    # (1) a config inside a config sets the compiler
    ("override-env", '[env]\nTORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS = ">=0:cpp.cxx={dir}/cxx"\n',
     "[env] TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS"),
    ("override-dynamo", '[dynamo]\ndebug_inductor_config_override = ">=0:cpp.cxx={dir}/cxx"\n',
     "[dynamo] debug_inductor_config_override"),
    ("cxx", '[inductor]\n"cpp.cxx" = ["{dir}/cxx"]\n', "[inductor] cpp.cxx"),
    # (2) flags pasted into a compiler's command line
    ("march", '[inductor]\n"cpp.march" = "native -B{dir}/"\n', "[inductor] cpp.march"),
    ("march-options", '[compile]\noptions = {{ "cpp.march" = "native -B{dir}/" }}\n', "[compile.options] cpp.march"),
    ("ccbin", '[inductor]\n"cuda.compile_opt_level" = "-O1 -ccbin {dir}/cxx"\n', "[inductor] cuda.compile_opt_level"),
    # (4) settings that load a library or import a module, reach a remote cache, or write a file anywhere
    ("omp-tool", '[env]\nOMP_TOOL_LIBRARIES = "{dir}/tool.so"\n', "[env] OMP_TOOL_LIBRARIES"),
    ("triton-cache-manager", '[env]\nTRITON_CACHE_MANAGER = "evilmod:Evil"\n', "[env] TRITON_CACHE_MANAGER"),
    ("triton-remote", '[env]\nTRITON_REMOTE_CACHE_BACKEND = "evilmod:Evil"\n', "[env] TRITON_REMOTE_CACHE_BACKEND"),
    ("redis-host", '[env]\nTORCHINDUCTOR_REDIS_HOST = "attacker.invalid"\n', "[env] TORCHINDUCTOR_REDIS_HOST"),
    ("remote-cache", '[inductor]\nfx_graph_remote_cache = true\n', "[inductor] fx_graph_remote_cache"),
    ("logs-out", '[env]\nTORCH_LOGS = "+dynamo"\nTORCH_LOGS_OUT = "{marker}"\n', "[env] TORCH_LOGS_OUT"),
    ("torch-trace", '[env]\nTORCH_TRACE = "{marker}"\n', "[env] TORCH_TRACE"),
    ("cudnn-log", '[env]\nCUDNN_LOGDEST_DBG = "{marker}"\n', "[env] CUDNN_LOGDEST_DBG"),
    ("worker-log", '[inductor]\ntorchinductor_worker_logpath = "{marker}"\n',
     "[inductor] torchinductor_worker_logpath"),
    ("log-file-name", '[compiler]\nlog_file_name = "{marker}"\n', "[compiler] log_file_name"),
    ("debug-trace", '[inductor]\n"trace.enabled" = true\n"trace.debug_dir" = "{marker}"\n', "[inductor] trace."),
    ("reorderable", '[dynamo]\nreorderable_logging_functions = ["evilmod.touch"]\n',
     "[dynamo] reorderable_logging_functions"),
    ("backend", '[compile]\nbackend = "evilmod.backend"\n', "[compile] backend"),
    ("force-backend", '[stance]\nstance = "default"\nforce_backend = "evilmod.backend"\n', "[stance] force_backend"),
    ("post-grad-pass", '[inductor]\npost_grad_custom_post_pass = "evilmod.touch"\n',
     "[inductor] post_grad_custom_post_pass"),
    ("job-id", '[compiler]\njob_id = "job1"\n', "[compiler] job_id"),
    ("ld-preload", '[env]\nLD_PRELOAD = "{dir}/tool.so"\n', "[env] LD_PRELOAD"),
    ("pythonpath", '[env]\nPYTHONPATH = "{dir}"\n', "[env] PYTHONPATH"),
    # (5) the file lifting its own policy; a cache file reached through a symlink or an absolute path
    ("file-opt-in", 'allow_unsafe = true\n[inductor]\n"cpp.cxx" = ["{dir}/cxx"]\n', "allow_unsafe"),
    ("cache-symlink", '[cache]\nload = "link.bin"\n', "[cache] load"),
    ("cache-absolute", '[cache]\nsave = "{marker}.bin"\nsave_after_step = 0\n', "[cache] save"),
    ("cache-dotdot", '[cache]\nsave = "../EXECUTED-cache-dotdot.bin"\nsave_after_step = 0\n', "[cache] save"),
]

WORKER = r"""
import json, sys, torch
from workbench.collectors import Collector
run, cfg = sys.argv[1], sys.argv[2]
def fn(x):
    return (x.sin() * 2).sum()
collector = Collector(run, compile_config=cfg, profile_repeat=0, allow_unsafe=True)
compiled = torch.compile(fn)
raised = None
try:
    with collector:
        for _ in range(2):
            with collector.step():
                compiled(torch.randn(8, 8))
except Exception as exc:
    raised = type(exc).__name__
print(json.dumps({"raised": raised}))
"""


def fn(x):
    return (x.sin() * 2).sum()


def plant(folder: Path, case: str) -> tuple[Path, Path]:
    """The hostile programs in ``folder/bin`` (a compiler, a cc1plus, a module), each touching the marker; returns
    (that folder, the marker)."""
    marker = folder / f"EXECUTED-{case}"
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name in ("cxx", "cc1plus"):
        (bin_dir / name).write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "evilmod.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
                                        f"def touch(*a, **k):\n    pass\nbackend = touch\nEvil = object\n")
    (bin_dir / "tool.so").write_bytes(b"")
    if case == "cache-symlink":            # a bundle outside the folder whose key is the marker's path
        from torch.compiler._cache import CacheArtifactFactory, _serialize_single_cache
        from torch.utils._appending_byte_serializer import AppendingByteSerializer

        ser = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
        ser.append(("autotune", [CacheArtifactFactory.create("autotune", str(marker), b'{"XBLOCK": 1}')]))
        outside = folder.parent / f"{folder.name}-outside.bin"
        outside.write_bytes(ser.to_bytes())
        (folder / "link.bin").symlink_to(outside)
    return bin_dir, marker


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A folder for the config and its payloads; ``os.environ`` restored after (the code under test may set it);
    ``evilmod`` importable, as an attacker would arrange."""
    before = dict(os.environ)
    folder = tmp_path / "cfg"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder / "bin"))
    yield folder
    torch._dynamo.reset()
    os.environ.clear()
    os.environ.update(before)
    sys.modules.pop("evilmod", None)


@pytest.mark.parametrize("case, text, names", DOORS, ids=[d[0] for d in DOORS])
def test_door_is_refused_and_nothing_runs(sandbox, case, text, names):
    bin_dir, marker = plant(sandbox, case)
    cfg = sandbox / "fixes.toml"
    cfg.write_text(text.format(dir=bin_dir, marker=marker))
    with pytest.raises(InputError) as exc:
        Collector(sandbox / "run", compile_config=cfg, profile_repeat=0)
    msg = str(exc.value)
    assert "\n" not in msg and str(cfg) in msg and names in msg, msg
    compiled = torch.compile(fn)     # the training goes on as the user wrote it: two compiled steps
    for _ in range(2):
        compiled(torch.randn(8, 8))
    assert not marker.exists() and not (sandbox.parent / "EXECUTED-cache-dotdot.bin").exists()
    assert "evilmod" not in sys.modules


def test_door_is_refused_for_a_config_made_from_a_dict_too(sandbox):
    """The app's Apply and ``CompileConfig.from_dict`` go through the same allowlist."""
    from workbench.compile_config import CompileConfig

    with pytest.raises(InputError, match=r"\[inductor\] cpp.march"):
        CompileConfig.from_dict({"inductor": {"cpp.march": "native -B/tmp/x/"}})


@pytest.mark.slow
@pytest.mark.parametrize("case", ["march", "override-dynamo"])
def test_control_the_planted_compiler_runs_when_the_caller_opts_in(tmp_path, case):
    """The payloads are live: with the caller's ``allow_unsafe=True`` (and no fx-graph cache hit) torch runs them."""
    folder = tmp_path / "cfg"
    folder.mkdir()
    bin_dir, marker = plant(folder, case)
    text = next(t for c, t, _ in DOORS if c == case)
    cfg = folder / "fixes.toml"
    cfg.write_text(text.format(dir=bin_dir, marker=marker))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    out = subprocess.run([sys.executable, "-c", WORKER, str(folder / "run"), str(cfg)], env=env,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1])["raised"] is not None   # the planted program failed it
    assert marker.exists()
