"""The cache: a same-size, same-mtime rewrite makes a new entry; a full disk or unwritable cache folders load the
run uncached with one line, leaving no partial entry (issue 10, items 5 and 9)."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

import workbench
from workbench import cache


def _traces(data_dir: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted((data_dir / "traces/hta/trace_filter").glob("*.json.gz")):
        shutil.copyfile(f, dst / f.name)
    return dst


def _no_tmp_left(root: Path) -> None:
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_same_size_same_mtime_rewrite_is_seen(tmp_path: Path, data_dir: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    src = next((data_dir / "traces/hta/trace_filter").glob("sampled_rank-0*.json.gz"))
    f = d / "rank-0.json"
    data = gzip.decompress(src.read_bytes())
    f.write_bytes(data)
    before = workbench.open(d)
    st = f.stat()
    # rewrite one kernel's duration in place: same length, same size, and the old mtime put back
    at = data.index(b'"dur": ', len(data) // 2) + len(b'"dur": ')
    digit = data[at:at + 1]
    assert digit.isdigit()
    new = data[:at] + (b"9" if digit != b"9" else b"8") + data[at + 1:]
    f.write_bytes(new)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    after = workbench.open(d)
    fresh = workbench.open(d, cache=False)
    assert_frame_equal(after.events, fresh.events)           # the new content, not the stale entry
    assert not before.events.equals(after.events)
    assert len(list((d / ".workbench" / "kineto").iterdir())) == 2


def test_content_fingerprint_sees_a_change_in_a_large_gzip_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    body = b"".join(b'{"ph": "X", "ts": %d, "dur": 1},' % i for i in range(900_000))
    a.write_bytes(gzip.compress(body, 1))
    b.write_bytes(gzip.compress(body.replace(b'"ts": 450000,', b'"ts": 450001,'), 1))
    assert a.stat().st_size > (1 << 20)
    fa, fb = cache.content_fingerprint(a, a.stat().st_size), cache.content_fingerprint(b, b.stat().st_size)
    assert fa != fb                          # the gzip trailer (CRC32 of the content) is always hashed
    assert fa == cache.content_fingerprint(a, a.stat().st_size)


def test_unwritable_cache_dirs_run_uncached_with_one_line(tmp_path: Path, data_dir: Path, monkeypatch) -> None:
    d = _traces(data_dir, tmp_path / "ro")
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-dir"))    # the user cache dir cannot be made
    d.chmod(0o555)
    try:
        run = workbench.open(d)
        res = subprocess.run([sys.executable, "-m", "workbench.cli", "info", str(d)], capture_output=True,
                             text=True, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "not-a-dir")},
                             timeout=600)
    finally:
        d.chmod(0o755)
    assert [p for p in run.problems if p.startswith("cache:")] == [
        p for p in run.problems if "can be written" in p]
    assert len([p for p in run.problems if p.startswith("cache:")]) == 1
    assert_frame_equal(run.events, workbench.open(d, cache=False).events)
    assert res.returncode == 0, res.stderr
    assert "tables are read uncached" in res.stdout + res.stderr and "Traceback" not in res.stderr
    assert not (d / ".workbench").exists()


@pytest.fixture
def full_fs(tmp_path: Path):
    """A real full filesystem: a 1 MiB tmpfs mounted under tmp_path (needs root and mount rights)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_loads_uncached_with_one_line(full_fs: Path, data_dir: Path) -> None:
    d = _traces(data_dir, full_fs / "run")
    (d / ".workbench" / "kineto").mkdir(parents=True)
    fd = os.open(full_fs / "filler", os.O_WRONLY | os.O_CREAT)   # fill what is left, up to the last block
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    run = workbench.open(d, on_error="skip")
    lines = [p for p in run.problems if p.startswith("cache:")]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "read uncached" in lines[0], run.problems
    assert "could not be read" not in " ".join(run.problems)
    assert run.ranks.height == 2
    assert_frame_equal(run.kernels, workbench.open(d, cache=False).kernels)
    _no_tmp_left(d / ".workbench")
    assert not list((d / ".workbench" / "kineto").iterdir())
    res = subprocess.run([sys.executable, "-m", "workbench.cli", "ingest", str(d), "--skip-bad"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "ingested 2 rank(s)" in res.stdout and "No space left on device" in res.stderr
    _no_tmp_left(d / ".workbench")
