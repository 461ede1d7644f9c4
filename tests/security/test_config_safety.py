"""Nothing from an input becomes a setting: hostile compile logs through recommend and Apply, and the policy
that refuses dangerous settings in any compile config."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tomllib
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner


from workbench.compile_config import CompileConfig, dump_compile_config, load_compile_config
from workbench.errors import InputError

#: Newlines, a Unicode line separator, quotes, brackets and comment marks: each tries to end a comment line
#: and start a setting of its own.
HOSTILE = ('evil.py\n[env]\nLD_PRELOAD = "/tmp/evil.so"\n\u2028[dynamo]\r\nreorderable_logging_functions = '
           '["os.system"]\u2029PATH = ""\x85]"\'# \x1b[2J')


def _poison(src: Path, dest: Path) -> None:
    """Copy the TORCH_TRACE logs of ``src`` to ``dest`` with every Python file path, and the guard failure
    reasons, replaced by :data:`HOSTILE` (JSON-escaped, so the logs still parse)."""
    esc = json.dumps(HOSTILE)[1:-1]
    dest.mkdir(parents=True)
    for log in src.glob("*.log.gz"):
        text = gzip.decompress(log.read_bytes()).decode()
        text = re.sub(r'(?<=")/[^"]*?\.py(?=")', lambda m: esc, text)
        text = text.replace("size mismatch at index 0", "size mismatch at index 0 " + esc)
        (dest / log.name.removesuffix(".gz")).write_text(text)


def _intended(recs: pl.DataFrame) -> dict:
    """The settings the applied recommendations mean to write (from their typed config column)."""
    data: dict = {}
    for cfg in recs.filter(pl.col("apply"))["config"].to_list():
        for sec, body in json.loads(cfg).items():
            dest = data.setdefault(sec, {})
            for k, v in body.items():
                dest.setdefault(k, v)
    return {s: b for s, b in data.items() if b}


def test_hostile_compile_log_through_recommend(data_dir, tmp_path):
    logs = tmp_path / "logs"
    _poison(data_dir / "compile_logs/torch2.13-cpu/2rank-gloo-divergent-shape", logs)
    out = tmp_path / "fixes.toml"
    from workbench.cli import app as cli

    res = CliRunner().invoke(cli, ["recommend", str(logs), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    data = tomllib.loads(text)

    import workbench
    from workbench.analyses.recommendations import ranked_fixes_run, recommendations_frame
    from workbench.analyses.summary import run_findings

    run = workbench.open(logs)
    recs = recommendations_frame(ranked_fixes_run(run, run_findings(run)))
    assert recs.height > 0
    assert data == _intended(recs)  # exactly the intended settings, nothing the log smuggled in
    assert "LD_PRELOAD" not in json.dumps(data) and "os.system" not in json.dumps(data)
    for line in text.splitlines():  # every line is a comment, a section header, a setting or blank
        assert line == "" or line.startswith(("#", "[")) or re.match(r'^("[^"]*"|[A-Za-z0-9_-]+) = ', line), line
    assert HOSTILE.split("\n")[0] in text or "evil.py" in text  # the text is kept, as a comment
    load_compile_config(out)


def test_hostile_compile_log_through_apply(data_dir, repo_dir, tmp_path):
    pytest.importorskip("dash")
    from workbench.app import page_recommendations
    from workbench.app.store import RunStore

    run_dir = tmp_path / "run"
    shutil.copytree(repo_dir / "sample_traces/cpu-gloo-4rank", run_dir)
    for rank_dir in sorted(run_dir.glob("rank*")):
        comp = rank_dir / "compile"
        poisoned = tmp_path / f"p{rank_dir.name}"
        _poison(comp, poisoned)
        shutil.rmtree(comp)
        shutil.move(poisoned, comp)
    store = RunStore([run_dir])
    rid = store.entries[0].id
    path, text = page_recommendations.apply(store, rid)
    data = tomllib.loads(path.read_text())
    assert "env" not in data or not any(k.startswith(("LD_", "PATH", "PYTHON")) for k in data["env"])
    assert "os.system" not in json.dumps(data)
    CompileConfig.from_dict(data)


@pytest.mark.parametrize("toml, where", [
    ('[env]\nLD_PRELOAD = "/tmp/evil.so"\n', "[env] LD_PRELOAD"),
    ('[env]\nPATH = ""\n', "[env] PATH"),
    ('[env]\nPYTHONPATH = "/tmp"\n', "[env] PYTHONPATH"),
    ('[env]\nNCCL_NET_PLUGIN = "evil"\n', "[env] NCCL_NET_PLUGIN"),
    ('[env]\nTORCHINDUCTOR_CACHE_DIR = "/tmp/x"\n', "[env] TORCHINDUCTOR_CACHE_DIR"),
    ('[env]\n"A=B" = "1"\n', "'A=B'"),
    ('[env]\nTORCH_LOGS = "a\\nb"\n', "[env] TORCH_LOGS"),
    ('[dynamo]\nreorderable_logging_functions = ["os.system"]\n', "reorderable_logging_functions"),
    ('[inductor]\n"cpp.cxx" = ["sh", "-c", "id"]\n', "cpp.cxx"),
    ('[inductor]\npost_grad_custom_post_pass = "x"\n', "post_grad_custom_post_pass"),
    ('[inductor]\n"trace.debug_dir" = "/tmp"\n', "trace.debug_dir"),
    ('[compile]\nbackend = "evilmod.backend"\n', "backend"),
    ('[compile]\nbackend = "no_such_backend"\n', "[compile] backend"),
    ('[compile]\noptions = { "triton.cudagraphs" = "yes" }\n', "triton.cudagraphs"),
    ('[stance]\nstance = "default"\nforce_backend = "x.y"\n', "force_backend"),
    ('[cache]\nsave = "/home/user/.bashrc"\n', "[cache] save"),
    ('[cache]\nload = "../../x.bin"\n', "[cache] load"),
    ('[cache]\nsave = "notes.txt"\n', "[cache] save"),
    ("allow_unsafe = 1\n", "allow_unsafe"),
])
def test_policy_refuses_with_one_line(tmp_path, toml, where):
    p = tmp_path / "fixes.toml"
    p.write_text(toml)
    with pytest.raises(InputError) as exc:
        load_compile_config(p)
    msg = str(exc.value)
    assert "\n" not in msg and str(p) in msg and where in msg, msg


def test_allow_unsafe_is_the_callers_explicit_choice_never_the_files(tmp_path):
    unsafe = '[env]\nLD_PRELOAD = "/tmp/x.so"\n[cache]\nsave = "/tmp/cache.bin"\n'
    p = tmp_path / "fixes.toml"
    p.write_text(unsafe)
    cfg = load_compile_config(p, allow_unsafe=True)
    assert cfg.env == {"LD_PRELOAD": "/tmp/x.so"} and cfg.unsafe_allowed
    p.write_text("allow_unsafe = true\n" + unsafe)
    for caller in (False, True):      # the file's own opt-in is refused, whatever the caller says
        with pytest.raises(InputError) as exc:
            load_compile_config(p, allow_unsafe=caller)
        assert "\n" not in str(exc.value) and str(p) in str(exc.value) and "allow_unsafe" in str(exc.value)
    # a recommender can never write the opt-in, nor an unsafe or unlisted key
    for bad in ({"allow_unsafe": True}, {"env": {"LD_PRELOAD": "x"}}, {"dynamo": {"suppress_errors": True}},
                {"inductor": {"cpp.cxx": ["sh"]}}):
        with pytest.raises(ValueError):
            dump_compile_config(bad)


def test_cache_paths_resolve_inside_the_config_folder(tmp_path):
    p = tmp_path / "sub" / "fixes.toml"
    p.parent.mkdir()
    p.write_text('[cache]\nsave = "compile_cache.bin"\nsave_after_step = 2\n')
    cfg = load_compile_config(p)
    assert cfg.cache_file("save") == p.parent.resolve() / "compile_cache.bin"


@pytest.mark.parametrize("link", ["compile_cache.bin", "d/compile_cache.bin"])
def test_cache_path_through_a_symlink_out_of_the_folder_is_refused(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "compile_cache.bin").write_bytes(b"x")
    folder = tmp_path / "cfg"
    folder.mkdir()
    if "/" in link:
        (folder / "d").symlink_to(outside)
    else:
        (folder / link).symlink_to(outside / "compile_cache.bin")
    p = folder / "fixes.toml"
    for key in ("load", "save"):
        p.write_text(f'[cache]\n{key} = "{link}"\n')
        with pytest.raises(InputError) as exc:
            load_compile_config(p)
        msg = str(exc.value)
        assert "\n" not in msg and str(p) in msg and f"[cache] {key}" in msg and "outside the config's folder" in msg
    # a symlink that stays inside the folder is fine
    (folder / "real.bin").write_bytes(b"")
    (folder / "inside.bin").symlink_to(folder / "real.bin")
    p.write_text('[cache]\nsave = "inside.bin"\n')
    assert load_compile_config(p).cache_file("save") == (folder / "real.bin").resolve()


@pytest.mark.parametrize("content, where", [
    (b"[dynamo]\nrecompile_limit = 8\n# \xff\xfe\n", "not UTF-8"),
    (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "TOML"),
    (b"[dynamo\n", "not valid TOML"),
])
def test_unreadable_configs_are_one_line(tmp_path, content, where):
    p = tmp_path / "fixes.toml"
    p.write_bytes(content)
    with pytest.raises(InputError) as exc:
        load_compile_config(p)
    assert "\n" not in str(exc.value) and str(p) in str(exc.value) and where in str(exc.value)


def test_comments_never_become_settings():
    text = dump_compile_config({"dynamo": {"recompile_limit": 16}}, {"dynamo.recompile_limit": HOSTILE},
                               header=HOSTILE, footer=HOSTILE)
    assert tomllib.loads(text) == {"dynamo": {"recompile_limit": 16}}
    assert "\x1b" not in text and "\u2028" not in text and "\x85" not in text


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "too-big"])
def test_a_config_that_is_not_a_small_regular_file_is_one_line(tmp_path, kind):
    """A FIFO would block a plain read and /dev/zero never ends: both are refused before a byte is read."""
    import os

    p = tmp_path / "fixes.toml"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-zero":
        p.symlink_to("/dev/zero")
    elif kind == "folder":
        p.mkdir()
    else:
        p.write_bytes(b"# " + b"x" * (1 << 20) + b"\n")
    with pytest.raises(InputError) as exc:
        load_compile_config(p)
    msg = str(exc.value)
    assert "\n" not in msg and str(p) in msg
    assert ("larger than the" in msg) if kind == "too-big" else ("not a file" in msg), msg


def test_collector_takes_the_opt_in_from_the_callers_code_and_records_it(tmp_path):
    pytest.importorskip("torch")
    from workbench.collectors import Collector

    p = tmp_path / "fixes.toml"
    p.write_text('[dynamo]\nrecompile_limit = 4\n[env]\nTORCH_WB_UNLISTED = "1"\n')
    with pytest.raises(InputError, match=r"\[env\] TORCH_WB_UNLISTED"):
        Collector(tmp_path / "run", compile_config=p, profile_repeat=0)
    with pytest.raises(ValueError, match="allow_unsafe"):
        Collector(tmp_path / "run", compile_config=p, profile_repeat=0, allow_unsafe="yes")
    import os

    try:
        c = Collector(tmp_path / "run", compile_config=p, profile_repeat=0, allow_unsafe=True)
        with c:
            with c.step():
                pass
    finally:
        os.environ.pop("TORCH_WB_UNLISTED", None)
    meta = json.loads((tmp_path / "run/run.json").read_text())
    assert meta["profile"]["allow_unsafe"] is True and meta["compile_config"]["env"] == {"TORCH_WB_UNLISTED": "1"}
