"""``workbench report``'s HTML tables read as the rest of the workbench: human column names and every value through
the formatter (:mod:`workbench.format`): no ``is_root`` or ``cause_id`` header, no raw nanoseconds (issue 32)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

import workbench
from workbench.report import build_diff_report, build_report, config_text, render_html

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "sample_traces"


def tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """(headers, rows of cells) of every table of the page, unescaped."""
    out = []
    for t in re.findall(r"<table>(.*?)</table>", page, re.S):
        head = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", t)]
        body = t.split("<tbody>", 1)[1]
        rows = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
                for r in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
        out.append((head, rows))
    return out


def check_readable(page: str) -> None:
    found = tables(page)
    assert found
    for head, rows in found:
        raw = [h for h in head if "_" in h]
        assert not raw, f"raw column names {raw} in {head}"
        for row in rows:
            for h, c in zip(head, row):
                assert not re.fullmatch(r"-?\d{5,}(\.\d+)?", c), f"{h}: {c!r} is a raw number"
                assert h != "config" or not c.startswith("{"), f"{h}: {c!r} is raw JSON"


@pytest.fixture(scope="module")
def planted_page() -> str:
    return render_html(build_report(workbench.open(TRACES / "h200x2-planted"), timeline=False), plotlyjs="cdn")


def test_a_run_report_has_human_columns_and_formatted_values(planted_page):
    check_readable(planted_page)
    heads = {h for head, _ in tables(planted_page) for h in head}
    assert {"finding", "cost", "cost basis", "world size", "span"} <= heads, heads
    cells = {c for _, rows in tables(planted_page) for row in rows for c in row}
    assert "2.63 s" in cells                      # the divergent recompile's cost, as analyze prints it
    assert "Divergent recompile" in cells
    # the config fix as the setting it makes (a torch 2.11 run: the whole source, as the fix matrix says ':0' does not act there)
    assert 'compiler.dynamic_sources = "L[\'args\'][0]"' in cells


def test_a_note_costs_no_time_in_the_report_as_everywhere(planted_page):
    """The planted run's collective drift is a note (zero cost): the report says "no time cost", as ``analyze`` and the
    Overview do, never a measured "0 ns"."""
    head, rows = next((h, r) for h, r in tables(planted_page) if "finding" in h and "cost" in h)
    finding, cost = head.index("finding"), head.index("cost")
    drift = [r for r in rows if r[finding] == "Collective drift"]
    assert drift and all(r[cost] == "no time cost" for r in drift), drift
    assert all(r[cost] != "0 ns" for r in rows), rows


def test_a_diff_report_has_human_columns_and_formatted_values():
    rep = build_diff_report(workbench.open(TRACES / "cpu-recompile-before"), workbench.open(TRACES / "cpu-recompile-after"))
    check_readable(render_html(rep, plotlyjs="cdn"))


def test_config_text():
    assert config_text('{"compiler": {"dynamic_sources": "L[\'x\']:0"}, "compile": {"mode": "max-autotune"}}') == \
        'compiler.dynamic_sources = "L[\'x\']:0"\ncompile.mode = "max-autotune"'
    assert config_text(None) is None and config_text("not json") == "not json"


def test_report_links_its_perfetto_trace(tmp_path):
    """``workbench report RUN -o PAGE --perfetto`` writes the run's Perfetto trace beside the page and links it as
    "Download for Perfetto" (issue 34 req 4); the trace reads back through the perfetto protos with every rank."""
    import subprocess
    import sys

    pytest.importorskip("perfetto")
    from workbench.export.readback import read_perfetto

    run = TRACES / "h200x2-fsdp2"
    if not run.is_dir():
        pytest.skip(f"{run} is absent")
    page = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "report", str(run), "-o", str(page), "--perfetto",
                           "--plotlyjs", "cdn", "--no-timeline"], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    assert "<a href='r.pftrace' download id='perfetto'>Download for Perfetto</a>" in page.read_text()
    back = read_perfetto(tmp_path / "r.pftrace")
    assert not back.problems
    shown = {p["labels"][0] for p in back.processes.values()}
    assert shown == {f"rank {r}" for r in workbench.open(run).ranks["rank"].to_list()}
    assert back.slices.height > 0
