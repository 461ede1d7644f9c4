"""A diff says when either side was read with problems: a truncated AFTER trace is never "comparable".

BEFORE is ``sample_traces/cpu-recompile-after``; AFTER the same recording with rank 1's trace cut short (a copy).
The comparability verdict carries a ``read problems`` warning naming the file (every verdict carries it as its
caveat), ``workbench diff`` prints the problem, and ``--json`` lists each side's problems.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import workbench
from workbench.analyses.diff import RunData, comparability, diff_runs
from workbench.analyses.summary import analysis_tables

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "cpu-recompile-after"


def _data(path: Path) -> RunData:
    run = workbench.open(path, on_error="skip")
    return RunData.from_run(run, analysis_tables(run), name=str(path))


@pytest.fixture(scope="module")
def truncated(tmp_path_factory) -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent")
    dst = tmp_path_factory.mktemp("diff") / "after-truncated"
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns(".workbench", "*.toml"))
    (trace,) = (dst / "rank1" / "trace").glob("*.json.gz")
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size // 2])
    return dst


def test_a_truncated_after_trace_is_a_warning_naming_the_file(truncated):
    before, after = _data(SAMPLE), _data(truncated)
    assert after.problems and not before.problems
    clean = comparability(before, _data(SAMPLE))
    assert clean.level == "comparable" and not [x for x in clean.differences if x.what == "read problems"]
    d = diff_runs(before, after)
    assert d.comparability.level == "warnings"
    (row,) = [x for x in d.comparability.differences if x.what == "read problems"]
    assert row.before == "none" and row.effect == "warning"
    assert row.after.startswith("1 file problem(s): ") and "rank1" in row.after and ".json.gz" in row.after
    assert all("read problems" in f.caveat for f in d.findings)
    assert d.problems_after == after.problems and d.problems_before == ()
    assert "differs: read problems" in d.headline()


def test_dropped_events_are_a_note():
    """Events a side dropped while reading (not those kept in another form) are shown, as a note."""
    empty = pl.DataFrame()
    base = dict(steps=empty, kernels=empty, events=empty, collectives=empty, compiles=empty, fingerprints=empty,
                ranks=empty, breakdown=empty, findings=empty)
    skipped = pl.DataFrame({"rank": [0, 0], "file": ["a", "a"], "reason": ["negative 'dur': dropped",
                                                                             "flow arrow (link kept as correlation)"],
                            "count": [3, 100]})
    b = RunData(name="b", **base)
    a = RunData(name="a", **base, skipped=skipped)
    c = comparability(b, a)
    assert c.level == "comparable"
    (row,) = c.differences
    assert (row.what, row.before, row.after, row.effect) == ("events dropped while reading", "0", "3", "note")


def test_the_cli_prints_each_sides_read_problems(truncated):
    res = subprocess.run([sys.executable, "-m", "workbench.cli", "diff", str(SAMPLE), str(truncated)],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "Comparability: warnings" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("read problem in AFTER: ")]
    assert len(lines) == 1 and str(truncated / "rank1" / "trace") in lines[0]
    js = subprocess.run([sys.executable, "-m", "workbench.cli", "diff", str(SAMPLE), str(truncated), "--json"],
                        capture_output=True, text=True, timeout=600, cwd=REPO)
    out = json.loads(js.stdout)
    assert out["comparability"]["level"] == "warnings" and len(out["problems_after"]) == 1
    assert out["problems_before"] == []
