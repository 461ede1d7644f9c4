"""``workbench app [PATH ...]``: serve the Dash UI (localhost by default) over the given runs."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.commands.output import echo
from workbench.errors import printable, stage


def register(app: typer.Typer) -> None:
    @app.command("app")
    def serve(
        paths: list[Path] = typer.Argument(None, metavar="PATH", help="Run directories, trace folders or files, or folders of runs "
                                                      "(default: the bundled sample_traces/)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; localhost unless told otherwise."),
        port: int = typer.Option(8050, "--port", help="TCP port."),
        debug: bool = typer.Option(False, "--dev", help="Dash dev tools and reloading (development only)."),
        allow_host: list[str] = typer.Option(None, "--allow-host", metavar="HOST",
                                             help="Another host name the app may be reached by (repeatable); "
                                                  "requests naming any other Host are refused."),
        allow_root: list[Path] = typer.Option(None, "--allow-root", metavar="PATH",
                                              help="A folder outside the PATHs whose runs may be opened from the "
                                                   "app's Open box (repeatable)."),
    ) -> None:
        """Explore runs in the browser: timeline, breakdown, drift, recompiles, recommendations, compare."""
        from workbench.app.main import create_app, default_roots   # dash (the app extra): cli.EXTRAS says so
        roots = list(paths) if paths else default_roots()
        with stage("listing the runs under", ", ".join(map(str, roots))):
            dash_app = create_app(roots, bind=host, allow_hosts=allow_host or (), allow_roots=allow_root or ())
        store = dash_app.workbench_store
        if store.default_id():  # open and analyse the first run while the browser starts
            import threading

            from workbench.app.compute import prefetch

            threading.Thread(target=prefetch, args=(store, store.default_id()), daemon=True).start()
        echo(f"workbench app: {len(store.entries)} run(s) under {', '.join(printable(r) for r in store.roots)}")
        for e in store.entries:
            echo(f"  {e.id:<28} {printable(e.path)}")
        for note in getattr(store, "notes", ()):
            echo(f"note: {printable(note)}", err=True)
        if host not in ("127.0.0.1", "localhost", "::1"):
            echo(f"warning: serving on {printable(host)}: anyone who can reach it can read these runs", err=True)
        echo(f"open http://{'127.0.0.1' if host in ('0.0.0.0', '::') else printable(host)}:{port}/")
        dash_app.run(host=host, port=port, debug=debug)
