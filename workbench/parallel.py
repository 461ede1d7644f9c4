"""Parse a run's trace files on an existing Dask distributed cluster (``workbench ingest PATH --cluster ADDR``).

Each worker parses whole files and writes their cache entries itself, so what travels back to the client is
one small :class:`~workbench.lazy.RankPart` per file (steps, collectives, counts and the paths of the parquet
files), never the events. The workers must see the input and the cache folder under the same paths as the
client (a shared filesystem); a worker that cannot write the cache sends that file's tables back instead, and
the run says so in one line. Dask is optional (``pip install 'workbench[scale]'``); nothing else imports it.

Example:
    >>> run = workbench.open("runs/exp1", cluster="tcp://scheduler:8786")   # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench import rundir
from workbench.discover import TraceSource
from workbench.errors import InputError, TraceError

if TYPE_CHECKING:
    from workbench.lazy import RankPart
    from workbench.run import OnError, ProgressCallback


def read_remote(path: str, src_rank: int | None, rank: int | None, cache_dir: str | None) -> dict[str, Any]:
    """What one worker does with one file: ``{"part", "uncached"}`` or ``{"error": (path, problem)}``
    (errors travel as text: exceptions do not always survive pickling)."""
    from workbench.run import read_part

    try:
        part, why = read_part(TraceSource(Path(path), src_rank), rank, Path(cache_dir) if cache_dir else None)
        return {"part": part, "uncached": why}
    except TraceError as exc:
        return {"error": (exc.path, exc.problem)}
    except Exception as exc:  # noqa: BLE001 - one bad file must not take the other ranks down
        return {"error": (path, rundir.unforeseen(exc))}


def read_on_cluster(address: str, traces: list[TraceSource], rank: int | None, on_error: OnError,
                    problems: list[str], cache_dir: Path | None,
                    progress: ProgressCallback | None = None) -> list[RankPart]:
    """Every trace read by the workers of the Dask scheduler at ``address``, in trace order."""
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise InputError("--cluster needs Dask: pip install 'workbench[scale]' (dask[distributed])") from exc
    from workbench.run import collect_parts

    if not traces:
        return []
    try:
        client = Client(address, timeout=30, set_as_default=False)
    except Exception as exc:  # noqa: BLE001 - a bad address or an unreachable scheduler: one line
        raise InputError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: {exc})") from exc
    try:
        futures = [client.submit(read_remote, str(t.path), t.rank, rank, str(cache_dir) if cache_dir else None,
                                 key=f"workbench-read-{i}-{t.path.name}", pure=False)
                   for i, t in enumerate(traces)]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[RankPart | None] = [None] * len(traces)
        errors: list[TraceError | None] = [None] * len(traces)
        uncached = [""] * len(traces)
        for done, fut in enumerate(as_completed(futures, loop=client.loop), 1):
            i = index[fut.key]
            out = fut.result()
            if "error" in out:
                errors[i] = TraceError(*out["error"])
            else:
                results[i], uncached[i] = out["part"], out["uncached"]
            fut.release()
            if progress:
                progress("traces", done, len(traces))
    finally:
        client.close()
    return collect_parts(results, errors, uncached, on_error, problems)


__all__ = ["read_on_cluster", "read_remote"]
