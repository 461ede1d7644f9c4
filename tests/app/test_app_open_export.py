"""Opening a path from the app (checked on the server), Refresh, and the downloads (report, compile config).

Real runs (copies of bundled sample runs) and real requests through the Flask server, Host and Origin headers
included: a path outside the app's folders or through a link is refused with one line; ``allow_roots`` widens
where a typed path may lead; Refresh lists a run copied in after start; the report and the TOML download as
attachments, and only for listed run ids.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from workbench import rundir
from workbench.app.main import create_app
from workbench.app.store import RunStore, RunUnavailable

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_traces" / "gpu-launch-bound-before"


def _copy(dst: Path) -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} is absent")
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns(rundir.CACHE_DIR, "compile_config*.toml"))
    return dst


def test_open_a_path_inside_the_roots(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    deep = _copy(root / "a" / "b" / "c" / "d" / "run1")   # deeper than the 3 levels listed at start
    store = RunStore([root])
    assert store.ids() == []
    ids = store.open_path(str(deep))
    assert len(ids) == 1 and store.entry(ids[0]).path == deep
    assert store.run(ids[0]).count("kernels") > 0
    assert store.open_path(str(deep)) == ids, "opening it again lists it once"
    assert store.open_path("a/b/c/d/run1") == ids, "a path relative to the first root"


@pytest.mark.parametrize("case", ["outside", "link", "missing", "empty", "nul", "link_inside_leading_out"])
def test_open_a_path_refused_with_one_line(tmp_path, case):
    root = tmp_path / "runs"
    root.mkdir()
    elsewhere = _copy(tmp_path / "elsewhere")
    store = RunStore([root])
    text = {"outside": str(elsewhere), "missing": str(root / "nope"), "empty": "  ", "nul": "a\x00b"}.get(case)
    if case == "link":
        os.symlink(elsewhere, root / "link")
        text = str(root / "link")
    if case == "link_inside_leading_out":
        (root / "sub").mkdir()
        os.symlink(elsewhere, root / "sub" / "run")
        text = str(root / "sub")
    with pytest.raises(RunUnavailable) as err:
        store.open_path(text)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg
    assert store.ids() == [], "nothing listed"


def test_allow_root_lets_a_path_elsewhere_open(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    elsewhere = _copy(tmp_path / "elsewhere" / "run9")
    store = RunStore([root], allow_roots=[tmp_path / "elsewhere"])
    ids = store.open_path(str(elsewhere))
    assert ids and store.run(ids[0]).count("kernels") > 0
    assert store.real_path(ids[0]) == elsewhere


def test_refresh_finds_a_run_copied_in_after_start(tmp_path):
    root = tmp_path / "runs"
    _copy(root / "first")
    store = RunStore([root])
    assert store.ids() == ["first"]
    _copy(root / "second")
    assert store.refresh() == ["second"]
    assert store.ids() == ["first", "second"]
    assert store.refresh() == []


def test_downloads(tmp_path):
    root = tmp_path / "runs"
    _copy(root / "r")
    app = create_app([root], background=False)
    c = app.server.test_client()
    h = {"Host": "127.0.0.1:8050"}
    toml = c.get("/export/config?run=r", headers=h)
    assert toml.status_code == 200 and "attachment" in toml.headers["Content-Disposition"]
    assert "[compile]" in toml.get_data(as_text=True) or "#" in toml.get_data(as_text=True)
    rep = c.get("/export/report?run=r", headers=h)
    assert rep.status_code == 200 and rep.get_data(as_text=True).startswith("<!doctype html>")
    assert c.get("/export/report?run=../../etc", headers=h).status_code == 404
    assert c.get("/export/config?run=r", headers={"Host": "evil.example:8050"}).status_code == 403


def test_download_for_perfetto(tmp_path):
    """The Timeline's "Download for Perfetto" link serves ``workbench export``'s protobuf of the ranks and step on
    screen; it reads back through the perfetto protos with the run's kernels of that step, and a selection that is
    not numbers is refused."""
    from workbench import open as open_run
    from workbench.app.page_timeline import perfetto_href
    from workbench.export.readback import read_perfetto

    pytest.importorskip("perfetto")
    root = tmp_path / "runs"
    _copy(root / "r")
    app = create_app([root], background=False)
    c = app.server.test_client()
    h = {"Host": "127.0.0.1:8050"}
    href = perfetto_href("r", [0], "6")
    assert href == "/export/perfetto?run=r&ranks=0&steps=6"
    got = c.get(href, headers=h)
    assert got.status_code == 200 and got.headers["Content-Disposition"].endswith('r.pftrace"')
    trace = tmp_path / "r.pftrace"
    trace.write_bytes(got.get_data())
    back = read_perfetto(trace)
    assert not back.problems and back.slices.height > 0
    kernels = open_run(root / "r").kernels
    assert kernels.height > 0
    assert c.get("/export/perfetto?run=r&ranks=0;rm", headers=h).status_code == 404
    assert c.get("/export/perfetto?run=../r", headers=h).status_code == 404
