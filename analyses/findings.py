"""Findings: the typed problems analyses report, and one severity rule.

* :class:`Cost` — what a finding costs, ``measured`` (from this run's own timings) or ``estimated``, and how.
* :class:`Evidence` — base of the one evidence dataclass each kind declares (:mod:`workbench.analyses.kinds`).
* :class:`Finding` — one problem: ``id``, ``kind``, ``severity``, ``ranks``, ``steps``, ``cost``, ``message``,
  ``evidence``, ``symptoms`` (the findings this one explains: a root cause's idle, exposed communication, waits),
  ``source``.
* Kinds are declared once in :mod:`workbench.analyses.kinds` (:class:`Kind`, :func:`kind_spec`); detectors register
  in :mod:`workbench.analyses.detectors`, fixers in :mod:`workbench.analyses.recommendations`.
* :func:`severity_of` — one rule for every kind, from the cost's share of the wall time of the steps it was measured
  over (:func:`workbench.analyses.rootcause.measured_wall_ns` gives that time to every finding shown).
* :func:`within_root` — a symptom's cost within its root cause's (:func:`symptom_cost_ns`, the one capping rule);
  :func:`costs_no_time` — a zero-cost ``info`` finding, a note rather than a root cause.
* :func:`findings_frame` — the polars view (schema ``workbench.schema.FINDINGS``; one row per finding, symptoms
  included, ``cause_id`` pointing at their root); :func:`findings_to_dicts` — the JSON tree.

Example:
    >>> c = Cost.measured(2_500_000_000, "collective wait in the same step")
    >>> severity_of(c, wall_ns=10_000_000_000)
    'high'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import orjson
import polars as pl

from workbench.analyses.kinds import KINDS, Evidence, Kind, KindSpec, Severity, declare_kind, kind_spec
from workbench.format import count as count_text  # the one formatter's names, as the analyses call them
from workbench.format import duration as format_ns
from workbench.schema import FINDINGS, conform, empty

Basis = Literal["measured", "estimated"]
#: Severity order, most severe first (the one definition; sort keys use its index).
SEVERITIES: tuple[str, ...] = ("high", "medium", "low", "info")
#: Cost share of the analysed wall time at or above which a finding is ``high`` / ``medium`` (percent).
HIGH_SHARE_PCT = 10.0
MEDIUM_SHARE_PCT = 3.0


@dataclass(frozen=True, slots=True)
class Cost:
    """Time a finding costs the job: ``ns`` (None = unknown), ``basis`` and ``method`` (how it was obtained,
    e.g. ``"collective wait in the same step"``, ``"step-time excess over the rank's median"``)."""

    ns: int | None
    basis: Basis
    method: str

    def __post_init__(self) -> None:
        if self.basis not in ("measured", "estimated"):
            raise ValueError(f"Cost.basis must be 'measured' or 'estimated', not {self.basis!r}")
        if self.ns is not None:
            object.__setattr__(self, "ns", max(0, int(self.ns)))

    @classmethod
    def measured(cls, ns: int | float | None, method: str) -> Cost:
        return cls(None if ns is None else int(ns), "measured", method)

    @classmethod
    def estimated(cls, ns: int | float | None, method: str) -> Cost:
        return cls(None if ns is None else int(ns), "estimated", method)

    @classmethod
    def none(cls, method: str = "no time cost: a risk or a fact, not lost time") -> Cost:
        """A finding that costs no measurable time (a hazard, a configuration fact)."""
        return cls(0, "measured", method)

    def label(self) -> str:
        """``"2.57 s measured (collective wait in the same step)"``."""
        if self.ns is None:
            return f"unknown ({self.basis}: {self.method})"
        return f"{format_ns(self.ns)} {self.basis} ({self.method})"


E = TypeVar("E", bound=Evidence, covariant=True)
EV = TypeVar("EV", bound=Evidence)


@dataclass(frozen=True, slots=True)
class Finding(Generic[E]):
    """One problem found in a run. ``symptoms`` are findings this one explains (their time is part of this cost).
    ``kind`` may be given as its string; it is kept as its :class:`Kind`."""

    id: str
    kind: Kind
    severity: Severity
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    cost: Cost
    message: str
    evidence: E
    symptoms: tuple[Finding[Evidence], ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")
        spec = kind_spec(self.kind)
        object.__setattr__(self, "kind", spec.kind)
        if not isinstance(self.evidence, spec.evidence):
            raise TypeError(f"{spec.kind.value} needs evidence {spec.evidence.__name__}, "
                            f"not {type(self.evidence).__name__}")

    @property
    def spec(self) -> KindSpec:
        """Its kind's declaration."""
        return KINDS[self.kind]

    @property
    def blamed_ranks(self) -> tuple[int, ...]:
        """The ranks it blames (:meth:`Evidence.blamed`: the compiling ranks, the straggler, ...)."""
        return self.evidence.blamed(self.ranks)

    @property
    def wait_reason(self) -> str | None:
        """What the other ranks wait for when it is a root cause (``"compile"``, ``"data loading"``), or None."""
        return self.evidence.wait_reason(self.spec.wait_reason)

    @property
    def cost_ns(self) -> int:
        """``cost.ns`` with unknown as 0 (for sorting and sums)."""
        return self.cost.ns or 0

    def replace(self, **changes: Any) -> Finding[E]:
        return dataclasses.replace(self, **changes)

    def walk(self) -> Iterable[tuple[Finding[Evidence], Finding[Evidence] | None]]:
        """This finding and every symptom below it, each with its root (None for this one)."""
        yield self, None
        for s in self.symptoms:
            for f, _ in s.walk():
                yield f, self


# ---------------------------------------------------------------------------------------------- building
def finding_id(kind: str | Kind, ranks: Sequence[int] = (), steps: Sequence[int] = (), key: str = "") -> str:
    """Stable id: ``kind:r<ranks>:s<steps>[:key]``, e.g. ``divergent_recompile:r1:s8``."""
    r = ",".join(str(int(x)) for x in sorted(set(ranks))) or "-"
    s = ",".join(str(int(x)) for x in sorted(set(steps))) or "-"
    return f"{kind}:r{r}:s{s}" + (f":{key}" if key else "")


def make_finding(kind: str | Kind, message: str, evidence: EV, cost: Cost, *, ranks: Sequence[int] = (),
                 steps: Sequence[int] = (), wall_ns: int | None = None, source: str = "", key: str = "",
                 symptoms: Sequence[Finding[Evidence]] = ()) -> Finding[EV]:
    """A :class:`Finding` with its id and its severity from :func:`severity_of` (``wall_ns``: the analysed wall
    time of the ranks concerned)."""
    kind = kind_spec(kind).kind
    rk = tuple(sorted({int(r) for r in ranks if r is not None}))
    st = tuple(sorted({int(s) for s in steps if s is not None}))
    return Finding(
        id=finding_id(kind, rk, st, key), kind=kind,
        severity=_severity(kind, cost, wall_ns),
        ranks=rk, steps=st, cost=cost, message=message, evidence=evidence, symptoms=tuple(symptoms),
        source=source,
    )


def severity_of(cost: Cost, wall_ns: int | None, *, hazard: bool = False) -> Severity:
    """One rule for every kind: ``high`` when the cost is ≥ 10 % of ``wall_ns`` (the wall time of the steps the cost
    was measured over: :func:`workbench.analyses.rootcause.measured_wall_ns`), ``medium`` ≥ 3 %,
    ``low`` when it costs anything, ``info`` when it costs nothing (or unknown); a hazard is always ``high``."""
    if hazard:
        return "high"
    ns = cost.ns or 0
    if ns <= 0:
        return "info"
    if not wall_ns or wall_ns <= 0:
        return "low"
    share = 100.0 * ns / wall_ns
    return "high" if share >= HIGH_SHARE_PCT else "medium" if share >= MEDIUM_SHARE_PCT else "low"


def _severity(kind: Kind, cost: Cost, wall_ns: int | None) -> Severity:
    """:func:`severity_of` for ``kind``: its hazard flag, and an estimated cost no more severe than the kind
    declares (``estimate_severity``)."""
    spec = kind_spec(kind)
    sev = severity_of(cost, wall_ns, hazard=spec.hazard)
    cap = spec.estimate_cap
    if cap is not None and cost.basis == "estimated" and SEVERITIES.index(sev) < SEVERITIES.index(cap):
        return cap
    return sev


def rescore(f: Finding[EV], wall_ns: int | None) -> Finding[EV]:
    """``f`` with its severity recomputed for ``wall_ns`` (after its cost changed)."""
    return f.replace(severity=_severity(f.kind, f.cost, wall_ns))


def symptom_cost_ns(symptom_ns: int | None, root_ns: int | None) -> int | None:
    """A symptom's time as the part of its root cause's cost it lies in: never more than that cost (the one capping
    rule, for every view: ``workbench analyze``, the report, the app)."""
    if symptom_ns is None or root_ns is None:
        return symptom_ns
    return min(int(symptom_ns), int(root_ns))


def within_root(symptom: Finding[EV], root: Finding[Evidence]) -> Finding[EV]:
    """``symptom`` with its cost within ``root``'s (:func:`symptom_cost_ns`); a symptom measured alone over a wider
    window than its cause keeps that measurement in its cost's method."""
    ns = symptom_cost_ns(symptom.cost.ns, root.cost.ns)
    if ns is None or symptom.cost.ns is None or ns >= symptom.cost.ns:
        return symptom
    return symptom.replace(cost=Cost(ns, symptom.cost.basis,
                                     f"{symptom.cost.method}; within its root cause's cost (measured alone over its "
                                     f"own window: {format_ns(symptom.cost.ns)})"))


def no_more_severe(symptom: Finding[EV], root: Finding[Evidence]) -> Finding[EV]:
    """``symptom`` rated no more severe than ``root``: its time is part of the root's cost."""
    if SEVERITIES.index(symptom.severity) < SEVERITIES.index(root.severity):
        return symptom.replace(severity=root.severity)
    return symptom


def rank_tier(f: Finding[Evidence]) -> int:
    """Where ``f`` goes in the ranking, before its cost is looked at (the one ranking rule):

    0. kinds that can make ranks run different programs (``diverges``: config or version drift, different
       programs, mismatched collectives, desync, hang): a correctness risk outranks any time cost, as hang and
       desync triage lead;
    1. a measured cost;
    2. an estimated cost (a guess never outranks a measurement);
    3. no cost (zero or unknown): facts, risks and notes.
    """
    if f.spec.diverges:
        return 0
    if f.cost_ns <= 0:
        return 3
    return 1 if f.cost.basis == "measured" else 2


def sort_findings(findings: Iterable[Finding[Any]]) -> list[Finding[Any]]:
    """Ranked by :func:`rank_tier`, then most costly first; ties: more severe first, then kind, then id."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (rank_tier(f), -f.cost_ns, order[f.severity], f.kind, f.id))


# ---------------------------------------------------------------------------------------------- views
def ranks_text(ranks: Iterable[int]) -> str:
    """``"rank 1"``, ``"ranks 0 and 2"``, ``"ranks 0, 2 and 3"`` (sorted, each once)."""
    rs = [str(r) for r in sorted({int(x) for x in ranks})]
    if len(rs) <= 1:
        return f"rank {rs[0] if rs else '-'}"
    return "ranks " + (", ".join(rs[:-1]) + " and " + rs[-1])


def _json(v: Any) -> str:
    return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=str).decode()


def findings_frame(findings: Iterable[Finding[Any]]) -> pl.DataFrame:
    """The polars view (``workbench.schema.FINDINGS``): roots in the given order, each followed by its symptoms
    (``cause_id`` = the root's id, ``is_root`` false). ``cost_ns`` is the finding's cost, null where it is unknown
    (as ``analyze --json`` prints it; never a measured-looking 0). ``evidence`` is JSON text for display only."""
    rows = []
    for root in findings:
        for f, cause in root.walk():
            rows.append({
                "id": f.id, "kind": f.kind.value, "severity": f.severity, "ranks": list(f.ranks),
                "steps": list(f.steps), "cost_ns": f.cost.ns, "cost_basis": f.cost.basis,
                "cost_method": f.cost.method, "evidence": _json(f.evidence.to_dict()), "message": f.message,
                "source": f.source, "cause_id": cause.id if cause is not None else None, "is_root": cause is None,
            })
    if not rows:
        return empty(FINDINGS)
    return conform(pl.DataFrame(rows, schema_overrides={"ranks": pl.List(pl.Int32), "steps": pl.List(pl.Int32)},
                                infer_schema_length=None), FINDINGS)


def costs_no_time(cost_ns: int | None, severity: str | None) -> bool:
    """A finding rated only ``info`` that costs no measured time (zero or unknown: a trend, a fact): a note, never
    ranked as a root cause with a cost."""
    return not cost_ns and severity in ("info", None)


def finding_to_dict(f: Finding[Any]) -> dict[str, Any]:
    """One finding as a JSON-ready dict, its symptoms nested under ``symptoms``."""
    return {
        "id": f.id, "kind": f.kind.value, "severity": f.severity, "ranks": list(f.ranks), "steps": list(f.steps),
        "cost_ns": f.cost.ns, "cost": {"ns": f.cost.ns, "basis": f.cost.basis, "method": f.cost.method},
        "message": f.message, "evidence": f.evidence.to_dict(), "source": f.source,
        "symptoms": [finding_to_dict(s) for s in f.symptoms],
    }


def findings_to_dicts(findings: Iterable[Finding[Any]]) -> list[dict[str, Any]]:
    """The findings tree as JSON-ready dicts (what ``workbench analyze --json`` prints under ``findings``)."""
    return [finding_to_dict(f) for f in findings]


def flatten(findings: Iterable[Finding[Any]]) -> list[Finding[Any]]:
    """Every finding, roots and symptoms, in tree order."""
    return [f for root in findings for f, _ in root.walk()]



__all__ = ["Basis", "Cost", "Evidence", "Finding", "HIGH_SHARE_PCT", "KINDS", "Kind", "KindSpec", "MEDIUM_SHARE_PCT",
           "SEVERITIES", "Severity", "costs_no_time", "count_text", "declare_kind", "finding_id", "finding_to_dict",
           "findings_frame", "findings_to_dicts", "flatten", "format_ns", "kind_spec", "make_finding",
           "no_more_severe", "ranks_text", "rank_tier", "rescore", "severity_of", "sort_findings", "symptom_cost_ns",
           "within_root"]
