"""Pipeline: the bubble of each stage, and the schedule of one step as a picture (stages × time: forward,
backward, idle), for runs whose stages record micro-batch ranges (``forward_mb3`` / ``backward_mb3``)."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, State, dcc, html

from workbench import figures
from workbench.analyses import metrics
from workbench.analyses.bubbles import pipeline_shape, stage_summary
from workbench.analyses.kinds import Kind
from workbench.app import compute
from workbench import schedule as sched
from workbench.app.components import (
    col, duration_column, error_panel, graph, grid, pct_column, safe, section, stats_row,
)
from workbench.app.page_timeline import microbatches
from workbench.app.store import RunStore
from workbench.format import count, duration, percent

PATH = "/pipeline"
NAME = "Pipeline"
KEY = "pipeline"
#: The layout depends only on the run and the URL query: built once, then served from the run's cache.
CACHE = True


def stage_table(bubbles: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per stage (rank): its median step time (:func:`workbench.analyses.metrics.step_summary`, as ``workbench
    analyze`` and the Overview give it), then over the analysed steps: how many, micro-batches per step, the median
    work, bubble and first-forward delay."""
    per = stage_summary(bubbles)
    typical = metrics.step_summary(steps).select(pl.col("rank").cast(per.schema["rank"]), "median_ns")
    return per.join(typical, on="rank", how="left").sort("rank")


STAGE_COLUMNS = [
    col("rank", "Stage (rank)"), duration_column("median_ns", "Median step time"), col("steps", "Steps analysed"),
    col("microbatches", "Micro-batches per step"), duration_column("work_ns", "Work (forward + backward)"),
    duration_column("bubble_ns", "Bubble"), pct_column("bubble_pct", "Bubble share of the analysed step"),
    duration_column("first_forward_delay_ns", "First forward after the step starts"), col("timeline", "Work measured on"),
]


def default_step(bubbles: pl.DataFrame) -> int:
    """The step the schedule shows first: the steady step whose bubble is the median one (the first step of the
    window often carries warm-up)."""
    steps = sorted(bubbles["step"].unique().to_list())
    steady = steps[1:] if len(steps) > 2 else steps
    per = bubbles.filter(pl.col("step").is_in(steady)).group_by("step").agg(pl.col("bubble_pct").mean()).sort(
        "bubble_pct")
    return int(per["step"][per.height // 2])


def layout(pctx) -> Any:
    if not pctx.run_id:
        return error_panel("No run", "No runs were found.")
    return safe("Pipeline", _layout, pctx.store, pctx.run_id)


def _layout(store: RunStore, rid: str) -> Any:
    bub = compute.table(store, rid, "bubbles")
    mb = microbatches(store, rid)
    if not metrics.is_pipeline(bub) or mb.is_empty():
        return html.Div("Not a pipeline run: no stage records several forward micro-batch ranges per step "
                        "(record_function names like forward_mb0 / backward_mb0, as torch.distributed.pipelining "
                        "schedules or the collector's micro-batch hooks write).",
                        className="panel panel-unavailable", id="no-pipeline")
    stages, m, theory = pipeline_shape(bub)
    measured = float(stage_summary(bub)["bubble_pct"].max())
    step = default_step(bub)
    f = compute.findings(store, rid).filter(pl.col("kind") == Kind.PIPELINE_BUBBLE.value)
    msgs = [html.Div([html.Strong("Finding: "), html.Span(r["message"]), html.Span(
        f" ({' '.join(x for x in (duration(r['cost_ns']), r['cost_basis']) if x)})", className="muted")],
        className="rec pipeline-finding") for r in f.iter_rows(named=True)]
    steps = sorted(bub["step"].unique().to_list())
    return html.Div([
        stats_row([
            ("stages", "stages", str(stages)),
            ("microbatches", "micro-batches per step", f"{m:g}"),
            ("bubble", "worst stage's bubble", percent(measured)),
            ("theory", "GPipe theory (S−1)/(M+S−1)", percent(theory) if theory is not None else "–"),
        ]),
        *msgs,
        section("Bubble per stage", graph(bubble_figure(bub, theory), id="bubble-figure"),
                grid(stage_table(bub, store.run(rid).steps), id="stages-grid", columns=STAGE_COLUMNS),
                html.Div("Median step time: over every step, as the Overview and workbench analyze give it. "
                         "Bubble: the part of an analysed step a stage spends on neither forward nor backward work "
                         "(waiting for its neighbour's activations or gradients, the optimizer, data loading); "
                         "on a GPU the analysed step is the stage's device time in it, and work is the busy time "
                         "of its compute kernels.", className="muted")),
        section("Schedule",
                html.Div([html.Label("Step"), dcc.Dropdown(id="pipeline-step", options=steps, value=step,
                                                           clearable=False)], className="controls"),
                html.Div(_schedule(store, rid, step), id="pipeline-schedule"),
                html.Div(f"{count(stages, 'stage')}, one row each, stage 0 at the top; F3 / B3 = forward / "
                         "backward of micro-batch 3; grey = idle, the bubble of the table above. On a GPU each row is "
                         "the stage's device time in the step and the work is its compute kernels (labelled by the "
                         "micro-batch range that launched them); on a CPU, the forward and backward ranges.",
                         className="muted")),
        dcc.Store(id="pipeline-run", data=rid),
    ])


def bubble_figure(bub: pl.DataFrame, theory: float | None) -> Any:
    """The bubble per stage with the GPipe theory as a dashed line, named in the title (a label on the line would
    sit on the bars, which are about as tall)."""
    fig = figures.bubble_figure(bub, theory_pct=theory)
    if theory is not None:
        fig.layout.annotations = ()
        fig.update_layout(title=f"Pipeline bubble per stage (dashed line: GPipe theory {percent(theory)})")
    return fig


def _schedule(store: RunStore, rid: str, step: int) -> Any:
    fig = sched.schedule(compute.table(store, rid, "bubbles"), microbatches(store, rid), store.run(rid).kernels, step)
    return graph(fig, id="schedule-figure")


def register(app, store: RunStore) -> None:
    @app.callback(Output("pipeline-schedule", "children"), Input("pipeline-step", "value"),
                  State("pipeline-run", "data"), prevent_initial_call=True)
    def pick_step(step, rid):
        return safe("Schedule", _schedule, store, rid, int(step))
