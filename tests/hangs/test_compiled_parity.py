"""Collective parity from compile logs: tlparse's real 3-rank ``multi_rank_schedule`` logs agree graph by graph;
the same logs with one functional all_reduce taken out of one rank's graph are flagged, with rank and compile id."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from workbench.analyses.hangs import compiled_collective_findings
from workbench.flight_recorder import GRAPH_COLLECTIVES, read_graph_collectives


@pytest.fixture()
def logs(data_dir) -> list[Path]:
    return sorted((data_dir / "compile_logs/tlparse/multi_rank_schedule").glob("*.log.gz"))   # read as they are


def _frame(paths: list[Path]) -> pl.DataFrame:
    rows = [r for p in paths for r in read_graph_collectives(p, None)]
    return pl.DataFrame(rows, schema=GRAPH_COLLECTIVES)


def test_real_logs_agree(logs):
    df = _frame(logs)
    assert sorted(df["rank"].unique().to_list()) == [0, 1, 2]
    per = df.group_by("rank", "compile_id").len().sort("rank", "compile_id")
    assert per.filter(pl.col("compile_id") == "0/0")["len"].to_list() == [3, 3, 3]
    assert set(df["op"].to_list()) >= {"all_reduce"}
    assert compiled_collective_findings(df) == []


def test_one_rank_missing_a_compiled_collective_is_flagged(logs, tmp_path):
    copies = []
    for p in logs:
        q = tmp_path / p.name.removesuffix(".gz")
        q.write_bytes(gzip.decompress(p.read_bytes()))
        copies.append(q)
    victim = next(q for q in copies if "rank_2" in q.name)
    lines = victim.read_text().splitlines(keepends=True)
    in_graph, dropped = False, None
    for i, line in enumerate(lines):
        if not line.startswith("\t"):
            in_graph = '"dynamo_output_graph"' in line and '"frame_id": 0' in line
        elif in_graph and " = torch.ops._c10d_functional.all_reduce" in line and "#" not in line and dropped is None:
            dropped = i
    assert dropped is not None
    del lines[dropped]
    victim.write_text("".join(lines))
    found = compiled_collective_findings(_frame(copies))
    assert len(found) == 1, [f.message for f in found]
    f = found[0]
    assert f.kind == "compiled_desync" and f.ranks == (2,) and f.evidence.compile_id == "0/0"
    assert len(f.evidence.by_rank[2]) == len(f.evidence.by_rank[0]) - 1
    assert f.severity == "high"        # a hang risk, whatever it costs
