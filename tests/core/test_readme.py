"""The README's examples print what the README shows (``scripts/readme_examples.py``: every ```console block's
``$`` commands, every ```pycon block as a doctest), and the commands it tells a user to run exist as written."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_examples", REPO / "scripts" / "readme_examples.py")
rx = sys.modules.setdefault("readme_examples", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(rx)

TEXT = rx.README.read_text()
EXAMPLES = rx.examples(TEXT)


def test_the_readme_has_checked_examples():
    kinds = [e.kind for e in EXAMPLES]
    assert "console" in kinds and "pycon" in kinds, kinds


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return rx.scratch_dir(tmp_path_factory.mktemp("readme"))


@pytest.mark.parametrize("ex", EXAMPLES, ids=[f"line{e.line}" for e in EXAMPLES])
def test_example_prints_what_the_readme_shows(ex, scratch):
    if ex.kind == "pycon":
        report = rx.run_pycon(ex)
        assert not report, report
        return
    got = rx.run_console(ex.source, scratch)
    assert rx.matches(ex.want, got), (f"README.md:{ex.line}: `{ex.source}` printed:\n{got}\n"
                                      f"the README shows:\n{ex.want}\n(python scripts/readme_examples.py --write)")


def test_parser_reads_commands_outputs_and_ellipsis():
    text = ("x\n```console\n$ echo a\na\n$ printf 'b\\nc\\nd\\n'\nb\n...\nd\n```\n"
            "```pycon\n>>> 1 + 1\n2\n```\n```bash\n$ not checked\n```\n")
    got = rx.examples(text)
    assert [(e.kind, e.line, e.source) for e in got] == [("console", 3, "echo a"), ("console", 5, "printf 'b\\nc\\nd\\n'"),
                                                         ("pycon", 11, ">>> 1 + 1\n2\n")]
    assert got[0].want == "a\n" and text[slice(*got[0].span)] == "a\n"
    assert rx.matches(got[1].want, "b\nc\nd\n") and not rx.matches(got[1].want, "b\nc\n")
    assert rx.matches("a\n", "a   \n")                    # trailing spaces (rich pads table rows) do not count


def _readme_commands(section: str) -> list[str]:
    """The ``workbench <command>`` names listed in the README's ``bash`` block under ``section``."""
    part = TEXT[TEXT.index(section):]
    block = re.search(r"```bash\n(.*?)```", part, re.S).group(1)
    return sorted({m.group(1) for m in re.finditer(r"^workbench (\w+)", block, re.M)})


@pytest.mark.parametrize("command", _readme_commands("## Use it"))
def test_every_command_the_readme_lists_exists(command):
    """``workbench <command> --help`` answers for each command of "Use it" (after activating the venv)."""
    exe = Path(sys.executable).parent / "workbench"
    res = subprocess.run([str(exe), command, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "usage" in res.stdout.lower()
