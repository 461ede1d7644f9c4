"""Detectors: the functions that turn a run's analysis tables into typed findings, registered once each.

``@register_detector(Kind.STRAGGLER, needs=("stragglers",), order=30)`` declares the kinds a detector produces and
the inputs (:class:`Inputs` fields, or analysis tables by name) it reads; :func:`run_detectors` calls them in
``order`` — what :func:`workbench.analyses.summary.analysis_tables` does instead of wiring each by hand. A detector
returning a kind it did not declare is an error. ``attributed=False`` marks the detectors whose findings stay out
of the root-cause attribution (why the job stopped: listed first as they are).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from workbench.analyses.findings import Finding
from workbench.analyses.kinds import Kind

if TYPE_CHECKING:   # imported for the annotations only: both modules import this one
    from workbench.analyses.rootcause import DeviceTime
    from workbench.schema import HangTables


@dataclass(frozen=True, slots=True, kw_only=True)
class Inputs:
    """Everything a detector may read of one run (frames are empty, never None, when the run lacks them)."""

    steps: pl.DataFrame
    collectives: pl.DataFrame            # as recorded (per rank)
    matched: pl.DataFrame                # matched across ranks (``analyses.collectives.match_collectives``)
    ranks: pl.DataFrame
    compiles: pl.DataFrame               # classified (``analyses.recompiles.classify_compiles``)
    fingerprints: pl.DataFrame
    meta: Mapping[str, Any]              # run.json
    world_size: int | None
    timeout_s: float | None              # the job's collective timeout, when given
    tables: Mapping[str, pl.DataFrame]   # the analysis tables (``workbench.schema.ANALYSIS_TABLES`` names)
    main_causes: pl.DataFrame | None     # idle causes of each rank's main streams
    python_events: pl.DataFrame          # ``python_function`` events per rank (``rank``, ``events``)
    profiler_inflated: bool              # the traces were recorded with with_stack
    steps_by_rank: dict[int, list[int]]  # the analysed steps of each rank
    device: DeviceTime                   # the analysed window's device (or host) time per rank
    traced: dict[int, list[tuple[int, int]]]   # compile time the trace shows, per rank
    hangs: HangTables                    # Flight Recorder dumps and the collector's exit records
    found: tuple[Finding[Any], ...] = ()  # what the detectors before this one found
    critical_path: Any = None            # analyses.critical_path.CriticalPath of the run (None: not computed)
    arrivals: pl.DataFrame | None = None  # every step's collective arrivals (hangs.collective_arrivals; None: not computed)


Detect = Callable[[Inputs], Iterable[Finding[Any]]]


@dataclass(frozen=True, slots=True)
class Detector:
    """A registered detector: the kinds it produces, what it reads, when it runs."""

    fn: Detect
    kinds: tuple[Kind, ...]
    needs: tuple[str, ...]
    order: int
    attributed: bool = True

    @property
    def name(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}"


_DETECTORS: list[Detector] = []
_FIELDS = frozenset(f.name for f in dataclasses.fields(Inputs))
#: Detectors (``module.qualname``) another one replaces: never registered, or taken out when it registers.
_REPLACED: set[str] = set()


def register_detector(*kinds: Kind, needs: Iterable[str], order: int, attributed: bool = True,
                      replaces: Iterable[str] = ()) -> Callable[[Detect], Detect]:
    """Decorator: ``fn(inputs)`` finds ``kinds``, reading ``needs`` (:class:`Inputs` fields or analysis table
    names); detectors run by ``order`` (two with one order, or one function registered twice, is an error).
    ``replaces``: detectors (``module.qualname``) this one does the work of, whichever registers first."""
    from workbench.schema import ANALYSIS_TABLES

    wanted = tuple(needs)
    unknown = [n for n in wanted if n not in _FIELDS and n not in ANALYSIS_TABLES]
    if unknown:
        raise ValueError(f"detector needs unknown input(s) {unknown}")
    declared = tuple(Kind(k) for k in kinds)
    if not declared:
        raise ValueError("a detector names the kinds it produces")

    def deco(fn: Detect) -> Detect:
        d_new = Detector(fn, declared, wanted, order, attributed)
        if d_new.name in _REPLACED:
            return fn
        _REPLACED.update(replaces)
        _DETECTORS[:] = [d for d in _DETECTORS if d.name not in _REPLACED]
        clash = [d.name for d in _DETECTORS if d.order == order or d.fn is fn]
        if clash:
            raise ValueError(f"detector {fn.__qualname__}: order {order} or function already registered ({clash})")
        _DETECTORS.append(Detector(fn, declared, wanted, order, attributed))
        _DETECTORS.sort(key=lambda d: d.order)
        return fn

    return deco


def detectors() -> tuple[Detector, ...]:
    """Every registered detector, in the order they run."""
    return tuple(_DETECTORS)


def run_detectors(inputs: Inputs, *, attributed: bool = True) -> list[Finding[Any]]:
    """The findings of every detector with that ``attributed`` flag, in order; each sees the earlier ones'
    findings (``inputs.found``)."""
    found: list[Finding[Any]] = []
    for d in _DETECTORS:
        if d.attributed != attributed:
            continue
        got = list(d.fn(dataclasses.replace(inputs, found=tuple(found))))
        stray = sorted({f.kind.value for f in got} - {k.value for k in d.kinds})
        if stray:
            raise ValueError(f"detector {d.name} returned undeclared kind(s) {stray}")
        found += got
    return found


__all__ = ["Detector", "Inputs", "detectors", "register_detector", "run_detectors"]
