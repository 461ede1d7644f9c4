"""The README's examples, run: every ```console block (``$ command`` lines, each followed by what it prints) and
every ```pycon block (``>>>`` lines, run as a doctest: runs of spaces and line breaks compare equal, so long lines may wrap),
compared with what the commands print now.

    python scripts/readme_examples.py            # check: one line per example, exit 1 on a difference
    python scripts/readme_examples.py --write    # rewrite the console outputs in README.md with what they print

Console commands run through ``bash`` with this Python's ``bin`` folder first on ``PATH`` (as after ``source
.venv/bin/activate``), ``COLUMNS=100``, in a scratch folder holding a link to ``sample_traces`` (so ``-o
fixes.toml`` writes nowhere in the checkout). Python examples run in the checkout's root. In expected output, ``...``
stands for any text (doctest's ELLIPSIS, which may span lines); trailing spaces are ignored. ``--write`` keeps a
block's ``...`` lines only where the output still matches them; otherwise it writes the whole output.
"""

from __future__ import annotations

import argparse
import doctest
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COLUMNS = 100
_FENCE = re.compile(r"^```(console|pycon)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


@dataclass
class Example:
    """One ``$ command`` of a console block, or one whole pycon block."""

    kind: str          # "console" or "pycon"
    line: int          # 1-based line of the command (pycon: of the block) in the README
    source: str        # the command line, or the block's text
    want: str          # expected output (console)
    span: tuple[int, int] = (0, 0)   # character range of ``want`` in the README (console)


def examples(text: str) -> list[Example]:
    """The README's examples, in order."""
    out: list[Example] = []
    for m in _FENCE.finditer(text):
        kind, body, body_at = m.group(1), m.group(2), m.start(2)
        first = text.count("\n", 0, body_at) + 1
        if kind == "pycon":
            out.append(Example(kind, first, body, ""))
            continue
        lines = body.splitlines(keepends=True)
        offsets = [body_at + sum(len(x) for x in lines[:i]) for i in range(len(lines) + 1)]
        cmds = [i for i, ln in enumerate(lines) if ln.startswith("$ ")]
        for j, i in enumerate(cmds):
            end = cmds[j + 1] if j + 1 < len(cmds) else len(lines)
            out.append(Example(kind, first + i, lines[i][2:].rstrip("\n"), "".join(lines[i + 1:end]),
                               (offsets[i + 1], offsets[end])))
    return out


def _normal(text: str) -> str:
    return "".join(ln.rstrip() + "\n" for ln in text.splitlines())


def matches(want: str, got: str) -> bool:
    """``got`` is what ``want`` shows (``...`` for any text; trailing spaces ignored)."""
    return doctest.OutputChecker().check_output(_normal(want), _normal(got), doctest.ELLIPSIS)


def run_console(cmd: str, scratch: Path) -> str:
    """What ``cmd`` prints (stdout then stderr), run as the module docstring says."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               COLUMNS=str(COLUMNS), LINES="50", TERM="dumb", NO_COLOR="1", PYTHONHASHSEED="0")
    env.pop("FORCE_COLOR", None)
    res = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
    return res.stdout + res.stderr


def run_pycon(ex: Example) -> str:
    """The doctest report of a pycon block (empty when every example printed what it shows)."""
    test = doctest.DocTestParser().get_doctest(ex.source, {}, f"README.md:{ex.line}", str(README), ex.line - 1)
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        runner.run(test, out=report.append, clear_globs=True)
    finally:
        os.chdir(cwd)
    return "".join(report)


def scratch_dir(parent: Path) -> Path:
    """A folder where the console examples run: a link to the checkout's ``sample_traces`` and nothing else."""
    (parent / "sample_traces").symlink_to(ROOT / "sample_traces", target_is_directory=True)
    return parent


def check(text: str) -> list[str]:
    """One line per example that does not print what the README shows (with both texts)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = scratch_dir(Path(tmp))
        for ex in examples(text):
            if ex.kind == "pycon":
                report = run_pycon(ex)
                if report:
                    problems.append(f"README.md:{ex.line}: the Python example printed something else:\n{report}")
                continue
            got = run_console(ex.source, scratch)
            if not matches(ex.want, got):
                problems.append(f"README.md:{ex.line}: `{ex.source}` printed\n{got}\n--- the README shows\n{ex.want}")
    return problems


def write(text: str) -> str:
    """``text`` with each console example's output replaced by what it prints (where it no longer matches)."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = scratch_dir(Path(tmp))
        pieces: list[str] = []
        at = 0
        for ex in examples(text):
            if ex.kind != "console":
                continue
            got = run_console(ex.source, scratch)
            if matches(ex.want, got):
                continue
            pieces += [text[at:ex.span[0]], _normal(got)]
            at = ex.span[1]
        return "".join(pieces) + text[at:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="rewrite the console outputs in README.md")
    args = p.parse_args(argv)
    text = README.read_text()
    if args.write:
        new = write(text)
        if new != text:
            README.write_text(new)
            print("README.md: console outputs rewritten")
    problems = check(README.read_text())
    for prob in problems:
        print(prob)
    n = len(examples(README.read_text()))
    print(f"{n - len(problems)} of {n} README examples print what the README shows")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
