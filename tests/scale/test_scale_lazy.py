"""A Run keeps events and kernels in the per-rank cache: the analyses, ``info`` and ``ingest`` give the same
results as on whole in-memory tables without loading them."""

from __future__ import annotations

import shutil
import types
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import workbench
from workbench.analyses.breakdown import KERNEL_WAIT_NS
from workbench.analyses.per_rank import event_tables

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p for p in (REPO / "sample_traces").iterdir() if p.is_dir() and any(p.rglob("*.json.gz")))
_TABLES = ("path", "ranks", "events", "kernels", "collectives", "steps", "compiles", "fingerprints", "skipped",
           "problems", "meta")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".workbench"))
    return dst


def _whole(run: workbench.Run) -> types.SimpleNamespace:
    """The same run with every table held whole (what the analyses saw before the Run became lazy)."""
    return types.SimpleNamespace(**{k: getattr(run, k) for k in _TABLES})


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], pl.DataFrame):
            assert_frame_equal(a[k], b[k], check_exact=True)
        else:
            assert a[k] == b[k], k


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_rank_batches_give_the_whole_table_results(sample: Path, tmp_path: Path) -> None:
    root = _copy(sample, tmp_path / sample.name)
    run = workbench.open(root)
    one_by_one = event_tables(run, run.steps, "steady", KERNEL_WAIT_NS, max_events=1)   # one rank per batch
    together = event_tables(run, run.steps, "steady", KERNEL_WAIT_NS)                  # all ranks in one batch
    assert not run.loaded("events") and not run.loaded("kernels")
    whole = event_tables(_whole(run), run.steps, "steady", KERNEL_WAIT_NS)               # now read whole
    _equal(whole, one_by_one)
    _equal(whole, together)


@pytest.mark.parametrize("sample", SAMPLES[:3], ids=[p.name for p in SAMPLES[:3]])
def test_info_and_counts_without_loading_events(sample: Path, tmp_path: Path) -> None:
    root = _copy(sample, tmp_path / sample.name)
    workbench.open(root)                                   # builds the cache
    lazy = workbench.open(root)
    info = lazy.info()
    assert lazy.count("events") == info["events"] and lazy.count("kernels") == sum(info["kernels"].values())
    assert not lazy.loaded("events") and not lazy.loaded("kernels")
    eager = workbench.open(root, cache=False)
    assert info == eager.info()                            # the same summary from the per-file counts
    assert_frame_equal(lazy.events, eager.events)          # and the same tables when asked for
    assert_frame_equal(lazy.kernels, eager.kernels)
    assert_frame_equal(lazy.scan("kernels").collect(), eager.kernels)
    per_rank = pl.concat([t["kernels"] for _, t in lazy.per_rank("kernels")])
    assert_frame_equal(per_rank.sort("rank", maintain_order=True), eager.kernels.sort("rank", maintain_order=True))
