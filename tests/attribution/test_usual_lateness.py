"""A rank late every step stays late by as much in the step the profiler's background export overlaps: the export
takes only what goes beyond its usual lateness (``late_ranks._usual_lateness_kept``). Seen on a loaded CI host: a
37 ms optimizer plant in every step, its last step's 37 ms mostly read as the export's, the step left unnamed."""

from __future__ import annotations

import polars as pl

from workbench.analyses.critical_path import ATTRIBUTION, EXPORT_UNTRACED
from workbench.analyses.late_ranks import _usual_lateness_kept

MS = 1_000_000


def row(culprit: int, step: int, category: str, ms: float, label: str | None = None) -> dict:
    return {"culprit": culprit, "step": step, "wait_step": step, "pg_name": "0", "seq": step, "category": category,
            "label": label, "site": None, "ns": int(ms * MS), "excess_ns": int(ms * MS), "in_window": True}


def own_ms(a: pl.DataFrame, culprit: int, step: int) -> float:
    got = a.filter((pl.col("culprit") == culprit) & (pl.col("step") == step)
                   & ~pl.col("category").is_in(["profiler", "collective"])
                   & (pl.col("label").fill_null("") != EXPORT_UNTRACED))
    return round(got["ns"].sum() / MS, 3)


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=ATTRIBUTION)


def test_a_rank_late_every_step_keeps_its_usual_lateness_under_an_export():
    rows = [row(1, s, "cpu_op", 37, "aten::mm") for s in (1, 2, 3, 4)]
    rows += [row(1, 5, "untraced", 7), row(1, 5, "profiler", 24, "profiler trace export (background)"),
             row(1, 5, "untraced", 6, EXPORT_UNTRACED)]
    out = _usual_lateness_kept(frame(rows), judged={1, 2, 3, 4, 5})
    assert own_ms(out, 1, 5) == 37.0                      # 7 of its own + 30 taken back from the profiler's
    assert round(out.filter(pl.col("step") == 5)["ns"].sum() / MS, 3) == 37.0   # no time made up
    assert [own_ms(out, 1, s) for s in (1, 2, 3, 4)] == [37.0] * 4


def test_the_export_keeps_what_goes_beyond_the_usual():
    rows = [row(1, s, "untraced", 10) for s in (1, 2, 3)] + [row(1, 4, "profiler", 50, "profiler trace export")]
    out = _usual_lateness_kept(frame(rows), judged={1, 2, 3, 4})
    assert own_ms(out, 1, 4) == 10.0
    assert round(out.filter((pl.col("step") == 4) & (pl.col("category") == "profiler"))["ns"].sum() / MS) == 40


def test_a_rank_not_usually_late_leaves_the_export_the_profilers():
    rows = [row(2, 3, "untraced", 12), row(2, 5, "profiler", 40, "profiler trace export")]
    out = _usual_lateness_kept(frame(rows), judged={1, 2, 3, 4, 5})    # late in one step of four: median 0
    assert own_ms(out, 2, 5) == 0.0 and own_ms(out, 2, 3) == 12.0
