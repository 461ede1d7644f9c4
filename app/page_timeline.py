"""Timeline: kernels per rank and stream, reduced on the server to what the visible window shows.

The first draw shows the whole run merged into pixel-wide spans; every zoom or pan sends ``relayoutData`` back,
and the server recomputes the spans of the new window (exact kernels once at most
:data:`workbench.timeline.EXACT_LIMIT` are visible). ``uirevision`` keeps the user's zoom across updates; it
changes only when the app itself moves the window (reset, jump to a step).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl
from dash import Input, Output, State, ctx, dcc, html, no_update

from workbench import figures
from workbench import timeline as tl
from workbench.app.components import error_panel, graph, run_problems, safe
from workbench.app.store import RunStore
from workbench.format import duration

PATH = "/timeline"
NAME = "Timeline"
KEY = "timeline"
#: The layout depends only on the run and the URL query: built once, then served from the run's cache.
CACHE = True
#: Ranks drawn at first when the run has more (the user adds others in the picker).
MAX_DEFAULT_RANKS = 8
#: A kernel shorter than this share of the window is drawn this wide (about one pixel of the figure), so a lane
#: of 2 µs kernels in a 9 ms window is not empty; the hover text keeps its own duration.
MIN_DRAWN_SHARE = 1 / 1000


def visible_spans(view: tl.TimelineView) -> tl.TimelineView:
    """``view`` with every span at least :data:`MIN_DRAWN_SHARE` of the window wide (kernels below a pixel)."""
    sp = view.spans
    if sp.is_empty():
        return view
    least = max(1, int((view.end - view.start) * MIN_DRAWN_SHARE))
    wide = sp.with_columns(end=pl.max_horizontal(pl.col("end"), pl.col("start") + least).cast(sp.schema["end"]))
    return dataclasses.replace(view, spans=wide)


def origin(store: RunStore, rid: str) -> int:
    """The run's time zero (ns): its first recorded activity (kernel or collective, else drawn step); the x axis
    is in ms since it. The kernels' bounds come from a two-column scan (no rank's kernels are held for it)."""
    def go():
        run = store.run(rid)
        k = run.scan("kernels").select(pl.col("start").min(), pl.col("end").max()).collect()
        b = tl.activity_bounds(k, run.steps, run.collectives)
        return b[0] if b else 0
    return store.cached(rid, "timeline:origin", go)


def _key(ranks: list[int] | None) -> str:
    return ",".join(map(str, sorted(ranks or [])))


def drawn_run(store: RunStore, rid: str, ranks: list[int] | None):
    """The run restricted to the drawn ``ranks`` (:meth:`workbench.Run.subset`: only their kernels are read),
    or the whole run when none are picked."""
    return store.cached(rid, f"timeline:run:{_key(ranks)}",
                        lambda: store.run(rid).subset(ranks) if ranks else store.run(rid))


def index(store: RunStore, rid: str, ranks: list[int] | None = None) -> tl.TimelineIndex:
    """The drawn ranks' kernels prepared for window queries (built once per rank selection)."""
    return store.cached(rid, f"timeline:index:{_key(ranks)}",
                        lambda: tl.TimelineIndex(drawn_run(store, rid, ranks).kernels))


def microbatches(store: RunStore, rid: str) -> pl.DataFrame:
    """Forward/backward micro-batch ranges of a pipeline run (:func:`workbench.analyses.bubbles.microbatch_ranges`), from a
    filtered scan of the events (only the matching annotations are held)."""
    return store.cached(rid, "timeline:microbatches", lambda: tl.run_microbatches(store.run(rid)))


def _sel(ranks: list[int] | None):
    return (lambda f: f.filter(pl.col("rank").is_in(ranks)) if not f.is_empty() else f) if ranks else (lambda f: f)


def full_window(store: RunStore, rid: str, ranks: list[int] | None) -> tuple[int, int]:
    """Where the selected ranks' activity is (kernels and collectives, else their drawn steps)."""
    def go():
        run = store.run(rid)
        sel = _sel(ranks)
        b = tl.activity_bounds(index(store, rid, ranks), sel(run.steps), sel(run.collectives)) or (0, 1)
        return b[0], max(b[1], b[0] + 1)
    return store.cached(rid, f"timeline:full:{_key(ranks)}", go)


def step_window(store: RunStore, rid: str, step: int, ranks: list[int] | None) -> tuple[int, int] | None:
    """The time range of ``step`` over ``ranks`` (the drawn steps; kernels launched in it included)."""
    run = store.run(rid)
    s = tl.drawn_steps(run.steps)
    s = s.filter(pl.col("step") == step) if not s.is_empty() else s
    k = drawn_run(store, rid, ranks).kernels.filter(pl.col("step") == step)
    if ranks:
        s = s.filter(pl.col("rank").is_in(ranks)) if not s.is_empty() else s
    return tl.time_bounds(s, k)


def wait_annotations(store: RunStore, rid: str) -> pl.DataFrame:
    """Where a root cause made other ranks wait: per root cause with a known wait (``Finding.wait_reason``: a
    compile, a straggler's late arrival or its data loading) and per waiting rank, one box over its collective
    waits in the root cause's step where it waited most — ``rank``, ``start``, ``end``, ``text``. The text gives the wait the finding
    measured for that rank (the number the Overview shows) and names the step as that rank's timeline numbers it
    when the collective belongs to another rank's step ("rank 0 waits here 2.63 s for rank 1's compile (rank 1's
    step 8, rank 0's step 9)")."""
    from workbench.app import compute

    def go():
        cols = {"rank": pl.Int32, "start": pl.Int64, "end": pl.Int64, "text": pl.String}
        try:
            roots = compute.tables(store, rid).roots
            matched = compute.table(store, rid, "collectives")
        except Exception:  # noqa: BLE001 - no annotations rather than no timeline
            return pl.DataFrame(schema=cols)
        if not roots or matched.is_empty():
            return pl.DataFrame(schema=cols)
        drawn = tl.drawn_steps(store.run(rid).steps)
        rows: list[dict] = []
        for r in roots:
            reason = r.wait_reason
            if reason is None or not r.steps:
                continue
            m = matched.filter(pl.col("step").is_in(list(r.steps)) & (pl.col("wait_ns") >= 1_000_000)
                               & ~pl.col("p2p"))
            if r.ranks:
                m = m.filter(pl.col("last_rank").is_in(list(r.ranks)) | (len(r.ranks) > 1))
            measured = getattr(r.evidence, "wait_by_rank", None) or {}
            # one box per waiting rank, at its step with the most waiting (several boxes per rank crowd the lane)
            best: dict[int, tuple] = {}
            for (rank, step), part in m.group_by("rank", "step"):
                if int(rank) not in best or part["wait_ns"].sum() > best[int(rank)][2]["wait_ns"].sum():
                    best[int(rank)] = (rank, step, part)
            for rank, step, part in sorted(best.values(), key=lambda v: -v[2]["wait_ns"].sum())[:4]:
                longest = part.sort("wait_ns", descending=True).row(0, named=True)
                start = int(part["arrival"].min())
                end = int((part["arrival"] + part["wait_ns"]).max())
                # the finding's measured wait of that rank where the finding is that one step (the Overview's
                # number); over several steps, this step's collective waits
                wait = (measured.get(int(rank), int(part["wait_ns"].sum())) if len(r.steps) == 1
                        else int(part["wait_ns"].sum()))
                own = _step_at(drawn, int(rank), (start + end) // 2)
                where = (f"step {step}" if own in (None, step) else
                         f"rank {longest['last_rank']}'s step {step}, rank {rank}'s step {own}")
                rows.append({"rank": rank, "start": start, "end": end,
                             "text": f"rank {rank} waits here {duration(wait)} for rank {longest['last_rank']}'s "
                                     f"{reason} ({where})"})
        return pl.DataFrame(rows, schema=cols) if rows else pl.DataFrame(schema=cols)
    return store.cached(rid, "timeline:waits", go)


def _step_at(drawn: pl.DataFrame, rank: int, t: int) -> int | None:
    """The drawn step of ``rank`` that holds time ``t`` (what its steps lane shows there)."""
    if drawn.is_empty():
        return None
    hit = drawn.filter((pl.col("rank") == rank) & (pl.col("start") <= t) & (pl.col("end") >= t))
    return int(hit["step"][0]) if hit.height else None


def lanes(store: RunStore, rid: str, ranks: list[int] | None) -> list[str]:
    """The lanes of ``ranks`` over the whole run: the same at every zoom."""
    def go():
        run = store.run(rid)
        sel = _sel(ranks)
        return tl.timeline_lanes(index(store, rid, ranks), ranks=ranks or None, steps=sel(tl.drawn_steps(run.steps)),
                                 collectives=sel(run.collectives), compiles=sel(run.compiles),
                                 microbatches=sel(microbatches(store, rid)))
    return store.cached(rid, f"timeline:lanes:{_key(ranks)}", go)


def build_figure(store: RunStore, rid: str, window: tuple[int, int] | None, ranks: list[int] | None,
                 revision: str) -> tuple[Any, str]:
    """The timeline figure of ``window`` and its caption (the function the callback and the layout share)."""
    run = store.run(rid)
    lo, hi = window or full_window(store, rid, ranks)
    view = visible_spans(tl.timeline_view(index(store, rid, ranks), start=lo, end=hi, ranks=ranks or None))
    sel = _sel(ranks)
    fig = figures.timeline_figure(
        view, origin=origin(store, rid), collectives=sel(run.collectives), compiles=sel(compute_compiles(store, rid)),
        steps=sel(run.steps), microbatches=sel(microbatches(store, rid)), waits=sel(wait_annotations(store, rid)),
        lanes=lanes(store, rid, ranks), uirevision=revision,
    )
    o = origin(store, rid)
    what = view.describe() if index(store, rid, ranks).frame.height else "No device kernels (a CPU run): steps, collectives and compiles"
    return fig, (f"{what} · window {duration(hi - lo)}, from {duration(lo - o) if lo != o else '0 ms'} to {duration(hi - o)} "
                 "after the run's first recorded activity")


def compute_compiles(store: RunStore, rid: str) -> pl.DataFrame:
    """Compiles with their classified cause (for the hover text)."""
    from workbench.app import compute

    try:
        return compute.compiles(store, rid)
    except Exception:  # noqa: BLE001 - unclassified compiles still draw
        return store.run(rid).compiles


def _ranks(store: RunStore, rid: str) -> list[int]:
    run = store.run(rid)
    return sorted(set(run.ranks_with("kernels")) | set(run.steps["rank"].unique().to_list()))


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found under the paths the app was started with.")
    return safe("Timeline", _layout, pctx)


def _layout(pctx) -> Any:
    store, rid, q = pctx.store, pctx.run_id, pctx.query
    run = store.run(rid)
    all_ranks = _ranks(store, rid)
    if "rank" in q:
        ranks = [int(r) for r in q["rank"].split(",") if r.strip().lstrip("-").isdigit()]
    else:
        ranks = all_ranks[:MAX_DEFAULT_RANKS]
    window = None
    note = None
    if "step" in q and q["step"].lstrip("-").isdigit():
        window = step_window(store, rid, int(q["step"]), ranks)
        if window is None:
            note = html.Div(f"Step {q['step']} is outside the recorded window (the timeline draws steps "
                            f"{_drawn_range(run)}): showing the whole run.", className="panel panel-info",
                            id="timeline-step-note")
    elif "t0" in q and "t1" in q:
        o = origin(store, rid)
        window = (int(o + float(q["t0"]) * 1e6), int(o + float(q["t1"]) * 1e6))
    window = window or full_window(store, rid, ranks)
    fig, caption = build_figure(store, rid, window, ranks, f"{rid}:0")
    steps = sorted(run.steps["step"].drop_nulls().unique().to_list())
    return html.Div([
        run_problems(run),
        html.Div([
            html.Div([html.Label("Ranks"), dcc.Dropdown(id="timeline-ranks", options=all_ranks, value=ranks,
                                                         multi=True, clearable=False)], style={"minWidth": "280px"}),
            html.Div([html.Label("Jump to step"), dcc.Dropdown(id="timeline-step", options=steps,
                                                               value=int(q["step"]) if q.get("step", "").isdigit() else None,
                                                               placeholder="step")]),
            html.Button("Whole run", id="timeline-reset", n_clicks=0),
            html.A("Download for Perfetto", id="timeline-perfetto", href=perfetto_href(rid, ranks, q.get("step")),
                   title="These ranks (and the chosen step) as a Perfetto trace (workbench export; open it in "
                         "ui.perfetto.dev)"),
        ], className="controls"),
        note,
        html.Div(caption, id="timeline-info", className="muted"),
        graph(fig, id="timeline-graph", style={"minHeight": "300px"}),
        dcc.Store(id="timeline-state", data={"run": rid, "window": list(window), "rev": 0}),
        dcc.Store(id="timeline-zoom"),
        html.Div("Drag to zoom, double-click to return to the whole run; the server redraws the visible window "
                 "(exact kernels once few enough are visible). Steps are numbered; collectives, compiles and "
                 "pipeline micro-batches (F = forward, B = backward) have their own lanes; red boxes mark where a "
                 "root cause makes a rank wait.", className="muted"),
    ])


def perfetto_href(rid: str, ranks: list[int], step: str | None) -> str:
    """The "Download for Perfetto" link of the ranks (and step) on screen (app/export.py serves it)."""
    from urllib.parse import urlencode

    args = {"run": rid, "ranks": ",".join(map(str, ranks))}
    if step and step.isdigit():
        args["steps"] = step
    return "/export/perfetto?" + urlencode(args)


def _drawn_range(run) -> str:
    s = tl.drawn_steps(run.steps)
    ids = sorted(set(s["step"].drop_nulls().to_list())) if not s.is_empty() else []
    return f"{ids[0]}–{ids[-1]}" if ids else "none"


def parse_relayout(data: dict | None, origin_ns: int) -> tuple[int, int] | str | None:
    """``(start_ns, end_ns)`` of a zoom/pan, ``"auto"`` for a reset (double click), else ``None``."""
    if not data:
        return None
    if data.get("xaxis.autorange") or data.get("autosize") and "xaxis.range[0]" not in data:
        return "auto" if data.get("xaxis.autorange") else None
    lo = data.get("xaxis.range[0]")
    hi = data.get("xaxis.range[1]")
    if lo is None and isinstance(data.get("xaxis.range"), list):
        lo, hi = data["xaxis.range"][:2]
    if lo is None or hi is None:
        return None
    a, b = sorted((float(lo), float(hi)))
    return int(origin_ns + a * 1e6), int(origin_ns + b * 1e6)


#: Forward only zoom/pan/reset relayouts to the server: plotly also emits relayoutData on autosize, and a second
#: request would make Dash drop the answer to the first.
_ZOOM_FILTER_JS = """
function(rd) {
    if (rd && ('xaxis.range[0]' in rd || 'xaxis.range' in rd || 'xaxis.autorange' in rd)) { return rd; }
    return window.dash_clientside.no_update;
}
"""


def register(app, store: RunStore) -> None:
    app.clientside_callback(_ZOOM_FILTER_JS, Output("timeline-zoom", "data"), Input("timeline-graph", "relayoutData"),
                            prevent_initial_call=True)

    @app.callback(
        Output("timeline-graph", "figure"),
        Output("timeline-info", "children"),
        Output("timeline-state", "data"),
        Input("timeline-zoom", "data"),
        Input("timeline-ranks", "value"),
        Input("timeline-reset", "n_clicks"),
        Input("timeline-step", "value"),
        State("timeline-state", "data"),
        prevent_initial_call=True,
    )
    def update(relayout, ranks, _reset, step, state):
        rid = state["run"]
        window = tuple(state["window"])
        rev = state.get("rev", 0)
        trig = ctx.triggered_id
        ranks = [int(r) for r in (ranks or [])]
        if trig == "timeline-reset":
            window, rev = full_window(store, rid, ranks), rev + 1
        elif trig == "timeline-step" and step is not None:
            window, rev = step_window(store, rid, int(step), ranks) or window, rev + 1
        elif trig == "timeline-ranks":
            pass  # same window, other lanes
        else:
            w = parse_relayout(relayout, origin(store, rid))
            if w is None:
                return no_update, no_update, no_update
            if w == "auto":
                window = full_window(store, rid, ranks)
            else:
                if tuple(w) == window:
                    return no_update, no_update, no_update
                window = w
        fig, caption = build_figure(store, rid, window, ranks, f"{rid}:{rev}")
        return fig, caption, {"run": rid, "window": list(window), "rev": rev}
