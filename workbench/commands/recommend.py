"""``workbench recommend PATH -o fixes.toml``: ranked fixes for a run, config fixes written as a compile config."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from workbench.commands.info import RANK_OPT
from workbench.commands.output import console as safe_console
from workbench.commands.output import echo_json, markup, working
from workbench.errors import stage

PATH_ARG = typer.Argument(..., metavar="PATH", help="Run directory, Kineto traces and/or TORCH_TRACE logs.")


def register(app: typer.Typer) -> None:
    @app.command("recommend")
    def recommend_cmd(
        path: Path = PATH_ARG,
        output: Path = typer.Option(None, "-o", "--output", help="Write the config fixes as compile-config TOML."),
        rank: int = RANK_OPT,
        as_json: bool = typer.Option(False, "--json", help="Print the recommendations as JSON."),
        timeout_s: float = typer.Option(None, "--timeout-s", help="Collective timeout of the job (default 600 s)."),
        limit: int = typer.Option(20, "--limit", help="Rows to print."),
    ) -> None:
        """Rank the fixes for what the run shows; with -o, write the config fixes (one comment per setting)."""
        import polars as pl

        from workbench.analyses.recommendations import ranked_fixes_run, recommendations_frame, to_compile_config
        from workbench.analyses.summary import run_findings
        from workbench.commands.info import open_with_progress
        from workbench.compile_config import load_compile_config
        from workbench.rundir import write_atomic

        run = open_with_progress(path, rank=rank, skip_bad=False, show=not as_json)
        with working(f"analysing {path}", show=not as_json), stage("analysing", path):
            findings = run_findings(run, timeout_s=timeout_s)
            fixes = ranked_fixes_run(run, findings)
            recs = recommendations_frame(fixes)
        if output is not None:
            text = to_compile_config(fixes, header=f"Compile config for {path} written by `workbench recommend`: "
                                                   f"apply with Collector(..., compile_config=\"{output.name}\")")
            write_atomic(output, text.encode())  # a fresh temp file renamed over: never written through a link
            # the file we write must load: by the allowlist's rules (torch is imported only for a key they lack)
            load_compile_config(output, validate="allowlist")
        if as_json:
            echo_json(json.dumps({"findings": len(findings), "recommendations": recs.to_dicts(),
                                  "config": str(output) if output else None}, default=str))
            return
        console = safe_console()
        if recs.height == 0:
            console.print("No findings: nothing to recommend.")
        else:
            console.print(f"[bold]Recommendations for {markup(path)}[/bold] ({len(findings)} root causes, "
                          f"{recs.height} fixes; applied = written to the config)", markup=True)
            for r in recs.head(limit).iter_rows(named=True):
                flag = " [green](applied)[/green]" if r["apply"] else ""
                console.print()
                console.print(f"[bold]{r['rank']}. {markup(r['title'])}[/bold]{flag}", markup=True, highlight=False)
                console.print(f"   answers  {r['finding_kind']} ({r['severity']}): {r['evidence']}", highlight=False)
                console.print(f"   effect   {r['expected_effect']}", highlight=False)
                if r["why"]:
                    console.print(f"   why      {r['why']}", highlight=False)
                if r["config"]:
                    console.print(f"   config   {r['config']}", highlight=False)
                if r["code_advice"]:
                    loc = f"  [{r['location']}]" if r["location"] else ""
                    console.print(f"   code     {r['code_advice']}{loc}", highlight=False)
            if recs.height > limit:
                console.print()
                console.print(f"… {recs.height - limit} more (--limit, or --json)")
        if output is not None:
            n = recs.filter(pl.col("apply")).height
            console.print(f"wrote {output} ({n} config fix{'es' if n != 1 else ''})")
