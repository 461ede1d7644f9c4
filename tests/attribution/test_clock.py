"""Clock alignment across hosts (issue 30 req 2), on a real recorded run: rank 1's every time is moved by +Δ and its
host renamed, as if it ran on another machine whose clock is Δ ahead; the analysis finds Δ from the collectives'
completions (the profiler window's), says the residual, and names the same late rank for the same steps."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
from pathlib import Path

import orjson
import polars as pl
import pytest

pytest.importorskip("torch")
pytest.importorskip("workbench_zoo", reason="the fault zoo is not installed (pip install -e ./zoo)")

from workbench_zoo.generated import Case, Plant, run_case  # noqa: E402

import workbench  # noqa: E402
from workbench.analyses.critical_path import critical_path_of  # noqa: E402
from workbench.analyses.late_ranks import late_rank_findings  # noqa: E402
from workbench.flight_recorder import safe_unpickle  # noqa: E402

pytestmark = pytest.mark.slow
DELTA = 7_300_000_123          # rank 1's clock runs 7.3 s ahead
CASE = Case(5, 2, 7, "explicit", (Plant(1, "before_forward", "sleep", 150.0, (1, 2, 3, 4, 5)),), fast=True)


def _shift_pickle(path: Path) -> None:
    raw = path.read_bytes()
    zipped = raw[:2] == b"\x1f\x8b"
    doc = safe_unpickle(gzip.decompress(raw) if zipped else raw, path)
    for e in doc["entries"]:
        for k in ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"):
            if e.get(k):
                e[k] += DELTA
    out = pickle.dumps(doc, protocol=2)
    path.write_bytes(gzip.compress(out) if zipped else out)


def _shift_jsonl(path: Path, keys: tuple[str, ...]) -> None:
    rows = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
    for r in rows:
        for k in keys:
            if isinstance(r.get(k), int):
                r[k] += DELTA
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def shifted_copy(run: Path, out: Path) -> Path:
    """``run`` copied to ``out`` with rank 1 on "host-b", every one of its times moved by +DELTA (compile logs
    left out of both ranks: their times are not rewritten here)."""
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(".workbench", "compile"))
    r1 = out / "rank1"
    _shift_jsonl(r1 / "steps.jsonl", ("start_ns", "end_ns"))
    for p in [*(r1 / "hang").glob("fr_trace_rank_*"), *(r1 / "hang" / "fr").glob("*.pkl.gz")]:
        _shift_pickle(p)
    for name in ("events.jsonl", "heartbeat.jsonl"):
        if (r1 / "hang" / name).is_file():
            _shift_jsonl(r1 / "hang" / name, ("time_ns",))
    if (r1 / "trace" / "exports.jsonl").is_file():
        _shift_jsonl(r1 / "trace" / "exports.jsonl", ("start_ns", "end_ns"))
    if (r1 / "gc.jsonl").is_file():
        _shift_jsonl(r1 / "gc.jsonl", ("start_ns", "end_ns"))
    for t in (r1 / "trace").glob("*.json.gz"):
        doc = json.loads(gzip.decompress(t.read_bytes()))
        doc["baseTimeNanoseconds"] = int(doc["baseTimeNanoseconds"]) + DELTA
        t.write_bytes(gzip.compress(json.dumps(doc).encode()))
    fp = json.loads((r1 / "fingerprint.json").read_text())
    fp["host"] = "host-b"
    (r1 / "fingerprint.json").write_text(json.dumps(fp))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    from workbench_zoo._launch import shared_launcher

    tmp = tmp_path_factory.mktemp("clock")
    with shared_launcher():
        truth = run_case(CASE, tmp / "run")
    assert all(c == 0 for c in truth["returncodes"].values()), truth["returncodes"]
    return tmp / "run", shifted_copy(tmp / "run", tmp / "shifted")


def test_the_offset_of_the_shifted_host_is_found(runs) -> None:
    _, shifted = runs
    run = workbench.open(shifted)
    hosts = set(run.ranks["host"].to_list())
    assert "host-b" in hosts and len(hosts) == 2
    cp = critical_path_of(run)
    clock = cp.clock.filter(pl.col("host") == "host-b").row(0, named=True)
    ref = cp.clock.filter(pl.col("host") != "host-b").row(0, named=True)
    assert clock["method"] == "collective completions" and clock["samples"] >= 2
    # found within what the completions themselves say of their agreement
    assert abs(clock["offset_ns"] - DELTA) <= max(2 * clock["p90_residual_ns"], 2 * (ref["p90_residual_ns"] or 0),
                                                  1_000_000)
    assert not cp.notes


def test_the_same_late_rank_and_steps_after_alignment(runs) -> None:
    base, shifted = runs
    got = []
    for path in (base, shifted):
        run = workbench.open(path)
        found = late_rank_findings(critical_path_of(run), steps=run.steps)
        got.append(next(f for f in found if f.evidence.rank == 1))
    a, b = got
    assert a.evidence.rank == b.evidence.rank == 1
    assert a.steps == b.steps and set(a.steps) >= {1, 2, 3, 4, 5} - {0}
    assert b.cost.ns == pytest.approx(a.cost.ns, rel=0.1)
