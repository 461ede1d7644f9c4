"""Diff of two runs: did the change work — or did it do nothing, or are the runs not comparable at all?

:func:`diff_runs` takes what two runs recorded (:class:`RunData`: their tables and findings) and returns one typed
:class:`RunDiff`, the single definition the CLI (``workbench diff``), the HTML report and the app's Compare page
show:

1. :class:`Comparability` first: script, parameter count, compiled frames, world size, device, torch/CUDA/NCCL
   versions, backend, compile config and step counts. A different script, parameter count or set of compiled
   frames makes the runs *different jobs* (every verdict becomes ``"not comparable"``); a different environment is
   a warning carried by every verdict; a different compile config is expected (it is usually the fix under test).
   A run read with problems (a file unreadable or cut short: ``run.problems``) is a warning too, and the events
   either run dropped while reading (its ``skipped`` rows, but for those kept in another form) a note.
2. A :class:`FindingVerdict` per root finding of BEFORE (``fixed`` / ``smaller`` / ``unchanged`` / ``worse`` /
   ``cannot tell`` / ``not comparable``), matched by kind + ranks (+ compiled frame for recompile kinds), never by
   message text; the findings AFTER has and BEFORE had not. A timed finding absent from AFTER is ``fixed`` only
   when AFTER could have shown it and its cost per step was above the step-to-step spread (else ``cannot tell``).
   How a finding's cost is compared (per window step, per collector step, or by occurrence) and whether one rerun
   can show it gone are its kind's facts (``KindSpec.cost_scope``, ``one_shot``).
3. The step-time change with its uncertainty (:class:`Change`: bootstrap CI of the median change and a
   Mann–Whitney rank-sum test on the per-step times of each side; too few steps or a CI that is neither clearly
   away from zero nor clearly within ±5 % gives ``"cannot tell"``).
4. Per-step metrics (never raw window totals) and the kernels and CPU ops per step that changed most
   (:class:`OpChange`, names normalised so ``triton_poi_fused_add_12`` variants group).

Pure: no I/O; :meth:`RunData.from_run` only reads attributes of an opened run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePath
from typing import Any, Literal

import orjson
import polars as pl

from workbench.analyses import metrics
from workbench.analyses.diff_stats import (  # noqa: F401  (re-exported: one import for the diff's users)
    MIN_STEPS, Change, Direction, StepStats, compare, job_step_times, median_change_ci, rank_sum_p, step_stats,
)
from workbench.analyses.findings import Finding
from workbench.analyses.window import window_kernels, window_steps
from workbench.format import duration

Verdict = Literal["fixed", "smaller", "unchanged", "worse", "cannot tell", "not comparable"]
Effect = Literal["different job", "warning", "expected", "note"]

#: A matched finding's per-step cost must change by more than this share to be "smaller" or "worse".
FINDING_TOLERANCE = 0.25
TOP_N = 10

#: What the AFTER run must have recorded to see a finding of each source again (table, description).
_NEEDS = {"breakdown": ("kernels", "device data"), "overlap": ("kernels", "device data"),
          "kernels": ("kernels", "device data"), "collectives": ("collectives", "collectives"),
          "bubbles": ("events", "trace events"), "stragglers": ("steps", "step times"),
          "critical_path": ("steps", "step times"),
          "recompiles": ("compiles", "compile logs")}


# ----------------------------------------------------------------------------------------------- input
@dataclass(frozen=True)
class RunData:
    """What the diff reads of one run: its tables (polars frames, all ranks), its typed root findings (symptoms under
    them) and ``run.json`` (``meta``)."""

    name: str
    steps: pl.DataFrame
    kernels: pl.DataFrame
    events: pl.DataFrame
    collectives: pl.DataFrame
    compiles: pl.DataFrame
    fingerprints: pl.DataFrame
    ranks: pl.DataFrame
    breakdown: pl.DataFrame
    findings: tuple[Finding[Any], ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[str, ...] = ()                  # files unreadable or read in part (``run.problems``)
    skipped: pl.DataFrame = field(default_factory=pl.DataFrame)   # what reading dropped (``run.skipped``)

    @classmethod
    def from_run(cls, run: Any, tables: Any, name: str | None = None) -> RunData:
        """From an opened :class:`workbench.Run` and its ``analysis_tables(run)`` result (a mapping or an object
        with ``breakdown`` / ``roots`` attributes)."""
        def get(obj: Any, key: str) -> Any:
            return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)

        def table(obj: Any, key: str) -> pl.DataFrame:
            v = get(obj, key)
            return v if isinstance(v, pl.DataFrame) else pl.DataFrame()
        return cls(name=name or str(getattr(run, "name", "run")),
                   **{k: table(run, k) for k in ("steps", "kernels", "events", "collectives", "compiles",
                                                 "fingerprints", "ranks")},
                   breakdown=table(tables, "breakdown"), findings=tuple(get(tables, "roots") or ()),
                   meta=dict(getattr(run, "meta", None) or {}),
                   problems=tuple(str(p) for p in getattr(run, "problems", None) or ()),
                   skipped=table(run, "skipped"))


# ----------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Difference:
    """One way the runs differ: ``what`` (e.g. ``"device"``), both values, and its ``effect`` on the verdicts."""

    what: str
    before: str
    after: str
    effect: Effect


@dataclass(frozen=True)
class Comparability:
    """``level``: ``comparable`` / ``warnings`` / ``not comparable``, with every difference found."""

    level: Literal["comparable", "warnings", "not comparable"]
    differences: tuple[Difference, ...]

    @property
    def comparable(self) -> bool:
        return self.level != "not comparable"

    def caveat(self) -> str:
        """What differs in the environment (empty when nothing does): attached to every verdict."""
        return ", ".join(d.what for d in self.differences if d.effect == "warning")

    def reason(self) -> str:
        return "; ".join(f"{d.what}: {d.before} vs {d.after}" for d in self.differences
                         if d.effect == "different job")


@dataclass(frozen=True)
class Metric:
    """One row of the per-step table: ``name``, ``unit`` (``ns`` per step, ``count``, ``ns``), both values, the
    relative change, its ``direction`` and the ``basis`` it was judged on."""

    name: str
    unit: str
    before: float | None
    after: float | None
    change_pct: float | None
    direction: Direction
    basis: str


@dataclass(frozen=True)
class FindingVerdict:
    """The verdict on one root finding of BEFORE, with the matched AFTER finding's cost and the evidence."""

    kind: str
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    frame: str | None
    severity: str
    message: str
    source: str
    before_cost_ns: int | None
    after_cost_ns: int | None
    before_per_step_ns: float | None
    after_per_step_ns: float | None
    verdict: Verdict
    evidence: str
    after_id: str | None = None
    caveat: str = ""


@dataclass(frozen=True)
class NewFinding:
    """A root finding of AFTER that matches none of BEFORE (``per_step_ns``: its cost per step where it is a
    window or step total; a new finding costing less per step than AFTER's step spread is noise-level, and one
    whose cost is ``estimated`` is listed but does not gate: neither is a regression)."""

    kind: str
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    frame: str | None
    severity: str
    cost_ns: int | None
    message: str
    per_step_ns: float | None = None
    cost_basis: str | None = None


@dataclass(frozen=True)
class OpChange:
    """A kernel or CPU op (by normalised name) per step, mean over ranks: ``added`` / ``removed`` / ``changed``."""

    kind: Literal["kernel", "cpu_op"]
    name: str
    status: Literal["added", "removed", "changed", "same"]
    before_count: float
    after_count: float
    before_ns: float
    after_ns: float
    delta_ns: float


@dataclass(frozen=True)
class RunDiff:
    """Everything ``workbench diff`` shows, in the order it shows it."""

    before: str
    after: str
    comparability: Comparability
    findings: tuple[FindingVerdict, ...]
    new_findings: tuple[NewFinding, ...]
    step_time: Change
    steps_before: StepStats
    steps_after: StepStats
    metrics: tuple[Metric, ...]
    kernels: tuple[OpChange, ...]
    cpu_ops: tuple[OpChange, ...]
    problems_before: tuple[str, ...] = ()   # each side's read problems, one line each (RunData.problems)
    problems_after: tuple[str, ...] = ()

    def regressions(self) -> list[str]:
        """Why this diff is a regression (empty: it is not): slower steps, a finding worse, a new high finding, or
        runs that cannot be compared at all."""
        out = []
        if not self.comparability.comparable:
            out.append(f"runs are not comparable ({self.comparability.reason()})")
        if self.step_time.verdict == "worse":
            out.append(f"step time {self.step_time.reason}")
        out += [f"{f.kind} on ranks {_ranks(f.ranks)} is worse: {f.evidence}" for f in self.findings
                if f.verdict == "worse"]
        spread = self.steps_after.spread_ns
        out += [f"new {f.kind} on ranks {_ranks(f.ranks)} ({f.severity}): {f.message}" for f in self.new_findings
                if f.severity == "high" and f.cost_basis != "estimated"
                and not (f.per_step_ns is not None and spread and f.per_step_ns < spread)]
        return out

    def headline(self) -> str:
        """One line: how many findings are fixed, the step-time verdict, comparability."""
        if not self.comparability.comparable:
            return f"Not comparable: {self.comparability.reason()}."
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.verdict] = counts.get(f.verdict, 0) + 1
        parts = [", ".join(f"{n} {v}" for v, n in counts.items()) or "no findings before"]
        if self.new_findings:
            parts.append(f"{len(self.new_findings)} new")
        st = self.step_time
        parts.append(f"step time {st.verdict}" + (f" ({st.change_pct:+.1f} %)" if st.change_pct is not None else ""))
        text = "; ".join(parts)
        return text + (f" (differs: {self.comparability.caveat()})" if self.comparability.caveat() else "")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``workbench diff --json`` prints)."""
        d = asdict(self)
        d["comparability"]["comparable"] = self.comparability.comparable
        d["headline"] = self.headline()
        d["regressions"] = self.regressions()
        return d

    def findings_frame(self) -> pl.DataFrame:
        """One row per BEFORE finding (verdicts), then the new ones (``verdict`` ``"new"``)."""
        rows = [{"verdict": f.verdict, "kind": f.kind, "ranks": _ranks(f.ranks), "steps": _ranks(f.steps),
                 "before_cost_ns": f.before_cost_ns, "after_cost_ns": f.after_cost_ns, "evidence": f.evidence,
                 "caveat": f.caveat} for f in self.findings]
        rows += [{"verdict": "new", "kind": f.kind, "ranks": _ranks(f.ranks), "steps": _ranks(f.steps),
                  "before_cost_ns": None, "after_cost_ns": f.cost_ns, "evidence": f.message, "caveat": ""}
                 for f in self.new_findings]
        return pl.DataFrame(rows, schema={"verdict": pl.String, "kind": pl.String, "ranks": pl.String,
                                          "steps": pl.String, "before_cost_ns": pl.Int64, "after_cost_ns": pl.Int64,
                                          "evidence": pl.String, "caveat": pl.String})

    def metrics_frame(self) -> pl.DataFrame:
        return pl.DataFrame([asdict(m) for m in self.metrics],
                            schema={"name": pl.String, "unit": pl.String, "before": pl.Float64, "after": pl.Float64,
                                    "change_pct": pl.Float64, "direction": pl.String, "basis": pl.String})

    def ops_frame(self) -> pl.DataFrame:
        """Kernels then CPU ops, each most changed first."""
        return pl.DataFrame([asdict(o) for o in self.kernels + self.cpu_ops],
                            schema={"kind": pl.String, "name": pl.String, "status": pl.String,
                                    "before_count": pl.Float64, "after_count": pl.Float64, "before_ns": pl.Float64,
                                    "after_ns": pl.Float64, "delta_ns": pl.Float64})


def _ranks(r: Sequence[int]) -> str:
    return ",".join(map(str, r)) or "-"


def _per_step_series(bd: pl.DataFrame, column: str) -> list[float]:
    """One value per profiler step of ``breakdown`` (mean over ranks)."""
    if bd.is_empty() or column not in bd.columns:
        return []
    per = bd.group_by("step").agg(pl.col(column).mean()).sort("step")
    return [float(v) for v in per[column].to_list() if v is not None]


def _data_wait(steps: pl.DataFrame) -> list[float]:
    if steps.is_empty() or "data_wait_ns" not in steps.columns:
        return []
    s = steps.filter((pl.col("source").cast(pl.String) == "collector") & pl.col("data_wait_ns").is_not_null())
    return [float(v) for v in s.group_by("step").agg(pl.col("data_wait_ns").max())["data_wait_ns"].to_list()]


# ----------------------------------------------------------------------------------------------- comparability
def _fp_values(d: RunData, column: str) -> str:
    vals: set[str] = set()
    for frame, col in ((d.fingerprints, column), (d.ranks, {"torch": "torch_version", "nccl": "nccl_version"}
                                                   .get(column, column))):
        if col in frame.columns:
            vals |= {str(v) for v in frame[col].drop_nulls().unique().to_list()}
    return ", ".join(sorted(vals))


def _device(d: RunData) -> str:
    """Device models of the run; ``"none (CPU)"`` when its fingerprints name none (unknown without them)."""
    names = _fp_values(d, "device_name")
    return names or ("none (CPU)" if d.fingerprints.height else "")


def _world_size(d: RunData) -> str:
    if d.meta.get("world_size"):
        return str(d.meta["world_size"])
    if "world_size" in d.ranks.columns and d.ranks["world_size"].drop_nulls().len():
        return str(d.ranks["world_size"].drop_nulls().max())
    return str(d.ranks.height) if d.ranks.height else ""


def compiled_frames(compiles: pl.DataFrame) -> set[str]:
    """``"co_name file"`` of every frame a run compiled: the file by its base name (paths differ by host), no line
    number (a fix that adds a line above the model must not make it another job)."""
    if compiles.is_empty() or "co_name" not in compiles.columns:
        return set()
    return {f"{r['co_name']} {PurePath(r['co_filename'] or '').name}"
            for r in compiles.select("co_name", "co_filename").unique().iter_rows(named=True) if r["co_name"]}


def _parameters(d: RunData) -> str:
    """The model's parameter count when the run recorded one (run.json ``extra`` or a fingerprint)."""
    keys = ("parameters", "param_count", "model_parameters")
    extra = d.meta.get("extra") or {}
    for k in keys:
        if isinstance(extra, Mapping) and extra.get(k) is not None:
            return str(extra[k])
    for fp in _fingerprint_dicts(d):
        for k in keys:
            if fp.get(k) is not None:
                return str(fp[k])
    return ""


def _fingerprint_dicts(d: RunData) -> list[dict]:
    """Each rank's fingerprint as a dict (undecodable or non-object ones left out)."""
    if "raw" not in d.fingerprints.columns:
        return []
    out = []
    for raw in d.fingerprints["raw"].drop_nulls().to_list():
        try:
            fp = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(fp, dict):
            out.append(fp)
    return out


def _placement(d: RunData) -> tuple[str, str]:
    """How many hosts and distinct GPUs the ranks ran on (from the fingerprints; empty when unknown): two ranks
    time-sharing one GPU are another set-up than two GPUs."""
    hosts, gpus = set(), set()
    for fp in _fingerprint_dicts(d):
        dev = fp.get("device")
        hosts.add(str(fp.get("host")))
        if isinstance(dev, dict):
            gpus.add(str(dev.get("uuid") or (fp.get("host"), dev.get("index"))))
    return (str(len(hosts)) if hosts else ""), (str(len(gpus)) if gpus else "")


def _script(d: RunData) -> str:
    argv = d.meta.get("argv")
    return PurePath(str(argv[0])).name if isinstance(argv, list) and argv else ""


def _compile_config(d: RunData) -> str:
    """``run.json``'s compile config with its own hash, and the hashes of the dynamo/inductor settings the run's
    compiles (else its fingerprints) recorded."""
    from workbench.compile_config import config_hash

    cfg = d.meta.get("compile_config")
    hashes: set[str] = set()
    for frame in (d.compiles, d.fingerprints):
        if not hashes and "config_hash" in frame.columns:
            hashes = {str(h)[:16] for h in frame["config_hash"].drop_nulls().unique().to_list()}
    cfg = cfg if isinstance(cfg, dict) else None
    text = orjson.dumps(cfg, option=orjson.OPT_SORT_KEYS).decode() if cfg else "none"
    torch_side = f"; dynamo/inductor settings {', '.join(sorted(hashes))}" if hashes else ""
    return f"{text} (config hash {config_hash(cfg)[:16]}{torch_side})"


def _collector_steps(d: RunData) -> int:
    if d.steps.is_empty():
        return 0
    s = d.steps.filter(pl.col("source").cast(pl.String) == "collector")
    return int(s["step"].n_unique()) if s.height else 0


def _problems(d: RunData) -> str:
    if not d.problems:
        return "none"
    more = f" (and {len(d.problems) - 1} more)" if len(d.problems) > 1 else ""
    return f"{len(d.problems)} file problem(s): {d.problems[0]}{more}"


def _dropped(d: RunData) -> int:
    """Events reading dropped (``skipped`` rows but those whose reason says what was kept instead)."""
    s = d.skipped
    if s.is_empty() or not {"reason", "count"} <= set(s.columns):
        return 0
    lost = s.filter(~pl.col("reason").cast(pl.String).str.contains(" kept", literal=True))
    return int(lost.get_column("count").sum() or 0)


def comparability(b: RunData, a: RunData) -> Comparability:
    """What differs between the runs, and whether they are the same job at all (see the module docstring)."""
    diffs: list[Difference] = []

    def check(what: str, vb: str, va: str, effect: Effect) -> None:
        if vb and va and vb != va:
            diffs.append(Difference(what, vb, va, effect))

    check("script", _script(b), _script(a), "different job")
    check("parameter count", _parameters(b), _parameters(a), "different job")
    fb, fa = compiled_frames(b.compiles), compiled_frames(a.compiles)
    if fb and fa and fb != fa:
        diffs.append(Difference("compiled frames", ", ".join(sorted(fb - fa)) or "-", ", ".join(sorted(fa - fb)) or "-",
                                "different job" if not fb & fa else "warning"))
    check("world size", _world_size(b), _world_size(a), "warning")
    check("device", _device(b), _device(a), "warning")
    (hb, gb), (ha, ga) = _placement(b), _placement(a)
    check("hosts", hb, ha, "warning")
    check("GPUs in use", gb, ga, "warning")
    for col in ("torch", "cuda", "nccl", "backend"):
        check(col, _fp_values(b, col), _fp_values(a, col), "warning")
    if (b.kernels.height > 0) != (a.kernels.height > 0):
        diffs.append(Difference("device data", "yes" if b.kernels.height else "none",
                                "yes" if a.kernels.height else "none", "warning"))
    check("compile config", _compile_config(b), _compile_config(a), "expected")
    check("collector steps", str(_collector_steps(b) or ""), str(_collector_steps(a) or ""), "note")
    if b.problems or a.problems:
        diffs.append(Difference("read problems", _problems(b), _problems(a), "warning"))
    db, da = _dropped(b), _dropped(a)
    if db or da:
        diffs.append(Difference("events dropped while reading", f"{db:,}", f"{da:,}", "note"))
    effects = {d.effect for d in diffs}
    level = "not comparable" if "different job" in effects else "warnings" if "warning" in effects else "comparable"
    return Comparability(level, tuple(diffs))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------- findings
@dataclass(frozen=True)
class _F:
    id: str | None
    kind: str
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    frame: str | None
    severity: str
    cost_ns: int | None
    message: str
    source: str
    cost_basis: str | None = None
    scope: str = "run"          # KindSpec.cost_scope
    one_shot: bool = False      # KindSpec.one_shot


def _frame_of(evidence: Any) -> str | None:
    """The compiled frame a recompile finding is about (``co_name file``, as :func:`compiled_frames`), from its
    evidence's ``co_name`` and ``location`` (or ``co_filename:co_firstlineno``)."""
    co_name = getattr(evidence, "co_name", None)
    if not co_name:
        return None
    loc = getattr(evidence, "location", None)
    if not loc and getattr(evidence, "co_filename", None):
        loc = f"{evidence.co_filename}:{evidence.co_firstlineno}"
    if loc:
        path, sep, _line = str(loc).rpartition(":")
        loc = PurePath(path if sep else str(loc)).name
    return f"{co_name} {loc}" if loc else str(co_name)


def root_findings(findings: Sequence[Finding[Any]]) -> list[_F]:
    """The root findings as the diff compares them (symptoms are judged through their cause)."""
    out = []
    for f in findings:
        spec = f.spec
        out.append(_F(f.id, f.kind.value, tuple(sorted(f.ranks)), tuple(sorted(f.steps)),
                      _frame_of(f.evidence) if spec.cost_scope == "run" else None, f.severity, f.cost_ns, f.message,
                      f.source, f.cost.basis, spec.cost_scope, spec.one_shot))
    return out


def _window_steps(d: RunData) -> int:
    """Complete profiler steps in the analysed window (the most any rank has)."""
    ws = window_steps(d.steps) if not d.steps.is_empty() else pl.DataFrame()
    if ws.is_empty():
        return 0
    return int(ws.filter(pl.col("in_window")).group_by("rank").len()["len"].max() or 0)


def _per_step(f: _F, d: RunData) -> float | None:
    """The finding's cost per step of what it was measured over (window steps or collector steps)."""
    if f.cost_ns is None:
        return None
    n = _window_steps(d) if f.scope == "window" else _collector_steps(d) if f.scope == "steps" else 0
    return f.cost_ns / n if n else None


def _covers(d: RunData, f: _F) -> tuple[bool, str]:
    """Whether ``d`` recorded what it takes to see ``f`` again on its ranks."""
    table, what = _NEEDS.get(f.source, ("events", "trace events"))
    frame = getattr(d, table)
    if frame.is_empty():
        return False, f"AFTER has no {what}"
    if f.ranks and "rank" in frame.columns:
        missing = sorted(set(f.ranks) - set(frame["rank"].unique().to_list()))
        if missing:
            return False, f"AFTER has no {what} for ranks {_ranks(missing)}"
    return True, ""


def _match(f: _F, after: list[_F], used: set[int]) -> int | None:
    """Index of the AFTER finding that is ``f`` again: same kind measured the same way (the same analysis: a GPU
    run's exposed communication is not a CPU run's host wait) and frame; same ranks, else overlapping ranks."""
    cands = [i for i, g in enumerate(after) if i not in used and g.kind == f.kind and g.source == f.source
             and (f.frame is None or g.frame is None or g.frame == f.frame)]
    for i in cands:
        if after[i].ranks == f.ranks:
            return i
    for i in cands:
        if set(after[i].ranks) & set(f.ranks) or not f.ranks:
            return i
    return None


def _looked_at(a: RunData, source: str) -> str:
    """What of AFTER was searched for the finding (the evidence of a ``fixed``)."""
    if source == "recompiles":
        recompiles = _recompiles(a.compiles) or 0
        return f"AFTER's compile logs ({a.compiles['rank'].n_unique()} ranks, {recompiles:g} recompiles)"
    if source == "stragglers":
        return f"AFTER's {_collector_steps(a)} collector steps"
    return "AFTER's trace"


def _spread(d: RunData) -> float:
    """The step-to-step spread (p75 − p25 of the job's step times, ns): changes below it are noise-level."""
    return step_stats(*job_step_times(d.steps)).spread_ns or 0.0


def _judge(f: _F, g: _F | None, b: RunData, a: RunData, comp: Comparability) -> FindingVerdict:
    caveat = comp.caveat()
    base = dict(kind=f.kind, ranks=f.ranks, steps=f.steps, frame=f.frame, severity=f.severity, message=f.message,
                source=f.source, before_cost_ns=f.cost_ns, before_per_step_ns=_per_step(f, b), caveat=caveat)
    if not comp.comparable:
        return FindingVerdict(**base, after_cost_ns=None, after_per_step_ns=None, verdict="not comparable",
                              evidence=f"different jobs ({comp.reason()})")
    noise = max(_spread(b), _spread(a))  # the step-to-step spread of either run: changes below it are noise
    if g is None:
        ok, why = _covers(a, f)
        if ok and f.scope == "steps" and _collector_steps(a) < MIN_STEPS:
            ok, why = False, f"AFTER has only {_collector_steps(a)} collector steps"
        if ok and f.one_shot:
            ok, why = False, "not in AFTER, but one timing a run decides it (one sample a side)"
        pb = base["before_per_step_ns"]
        if ok and f.scope != "run" and pb is not None and pb < noise:
            ok, why = False, (f"not in AFTER, but it cost {duration(pb)} per step, within the step-to-step spread "
                              f"({duration(noise)})")
        if not ok:
            return FindingVerdict(**base, after_cost_ns=None, after_per_step_ns=None, verdict="cannot tell",
                                  evidence=f"{why}: its absence proves nothing")
        return FindingVerdict(**base, after_cost_ns=0, after_per_step_ns=0.0, verdict="fixed",
                              evidence=f"no {f.kind} on ranks {_ranks(f.ranks)} in {_looked_at(a, f.source)} "
                                       f"(was {duration(f.cost_ns)})")
    after = dict(after_cost_ns=g.cost_ns, after_per_step_ns=_per_step(g, a), after_id=g.id)
    if f.scope == "run":  # a recompile happens or not: judge by how often
        nb, na = max(len(f.steps), 1), max(len(g.steps), 1)
        verdict: Verdict = "smaller" if na < nb else "worse" if na > nb else "unchanged"
        return FindingVerdict(**base, **after, verdict=verdict,
                              evidence=f"still there: steps {_ranks(f.steps)} → {_ranks(g.steps)}, ranks "
                                       f"{_ranks(f.ranks)} → {_ranks(g.ranks)}, cost {duration(f.cost_ns)} → "
                                       f"{duration(g.cost_ns)}")
    pb, pa = base["before_per_step_ns"], after["after_per_step_ns"]
    if f.scope == "steps" and min(_collector_steps(b), _collector_steps(a)) < MIN_STEPS:
        return FindingVerdict(**base, **after, verdict="cannot tell",
                              evidence=f"still there, but only {_collector_steps(b)} and {_collector_steps(a)} "
                                       f"steps: too few to tell a change of its cost from noise")
    if pb is None or pa is None or pb <= 0:
        return FindingVerdict(**base, **after, verdict="cannot tell",
                              evidence=f"still there (cost {duration(f.cost_ns)} → {duration(g.cost_ns)}), but the cost "
                                       f"cannot be put per step on both sides")
    ratio = pa / pb
    verdict = "smaller" if ratio < 1 - FINDING_TOLERANCE else "worse" if ratio > 1 + FINDING_TOLERANCE \
        else "unchanged"
    if verdict != "unchanged" and abs(pa - pb) < noise:
        return FindingVerdict(**base, **after, verdict="unchanged",
                              evidence=f"still there: {duration(pb)} → {duration(pa)} per step, a change within the "
                                       f"step-to-step spread ({duration(noise)}): noise-level")
    return FindingVerdict(**base, **after, verdict=verdict,
                          evidence=f"still there: {duration(pb)} → {duration(pa)} per step ({100 * (ratio - 1):+.0f} %; "
                                   f"±{100 * FINDING_TOLERANCE:.0f} % counts as unchanged)")


def judge_findings(b: RunData, a: RunData, comp: Comparability) -> tuple[list[FindingVerdict], list[NewFinding]]:
    """A verdict per root finding of BEFORE, and AFTER's root findings that match none."""
    fb, fa = root_findings(b.findings), root_findings(a.findings)
    used: set[int] = set()
    verdicts = []
    for f in fb:
        i = _match(f, fa, used)
        if i is not None:
            used.add(i)
        verdicts.append(_judge(f, None if i is None else fa[i], b, a, comp))
    new = [NewFinding(g.kind, g.ranks, g.steps, g.frame, g.severity, g.cost_ns, g.message, _per_step(g, a),
                      g.cost_basis)
           for i, g in enumerate(fa) if i not in used]
    return verdicts, new


# ----------------------------------------------------------------------------------------------- ops
_TRAILING_ID = re.compile(r"(_\d+)+$")


def normalise_name(name: str) -> str:
    """Kernel / op name with generated suffixes dropped: ``triton_poi_fused_add_12`` → ``triton_poi_fused_add``."""
    return _TRAILING_ID.sub("", name) if name else name


def ops_per_step(d: RunData, kind: Literal["kernel", "cpu_op"]) -> pl.DataFrame:
    """Per normalised name: ``count`` and ``ns`` per profiler step in the window, mean over ranks."""
    empty = pl.DataFrame(schema={"name": pl.String, "count": pl.Float64, "ns": pl.Float64})
    ws = window_steps(d.steps) if not d.steps.is_empty() else pl.DataFrame()
    if kind == "kernel":
        rows = window_kernels(d.kernels, d.steps) if not d.kernels.is_empty() else d.kernels
    elif d.events.is_empty():
        return empty
    else:
        rows = d.events.filter(pl.col("kind").cast(pl.String) == "cpu_op")
        if not ws.is_empty():
            rows = rows.join(ws.filter(pl.col("in_window")).select("rank", "step"), on=["rank", "step"], how="semi")
    if rows.is_empty():
        return empty
    nsteps = (ws.filter(pl.col("in_window")).group_by("rank").agg(n=pl.len()) if not ws.is_empty()
              else rows.group_by("rank").agg(n=pl.lit(1)))
    nranks = rows["rank"].n_unique()
    per = (rows.with_columns(name=pl.col("name").cast(pl.String).str.replace(_TRAILING_ID.pattern, ""))  # vectorised
           .group_by("rank", "name").agg(count=pl.len(), ns=pl.col("dur").sum())
           .join(nsteps, on="rank", how="left")
           .with_columns(n=pl.col("n").fill_null(1).clip(lower_bound=1)))
    return per.group_by("name").agg(count=(pl.col("count") / pl.col("n")).sum() / nranks,
                                    ns=(pl.col("ns") / pl.col("n")).sum() / nranks)


def op_changes(b: RunData, a: RunData, kind: Literal["kernel", "cpu_op"], top: int = TOP_N) -> list[OpChange]:
    """The ``top`` names by absolute change of time per step (HTA TraceDiff style): added, removed, changed."""
    j = ops_per_step(b, kind).join(ops_per_step(a, kind), on="name", how="full", coalesce=True, suffix="_a")
    if j.is_empty():
        return []
    j = j.with_columns([pl.col(c).fill_null(0.0) for c in ("count", "ns", "count_a", "ns_a")]).with_columns(
        delta=pl.col("ns_a") - pl.col("ns")).sort(pl.col("delta").abs(), descending=True).head(top)
    out = []
    for r in j.iter_rows(named=True):
        status = "added" if r["count"] == 0 else "removed" if r["count_a"] == 0 else \
            "changed" if abs(r["delta"]) > 0.05 * max(r["ns"], 1.0) or abs(r["count_a"] - r["count"]) >= 0.5 \
            else "same"
        out.append(OpChange(kind, r["name"], status, r["count"], r["count_a"], r["ns"], r["ns_a"], r["delta"]))
    return out


# ----------------------------------------------------------------------------------------------- metrics
def _metric_of(name: str, unit: str, c: Change, comparable: bool) -> Metric:
    direction: Direction = c.verdict if comparable else "not comparable"
    if c.median_before is None and c.median_after is None:
        direction = "n/a"
    return Metric(name, unit, c.median_before, c.median_after, c.change_pct, direction, c.reason)


def _count_metric(name: str, unit: str, vb: float | None, va: float | None, comparable: bool, basis: str) -> Metric:
    """A whole-run count (recompiles): any increase is worse, 0 → 1 included; any decrease better."""
    pct = 100.0 * (va / vb - 1.0) if vb and va is not None else None
    if vb is None or va is None:
        direction: Direction = "n/a"
    elif not comparable:
        direction = "not comparable"
    elif va == vb:
        direction = "unchanged"
    else:
        direction = "worse" if va > vb else "better"
    return Metric(name, unit, vb, va, pct, direction, basis)


def _recompiles(c: pl.DataFrame) -> float | None:
    """Recompiles of every rank (:func:`workbench.analyses.metrics.recompile_counts`)."""
    if c.is_empty() or "frame_compile_id" not in c.columns:
        return None
    return float(sum(metrics.recompile_counts(c).values()))


def _compile_time(c: pl.DataFrame) -> float | None:
    """Compile time of the slowest-compiling rank (ns; :func:`workbench.analyses.metrics.compile_time_ns`): it holds
    every other rank."""
    known = [v for v in metrics.compile_time_ns(c).values() if v is not None]
    return float(max(known)) if known else None


def per_step_metrics(b: RunData, a: RunData, step_time: Change, sb: StepStats, sa: StepStats,
                     comparable: bool) -> list[Metric]:
    """The per-step table: step time (median, p90, spread, mean, worst), device time per step, data wait,
    recompiles and compile time."""
    steps_basis = f"{sb.n} vs {sa.n} {sb.source or '-'}/{sa.source or '-'} steps"
    out = [_metric_of("step time (median)", "ns/step", step_time, comparable)]
    floor = 0.01 * (sb.median_ns or 0.0)
    for label, attr in (("step time (p90)", "p90_ns"), ("step spread (p75 − p25)", "spread_ns"),
                        ("step time (mean, stalls included)", "mean_ns"), ("worst step", "max_ns")):
        vb, va = getattr(sb, attr), getattr(sa, attr)
        pct = 100.0 * (va / vb - 1.0) if vb and va is not None else None
        out.append(Metric(label, "ns/step", vb, va, pct, "n/a" if vb is None or va is None else "info",
                          f"single statistic of {steps_basis}: shown, not judged"))
    for label, col in (("compute per step", "compute_ns"), ("communication per step", "comm_ns"),
                       ("exposed communication per step", "comm_exposed_ns"), ("idle per step", "idle_ns")):
        c = compare(_per_step_series(b.breakdown, col), _per_step_series(a.breakdown, col),
                    what="profiler steps", floor=floor)
        out.append(_metric_of(label, "ns/step", c, comparable))
    out.append(_metric_of("data wait per step", "ns/step",
                          compare(_data_wait(b.steps), _data_wait(a.steps), floor=floor), comparable))
    out.append(_count_metric("recompiles", "count", _recompiles(b.compiles), _recompiles(a.compiles), comparable,
                             f"whole run, all ranks ({_collector_steps(b)} vs {_collector_steps(a)} steps); "
                             f"any increase is worse"))
    cb, ca = _compile_time(b.compiles), _compile_time(a.compiles)
    out.append(Metric("compile time (slowest rank)", "ns", cb, ca,
                      100.0 * (ca / cb - 1.0) if cb and ca is not None else None,
                      "n/a" if cb is None or ca is None else "info",
                      "whole run, one value a side (host load moves it): shown, not judged; the recompile "
                      "findings carry the verdict"))
    return out


# ----------------------------------------------------------------------------------------------- the diff
def diff_runs(before: RunData, after: RunData, *, top: int = TOP_N) -> RunDiff:
    """Compare two runs (see the module docstring): the one diff every view shows."""
    comp = comparability(before, after)
    verdicts, new = judge_findings(before, after, comp)
    src_b, vb = job_step_times(before.steps)
    src_a, va = job_step_times(after.steps)
    st = compare(vb, va)
    if not comp.comparable:
        st = Change(st.n_before, st.n_after, st.median_before, st.median_after, st.change_pct, st.ci_low_pct,
                    st.ci_high_pct, st.p_value, "not comparable", f"different jobs: {st.reason}")
    sb, sa = step_stats(src_b, vb), step_stats(src_a, va)
    return RunDiff(
        before=before.name, after=after.name, comparability=comp, findings=tuple(verdicts), new_findings=tuple(new),
        step_time=st, steps_before=sb, steps_after=sa,
        metrics=tuple(per_step_metrics(before, after, st, sb, sa, comp.comparable)),
        kernels=tuple(op_changes(before, after, "kernel", top)), cpu_ops=tuple(op_changes(before, after, "cpu_op", top)),
        problems_before=before.problems, problems_after=after.problems,
    )
