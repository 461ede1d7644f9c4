"""What the command line prints: control characters from inputs are escaped in every line (names from traces,
compile logs and Flight Recorder dumps, file names, problems), and every failure is one line without a class name.

A run whose collective, op and compiled-frame names, dump frames and a file name hold a clear-screen (``ESC[2J``),
a set-window-title (``ESC]0;title BEL``), a carriage return, a C1 CSI and a right-to-left override is fed to
``info``, ``analyze``, ``diff``, ``recommend`` and ``report`` (text and ``--json``); their stdout and stderr bytes
must hold none of those characters raw, and the names must still be there, escaped.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import describe_failure, json_printable, printable, stage

EVIL = "\x1b[2J\x1b]0;title\x07\r\x9b\u202e<script>alert(1)</script>"
EVIL_JSON = json.dumps(EVIL)[1:-1]          # the same, as JSON text inside a string
EVIL_FILE = "\x1b[2J\x1b]0;title\x07\r"      # what a file name can hold of it
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, repo_dir) -> Path:
    """cpu-recompile-before with hostile names in its traces, compile logs and a Flight Recorder dump."""
    dst = tmp_path_factory.mktemp("term") / "run"
    shutil.copytree(repo_dir / "sample_traces" / "cpu-recompile-before", dst,
                    ignore=shutil.ignore_patterns(".workbench", "*.toml"))
    for gz in dst.rglob("*.json.gz"):
        text = gzip.decompress(gz.read_bytes()).decode()
        text = text.replace("all_reduce", "all_reduce" + EVIL_JSON).replace("aten::mm", "aten::mm" + EVIL_JSON)
        gz.write_bytes(gzip.compress(text.encode()))
    for log in dst.rglob("*.log"):
        log.write_text(log.read_text().replace('"inner"', f'"inner{EVIL_JSON}"'))
    hang = dst / "rank0" / "hang"
    hang.mkdir()
    entry = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
             "profiling_name": "gloo:all_reduce" + EVIL, "time_created_ns": 1_790_000_000_000_000_000,
             "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]], "output_dtypes": ["Float"],
             "state": "scheduled", "retired": False, "timeout_ms": 1000, "is_p2p": False,
             "frames": [{"name": "train" + EVIL, "filename": "/home/u/train.py", "line": 3}]}
    (hang / "fr_trace_rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [entry], "pg_config": {},
                                                         "pg_status": {}}))
    return dst


@pytest.fixture(scope="module")
def hostile_bad_run(hostile_run) -> Path:
    """The same, plus a broken trace whose file name holds the escapes: a problem line (or the one error line)."""
    dst = hostile_run.parent / "bad-run"
    shutil.copytree(hostile_run, dst, ignore=shutil.ignore_patterns(".workbench"))
    (dst / "rank0" / "trace" / f"rank0{EVIL_FILE}.pt.trace.json").write_text("{ not json")
    return dst


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in _strings(k) + _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _cli(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)], capture_output=True, timeout=600,
                          env=env)


def _clean(res: subprocess.CompletedProcess, what: str) -> str:
    out = (res.stdout + res.stderr).decode()
    for c in RAW:
        assert c not in out, f"{what}: {c!r} printed raw: {out[:2000]}"
    assert "Traceback" not in out and "Error:" not in out, f"{what}: {out[-2000:]}"
    return out


def test_info_and_analyze_escape_every_name(hostile_bad_run):
    info = _cli("info", hostile_bad_run, "--skip-bad")
    out = _clean(info, "info")
    assert info.returncode == 0
    assert "all_reduce\\x1b[2J\\x1b]0;title\\x07\\r\\x9b\\u202e<script>" in out   # the dump's collective
    assert "problem:" in out and "rank0\\x1b[2J\\x1b]0;title\\x07" in out          # the file name
    analyze = _cli("analyze", hostile_bad_run, "--skip-bad")
    out = _clean(analyze, "analyze")
    assert analyze.returncode == 0 and "inner\\x1b[2J\\x1b]0;title\\x07\\r\\x9b\\u202e<script>" in out
    for args in (("info", hostile_bad_run, "--json", "--skip-bad"), ("analyze", hostile_bad_run, "--json",
                                                                      "--skip-bad")):
        res = _cli(*args)
        _clean(res, " ".join(map(str, args)))
        assert res.returncode == 0
        assert any(EVIL in s for s in _strings(json.loads(res.stdout)))   # JSON keeps the names exactly


def test_diff_recommend_and_report_escape_every_name(hostile_run, hostile_bad_run, repo_dir, tmp_path):
    before = repo_dir / "sample_traces" / "cpu-recompile-before"
    diff = _cli("diff", before, hostile_bad_run)
    out = _clean(diff, "diff")
    assert diff.returncode == 0 and "inner\\x1b[2J" in out and "read problem in AFTER:" in out
    djson = _cli("diff", before, hostile_bad_run, "--json")
    _clean(djson, "diff --json")
    parsed = json.loads(djson.stdout)
    assert any("rank0\x1b[2J\x1b]0;title\x07" in p for p in parsed["problems_after"])   # JSON keeps the text
    rec = _cli("recommend", hostile_bad_run)
    _clean(rec, "recommend")
    assert rec.returncode == 1
    assert _one_line(rec).startswith(f"error: {hostile_bad_run}/rank0/trace/rank0\\x1b[2J\\x1b]0;title\\x07")
    rec_ok = _cli("recommend", hostile_run)
    out = _clean(rec_ok, "recommend")
    assert rec_ok.returncode == 0 and "Recommendations for" in out
    html = tmp_path / "r.html"
    rep = _cli("report", hostile_run, "-o", html)
    out = _clean(rep, "report")
    assert rep.returncode == 0 and out.startswith(f"wrote {html}")
    page = html.read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)" in page   # HTML-escaped
    rep_json = _cli("report", hostile_run, "--json")
    _clean(rep_json, "report --json")
    assert json.loads(rep_json.stdout)


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in res.stderr.decode().splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    return lines[0]


# ------------------------------------------------------------------------------------ the escaping itself
def test_printable_escapes_controls_and_keeps_the_rest():
    assert (printable("a\x1b[2Jb\x07\r\t\x00\x7f\x9b\u202ec\u2028")
            == "a\\x1b[2Jb\\x07\\r\\t\\x00\\x7f\\x9b\\u202ec\\u2028")
    assert printable("line 1\nline 2") == "line 1\\nline 2"
    assert printable("line 1\nline 2", newlines=True) == "line 1\nline 2"
    assert printable("µs → ü 日本 [bold]") == "µs → ü 日本 [bold]"
    text = json.dumps({"k": "a\x7fb\x9bc\u202ed"}, ensure_ascii=False)
    safe = json_printable(text)
    assert json.loads(safe) == {"k": "a\x7fb\x9bc\u202ed"} and not any(c in safe for c in "\x7f\x9b\u202e")


def test_the_console_reads_no_markup_from_names():
    """A name holding rich markup prints as text: no hyperlink (OSC 8) or style comes out of it."""
    from rich.table import Table

    from workbench.commands.output import console, markup

    buf = io.StringIO()
    con = console(file=buf, force_terminal=True, width=200, color_system="truecolor")
    name = "[link=https://evil.example]x[/link][bold red]y\x1b]0;t\x07"
    t = Table(title=name)
    t.add_column("name")
    t.add_row(name)
    con.print(t)
    con.print(name)
    con.print(f"[bold]ok[/bold] {markup(name)}", markup=True)
    out = buf.getvalue()
    assert "\x1b]" not in out and "\x07" not in out            # no OSC at all: no hyperlink, no window title
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)                 # the console's own colours (SGR) taken out
    assert plain.count("[link=https://evil.example]x[/link]") == 4 and "\\x1b]0;t\\x07" in plain


# ------------------------------------------------------------------------------------ failures: one line
def _main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", *argv])
    monkeypatch.setitem(cli._state, "debug", False)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.mark.parametrize("boom", [ValueError("invalid literal for int() with base 10: 'two'"), KeyError("rank"),
                                  RecursionError("maximum recursion depth exceeded"), MemoryError(),
                                  ZeroDivisionError("division by zero\x1b[2J")])
def test_an_internal_error_is_one_line_naming_the_input_and_stage(monkeypatch, capsys, repo_dir, boom):
    import workbench.analyses.summary as summary_mod

    def broken(*a, **k):
        raise boom

    monkeypatch.setattr(summary_mod, "analyze", broken)
    path = repo_dir / "sample_traces" / "cpu-recompile-before"
    code, out, err = _main(monkeypatch, capsys, "analyze", str(path))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 1 and len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"error: {path}: analysing failed: ") and "--debug" in line, line
    assert type(boom).__name__ not in line and "Traceback" not in err and "\x1b" not in line
    words = {KeyError: "missing 'rank'", RecursionError: "nested too deeply", MemoryError: "out of memory"}
    assert words.get(type(boom), str(boom).split("\x1b")[0]) in line


def test_debug_shows_the_traceback(monkeypatch, capsys, repo_dir):
    import workbench.analyses.summary as summary_mod

    monkeypatch.setattr(summary_mod, "analyze", lambda *a, **k: 1 / 0)
    from workbench import cli

    monkeypatch.setattr(sys, "argv", ["workbench", "--debug", "analyze", str(repo_dir / "sample_traces" /
                                                                          "cpu-recompile-before")])
    with pytest.raises(ZeroDivisionError):
        cli.main()


def test_bad_input_exits_1_and_usage_errors_exit_2(monkeypatch, capsys, tmp_path):
    missing = tmp_path / "no\x1b[2Jsuch"
    code, out, err = _main(monkeypatch, capsys, "info", str(missing))
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {tmp_path}/no\\x1b[2Jsuch"), err
    code, out, err = _main(monkeypatch, capsys, "analyze")
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("Usage: ") and "analyze [OPTIONS]" in lines[0]
    assert lines[-1].startswith("error: ")
    assert "'PATH'" in lines[-1]
    code, out, err = _main(monkeypatch, capsys, "analyze", str(tmp_path), "--window", "bogus\x1b]0;t\x07")
    assert code == 2 and "--window must be one of" in err and "\x1b" not in err and "\x07" not in err
    code, out, err = _main(monkeypatch, capsys, "no-such-command")
    assert code == 2 and "error: " in err


def test_stage_names_the_innermost_work():
    with pytest.raises(ValueError) as exc, stage("reading", "/a"), stage("parsing", "/a/b.json"):
        raise ValueError("bad")
    assert describe_failure(exc.value) == "/a/b.json: parsing failed: bad"
    assert describe_failure(KeyError("x")) == "running the command failed: missing 'x'"
