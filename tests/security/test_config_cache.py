"""``[cache] load``: the bundle is read and checked by the workbench before torch sees it (torch 2.13 CPU).

Each hostile bundle is built from a real one (saved by a real ``Collector`` run with ``[cache] save``) with torch's
own serializer, then tampered: an absolute key (torch writes that file at load), a pickle of ``os.system`` under
the real key of an ``inductor`` / ``aot_autograd`` artifact (torch unpickles it at load or at the first compile), a
``pgo`` artifact (unpickled at the first compile), an unknown kind, a key with ``..``. Each payload would create
``<tmp>/EXECUTED-<case>`` if it ran; the control runs show that it does when the caller opts in.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from workbench import compile_cache  # noqa: E402
from workbench.collectors import Collector  # noqa: E402
from workbench.compile_config import load_compile_config  # noqa: E402
from workbench.errors import InputError  # noqa: E402

#: One training run: Collector(run, compile_config=cfg) and two compiled steps; prints what was applied.
WORKER = r"""
import json, sys, torch
from workbench.collectors import Collector
run, cfg, unsafe = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def fn(x):
    return (x.sin() * 2).sum()
try:
    collector = Collector(run, compile_config=cfg, profile_repeat=0, allow_unsafe=unsafe)
except Exception as exc:
    print(json.dumps({"refused": str(exc)}))
    raise SystemExit(0)
compiled = torch.compile(fn)
raised = None
try:
    with collector:
        for _ in range(2):
            with collector.step():
                compiled(torch.randn(8, 8))
except Exception as exc:
    raised = type(exc).__name__
from torch._dynamo.utils import counters
meta = json.load(open(f"{run}/run.json"))
print(json.dumps({"applied": {r["setting"]: r for r in meta["compile_config_applied"]}, "raised": raised,
                  "fxgraph_cache_hit": counters["inductor"]["fxgraph_cache_hit"]}))
"""


def fn(x):
    return (x.sin() * 2).sum()


class Boom:
    """A pickle that runs ``touch <marker>`` when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def run_worker(folder: Path, config: str, *, xdg: Path, unsafe: bool = False, name: str = "run") -> dict:
    cfg = folder / "fixes.toml"
    cfg.write_text(config)
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "TORCHINDUCTOR_CACHE_DIR": str(folder / f"inductor-{name}")}
    out = subprocess.run([sys.executable, "-c", WORKER, str(folder / name), str(cfg), "1" if unsafe else "0"],
                         env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path]:
    """A real run that saved its compile cache: (its folder holding the sealed compile_cache.bin, its XDG home)."""
    folder = tmp_path_factory.mktemp("saved")
    xdg = folder / "xdg"
    got = run_worker(folder, '[cache]\nsave = "compile_cache.bin"\nsave_after_step = 1\n', xdg=xdg)
    assert got["applied"]["cache.save"]["applied"] and got["raised"] is None, got
    return folder, xdg


def artifacts(folder: Path) -> dict:
    """The real bundle's artifacts by kind, as torch reads them (the seal taken off)."""
    from torch.compiler._cache import CacheArtifactManager

    data, sealed = compile_cache.unseal((folder / "compile_cache.bin").read_bytes(), None)
    arts = CacheArtifactManager.deserialize(data)
    assert set(arts) >= {"inductor", "aot_autograd"}, arts
    return arts


def bundle(*sections: tuple[str, list]) -> bytes:
    """A bundle written by torch's own serializer."""
    from torch.compiler._cache import _serialize_single_cache
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    ser = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    ser.extend(sections)
    return ser.to_bytes()


def artifact(kind: str, key: str, content: bytes):
    from torch.compiler._cache import CacheArtifactFactory

    return CacheArtifactFactory.create(kind, key, content)


def hostile(case: str, arts: dict, marker: Path) -> tuple[bytes, str]:
    """The tampered bundle of ``case`` and the phrase its refusal names."""
    ind, aot = arts["inductor"][0], arts["aot_autograd"][0]
    boom = pickle.dumps(Boom(marker))
    return {
        "abs-key-autotune": (bundle(("autotune", [artifact("autotune", str(marker), b'{"XBLOCK": 1}')])),
                             "not a plain relative name"),
        "abs-key-inductor": (bundle(("inductor", [artifact("inductor", str(marker), ind.content)])),
                             "not a plain relative name"),
        "dotdot-key": (bundle(("autotune", [artifact("autotune", f"ab/../../{marker.name}", b"{}")])),
                       "not a plain relative name"),
        "inductor-pickle": (bundle(("inductor", [artifact("inductor", ind.key, boom)]), ("aot_autograd", [aot])),
                            "did not save this bundle for you"),
        "aot-pickle": (bundle(("inductor", [ind]), ("aot_autograd", [artifact("aot_autograd", aot.key, boom)])),
                       "did not save this bundle for you"),
        "pgo": (bundle(("pgo", [artifact("pgo", "job1:None:", boom)]), ("inductor", [ind])), "'pgo'"),
    }[case]


CASES = ["abs-key-autotune", "abs-key-inductor", "dotdot-key", "inductor-pickle", "aot-pickle", "pgo"]


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """This user's seal key and torch's cache dir inside ``tmp_path``; torch's compiled state reset after."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    yield tmp_path
    torch._dynamo.reset()


def two_steps(collector: Collector | None = None) -> None:
    compiled = torch.compile(fn)
    for _ in range(2):
        if collector is None:
            compiled(torch.randn(8, 8))
        else:
            with collector.step():
                compiled(torch.randn(8, 8))


@pytest.mark.parametrize("case", CASES)
def test_hostile_bundle_is_refused_at_collector_start(saved, isolated, case):
    marker = isolated / f"EXECUTED-{case}"
    blob, phrase = hostile(case, artifacts(saved[0]), marker)
    (isolated / "compile_cache.bin").write_bytes(blob)
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    with pytest.raises(InputError) as exc:
        Collector(isolated / "run", compile_config=cfg, profile_repeat=0)
    msg = str(exc.value)
    assert "\n" not in msg and str(cfg) in msg and "[cache] load compile_cache.bin" in msg and phrase in msg, msg
    two_steps()                  # the training goes on without the collector: nothing was loaded
    assert not marker.exists()


@pytest.mark.parametrize("case", ["abs-key-autotune", "aot-pickle", "pgo"])
def test_hostile_bundle_that_appears_after_the_start_is_refused_and_recorded(saved, isolated, case):
    marker = isolated / f"EXECUTED-{case}"
    blob, phrase = hostile(case, artifacts(saved[0]), marker)
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    collector = Collector(isolated / "run", compile_config=cfg, profile_repeat=0)
    (isolated / "compile_cache.bin").write_bytes(blob)          # swapped in between load and the first step
    with collector:
        two_steps(collector)
    rec = {r["setting"]: r for r in json.loads((isolated / "run/run.json").read_text())["compile_config_applied"]}
    assert rec["cache.load"]["applied"] is False and phrase in rec["cache.load"]["reason"], rec
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("case, extra", [("aot-pickle", ""), ("pgo", '[compiler]\njob_id = "job1"\n')])
def test_control_the_payload_runs_when_the_caller_opts_in(saved, tmp_path, case, extra):
    """The payloads are live: with ``allow_unsafe=True`` in the caller's code torch runs them."""
    marker = tmp_path / f"EXECUTED-{case}"
    blob, _ = hostile(case, artifacts(saved[0]), marker)
    (tmp_path / "compile_cache.bin").write_bytes(blob)
    run_worker(tmp_path, '[cache]\nload = "compile_cache.bin"\n' + extra, xdg=tmp_path / "xdg", unsafe=True)
    assert marker.exists()


@pytest.mark.slow
def test_warm_start_from_a_bundle_this_workbench_saved(saved, tmp_path):
    """The recommender's warm start still works: the sealed bundle loads, and the compile hits the FX graph cache."""
    folder, xdg = saved
    (tmp_path / "compile_cache.bin").write_bytes((folder / "compile_cache.bin").read_bytes())
    got = run_worker(tmp_path, '[cache]\nload = "compile_cache.bin"\nsave = "compile_cache.bin"\n', xdg=xdg)
    assert got["applied"]["cache.load"]["applied"] and got["raised"] is None, got
    assert got["fxgraph_cache_hit"] >= 1, got


def test_a_bundle_sealed_by_another_user_or_changed_after_sealing_is_refused(saved, isolated):
    folder, _ = saved
    sealed = (folder / "compile_cache.bin").read_bytes()
    assert sealed.startswith(compile_cache.MAGIC)
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    (isolated / "compile_cache.bin").write_bytes(sealed)     # this test's user has another key
    with pytest.raises(InputError, match="did not save this bundle for you"):
        load_compile_config(cfg)
    key = compile_cache.seal_key(create=True)
    (isolated / "compile_cache.bin").write_bytes(compile_cache.seal(compile_cache.unseal(sealed, None)[0], key))
    assert load_compile_config(cfg).cache == {"load": "compile_cache.bin"}     # sealed for this user: admitted
    data = bytearray((isolated / "compile_cache.bin").read_bytes())
    data[-1] ^= 1                                             # one byte changed after sealing (the crc too)
    import zlib

    body = bytes(data[len(compile_cache.MAGIC) + 32:])
    body = zlib.crc32(body[4:]).to_bytes(4, "big") + body[4:]
    (isolated / "compile_cache.bin").write_bytes(bytes(data[:len(compile_cache.MAGIC) + 32]) + body)
    with pytest.raises(InputError, match="did not save this bundle for you"):
        load_compile_config(cfg)


def test_the_caller_can_opt_in(saved, isolated):
    (isolated / "compile_cache.bin").write_bytes(hostile("pgo", artifacts(saved[0]), isolated / "m")[0])
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    assert load_compile_config(cfg, allow_unsafe=True).unsafe_allowed


@pytest.mark.parametrize("blob, phrase", [
    (b"", "checksum"),
    (b"\x00" * 3, "checksum"),
    (b"not a bundle at all", "checksum"),
    (None, "cut short"),
    ("count", "runs past the end"),
    ("kind", "kind the workbench does not know"),
    ("version", "version 2"),
])
def test_malformed_bundles_are_one_line(isolated, blob, phrase):
    import zlib

    def framed(body: bytes) -> bytes:
        return zlib.crc32(body).to_bytes(4, "big") + body

    if blob is None:           # a section whose count promises artifacts that are not there
        blob = framed((1).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"YXV0bw==" + (5).to_bytes(8, "big"))
    elif blob == "count":      # an artifact whose length is far beyond the file
        blob = framed((1).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"YXV0bw==" + (1).to_bytes(8, "big")
                      + (4).to_bytes(8, "big") + b"YWI=" + (1 << 60).to_bytes(8, "big"))
    elif blob == "kind":
        blob = framed((1).to_bytes(8, "big") + (8).to_bytes(8, "big") + b"ZXZpbA==" + (1).to_bytes(8, "big")
                      + (4).to_bytes(8, "big") + b"YWI=" + (2).to_bytes(8, "big") + b"{}")
    elif blob == "version":
        blob = framed((2).to_bytes(8, "big"))
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    (isolated / "compile_cache.bin").write_bytes(blob)
    with pytest.raises(InputError) as exc:
        load_compile_config(cfg)
    msg = str(exc.value)
    assert "\n" not in msg and str(cfg) in msg and phrase in msg, msg


def test_a_bundle_that_is_not_a_regular_file_is_refused(isolated):
    os.mkfifo(isolated / "compile_cache.bin")        # a FIFO would block a plain open()
    cfg = isolated / "fixes.toml"
    cfg.write_text('[cache]\nload = "compile_cache.bin"\n')
    with pytest.raises(InputError, match="a FIFO, not a file"):
        load_compile_config(cfg)
