"""The command line as a user meets it (issue 32): usage errors with the usage line and exit 2, a missing optional
part named by its extra, ``--rank`` said for what it does, a progress line on the commands that take seconds,
``--help`` without the heavy imports, and ``recommend -o`` without torch when its config uses only known keys.

Each case runs the real command in a fresh Python process; what it imported is read from that process's
``sys.modules`` (deterministic, unlike a start-up time: ``bench/cli_start.py`` measures the time).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import EXTRAS, missing_extra

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "cpu-recompile-before"
AFTER = REPO / "sample_traces" / "cpu-recompile-after"
TWO_RANKS = REPO / "sample_traces" / "h200x2-planted"

#: Runs ``workbench ARGS`` in this process (modules named in $WB_BLOCK made unimportable first), then writes its exit
#: status and every module it imported to the file named first.
PROBE = """
import json, os, sys
for name in filter(None, os.environ.get("WB_BLOCK", "").split(",")):
    sys.modules[name] = None       # `import name` raises ModuleNotFoundError, as where it is not installed
from workbench.cli import main
out, sys.argv = sys.argv[1], ["workbench", *sys.argv[2:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(k for k, v in sys.modules.items() if v is not None)}, f)
"""

#: Modules ``workbench --help`` must not import: each costs start-up time and none is needed to print the help.
HEAVY = ("polars", "pyarrow", "pandas", "numpy", "rich", "plotly", "orjson", "torch", "dash",
         "workbench.analyses", "workbench.run", "workbench.notebook", "workbench.kineto", "workbench.report")


def probe(tmp_path: Path, *args: str, block: tuple[str, ...] = ()) -> tuple[int, set[str], str, str]:
    """(exit status, modules imported, stdout, stderr) of ``workbench ARGS`` run in a fresh process."""
    out = tmp_path / f"probe-{len(list(tmp_path.glob('probe-*')))}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["WB_BLOCK"] = ",".join(block)
    res = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=600)
    got = json.loads(out.read_text())
    return got["code"], set(got["modules"]), res.stdout, res.stderr


def wb(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``workbench ARGS`` through the installed console script."""
    exe = Path(sys.executable).parent / "workbench"
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env={**base, **(env or {})},
                          cwd=cwd, timeout=600)


def test_help_imports_none_of_the_heavy_modules(tmp_path):
    code, modules, out, err = probe(tmp_path, "--help")
    assert code == 0 and "Usage: workbench" in out and not err, err
    loaded = sorted(m for m in modules if m.split(".")[0] in HEAVY or any(m.startswith(h + ".") or m == h
                                                                           for h in HEAVY))
    assert not loaded, f"`workbench --help` imported {loaded}"
    for command in ("info", "analyze", "diff", "recommend", "report", "export", "app"):
        assert command in out


def test_help_is_plain_text():
    """Click's plain help: no rich markup or RST shown as text, every command's --help answers."""
    res = wb("analyze", "--help")
    assert res.returncode == 0 and "Usage: workbench analyze" in res.stdout
    for raw in ("``", "[bold", "\x1b", ":func:"):
        assert raw not in res.stdout


@pytest.mark.parametrize("args, says", [
    (("diff", "a"), "Missing argument 'AFTER'"),
    (("analyze",), "Missing argument 'PATH'"),
    (("info", str(SAMPLE), "--no-such-option"), "No such option: --no-such-option"),
    (("analyze", str(SAMPLE), "--window", "sometimes"), "--window must be one of"),
    (("recommend", str(SAMPLE), "--rank", "one"), "Invalid value for '--rank'"),
    (("no-such-command",), "No such command 'no-such-command'"),
])
def test_a_usage_error_prints_the_usage_line_and_exits_2(args, says):
    res = wb(*args)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert lines[0].startswith("Usage: workbench"), res.stderr
    assert lines[-1].startswith("error: ") and says in lines[-1], res.stderr
    assert "Traceback" not in res.stderr and not res.stdout


def test_an_unknown_fault_is_a_usage_error(tmp_path):
    res = wb("faults", "run", "nosuch", "--out", str(tmp_path / "x"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nosuch" in lines[0], res.stderr
    assert not (tmp_path / "x").exists()


def test_a_missing_optional_part_is_one_line_naming_its_extra(tmp_path):
    code, _, out, err = probe(tmp_path, "app", str(SAMPLE), block=("dash",))
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0] == ("error: workbench app needs dash (the [app] extra), which is not installed: "
                        "pip install -e '.[app]' in the workbench checkout"), err


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_every_optional_module_has_an_install_line(module):
    line = missing_extra(module, "faults")
    assert line.startswith(f"workbench faults needs {module} (") and "pip install -e " in line
    assert EXTRAS[module].strip("[]./") in line


def test_rank_is_documented_for_what_it_does_and_refused_on_a_run_of_several_ranks():
    for command in ("info", "analyze", "recommend", "report", "export"):
        res = wb(command, "--help")
        assert "--rank N" in res.stdout and "lone trace file" in res.stdout, (command, res.stdout)
    for command in ("info", "analyze"):   # a usage error: the command's usage line, then the one error line, exit 2
        res = wb(command, str(TWO_RANKS), "--rank", "1")
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 3, res.stderr
        assert lines[0].startswith(f"Usage: workbench {command} [OPTIONS] ") and "PATH" in lines[0], lines[0]
        assert lines[2].startswith("error: ") and "--rank applies to a single trace file, but 2 were found" in lines[2]


@pytest.mark.parametrize("torch_installed", [True, False])
def test_recommend_o_imports_no_torch_for_a_config_of_known_keys(tmp_path, torch_installed):
    """Also where torch is not installed (the README's first command installs the app extra only)."""
    target = tmp_path / "fixes.toml"
    code, modules, out, err = probe(tmp_path, "recommend", str(SAMPLE), "-o", str(target),
                                    block=() if torch_installed else ("torch",))
    assert code == 0, err
    assert 'dynamic_sources = "L' in target.read_text()       # a config fix was written (and loaded back)
    assert "torch" not in modules, "recommend -o imported torch for a config of allowlisted keys only"


def test_the_allowlist_check_imports_torch_only_for_a_key_it_does_not_know(tmp_path):
    """``validate="allowlist"`` (what ``recommend -o`` uses) checks an unknown key against the installed torch."""
    pytest.importorskip("torch")
    known, unknown = tmp_path / "known.toml", tmp_path / "unknown.toml"
    known.write_text('[compiler]\ndynamic_sources = "L[\'x\']:0"\n')
    unknown.write_text('[inductor]\n"cpp.march" = "native"\n')
    code = ("import sys; from workbench.compile_config import load_compile_config as load; "
            "load(sys.argv[1], validate='allowlist', allow_unsafe=True); print('torch' in sys.modules)")
    got = [subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=600)
           for p in (known, unknown)]
    assert [g.stdout.strip() for g in got] == ["False", "True"], [g.stderr for g in got]


@pytest.mark.parametrize("args, step", [
    (("analyze", str(SAMPLE)), "analysing"),
    (("diff", str(SAMPLE), str(AFTER)), "comparing"),
    (("report", str(SAMPLE), "-o", "r.html", "--plotlyjs", "cdn"), "building the report"),
    (("export", str(SAMPLE), "-o", "t.json"), "exporting"),
    (("recommend", str(SAMPLE)), "analysing"),
])
def test_a_long_command_shows_progress_on_a_terminal_only(args, step, tmp_path):
    """On a terminal (rich's FORCE_COLOR stands for one) stderr carries the progress line, which names the step;
    piped, nothing but the output."""
    shown = wb(*args, env={"FORCE_COLOR": "1"}, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "reading" in shown.stderr and step in shown.stderr, shown.stderr
    piped = wb(*args, cwd=tmp_path)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout, piped.stderr


def test_json_output_never_carries_progress():
    res = wb("analyze", str(SAMPLE), "--json", env={"FORCE_COLOR": "1"})
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert json.loads(res.stdout)["path"] == str(SAMPLE)


def test_version():
    import workbench

    res = wb("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"workbench {workbench.__version__}"
