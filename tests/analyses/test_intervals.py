import polars as pl

from workbench.analyses.intervals import covered_between, merge_intervals, union_length


def _iv(rows):
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64}, orient="row")


def test_merge_nested_overlapping_touching_and_zero_length():
    iv = _iv([(0, 0, 100), (0, 10, 20), (0, 90, 150), (0, 150, 160), (0, 300, 300), (0, 400, 410), (1, 5, 6)])
    m = merge_intervals(iv).collect()
    assert m.filter(pl.col("rank") == 0).select("start", "end").rows() == [(0, 160), (300, 300), (400, 410)]
    assert union_length(iv).collect().sort("rank").rows() == [(0, 170), (1, 1)]


def test_covered_between_clips_to_each_range():
    iv = _iv([(0, 0, 100), (0, 200, 300)])
    ranges = pl.DataFrame({"rank": [0, 0, 0, 0], "start": [-50, 50, 150, 250], "end": [0, 250, 160, 1000]},
                          schema={"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64})
    out = covered_between(iv, ranges).collect()
    assert out["covered_ns"].to_list() == [0, 100, 0, 50]


def test_covered_between_groups_do_not_mix():
    iv = _iv([(0, 0, 100), (1, 0, 10)])
    ranges = pl.DataFrame({"rank": [1, 2], "start": [0, 0], "end": [100, 100]},
                          schema={"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64})
    assert covered_between(iv, ranges).collect()["covered_ns"].to_list() == [10, 0]
