"""How each rank ended: its state, last step, last collective and last compile, as ``workbench info`` and the
Hangs page list them (from the hang tables the run read, its steps and its compiles; no file is read here).

Example:
    >>> rows = rank_last_rows(run.hangs, run.steps, run.compiles, run.world_size)   # doctest: +SKIP
    >>> rows[0]["state"], rows[0]["last_collective"]                               # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import polars as pl

from workbench.analyses.hangs import rank_status, short_site, sizes_text
from workbench.schema import HangTables

#: Ranks of the stated world size that left no record at all get a row each up to this many; beyond, none (the
#: run's problems already count the missing ranks), so a stated world size of 1,000,000 costs nothing here.
MAX_ABSENT_ROWS = 1024


def rank_last_rows(hang: HangTables, steps: pl.DataFrame | None, compiles: pl.DataFrame | None,
                   world_size: int | None) -> list[dict[str, Any]]:
    """Per rank: how it ended, its last step and its last collective.

    Keys: ``rank``, ``state``, ``last_step``, ``step_reached``, ``last_collective`` (text, or None),
    ``pg_name``, ``seq``, ``op``, ``call_site``, ``completed``, ``compile`` (its last compile, text). Ranks of the
    world size without any record are rows too (state ``unknown``), unless more than :data:`MAX_ABSENT_ROWS`."""
    tables = (hang.entries, hang.status, hang.rank_state, steps if isinstance(steps, pl.DataFrame) else pl.DataFrame(),
              compiles if isinstance(compiles, pl.DataFrame) else pl.DataFrame())
    st = rank_status(*tables, None)
    ws = world_size
    if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0:
        recorded = sum(1 for r in st.get_column("rank").to_list() if r is not None and 0 <= r < ws)
        if 0 < ws - recorded <= MAX_ABSENT_ROWS:
            st = rank_status(*tables, ws)
    out = []
    for r in st.iter_rows(named=True):
        coll = None
        if r["op"]:
            where = f"pg {r['pg_name']} seq {r['seq']} " if r["pg_name"] is not None else ""
            sizes = f" {sizes_text(r['sizes'], r['dtypes'])}" if r["sizes"] else ""
            done = "" if r["completed"] is None else (" (completed)" if r["completed"] else " (not completed)")
            coll = f"{where}{r['op']}{sizes}{done}" + (f" from {short_site(r['call_site'])}" if r["call_site"] else "")
        comp = None
        if r["compile_id"]:
            comp = f"{r['co_name'] or '?'} [{r['compile_id']}] {r['compile_status'] or ''}".strip()
            if r["compile_step"] is not None:
                comp += f" at step {r['compile_step']}"
        out.append({"rank": r["rank"], "state": r["state"], "last_step": r["last_step"],
                    "step_reached": r["step_reached"], "last_collective": coll, "pg_name": r["pg_name"],
                    "seq": r["seq"], "op": r["op"], "call_site": r["call_site"], "completed": r["completed"],
                    "compile": comp})
    return out
