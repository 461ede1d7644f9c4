"""The fault loop: record → analyze → recommend → rerun with the written config → diff, and the checks on each.

:func:`check_found` compares the analyses' root causes with a run's ground truth; :func:`loop` runs the whole loop
for one fault and returns a :class:`LoopResult` (one row of ``bench/faults.py``'s table). The tests in
``tests/faults/`` use the same functions, so the table and the tests cannot disagree.

What the checks know of a fault's kind comes from its ``KindSpec`` (``analyses/kinds.py``): the other kinds the same
problem may be reported as (``also_found_as``), whether its blamed ranks are the faulty ones (``names_culprit``,
``Finding.blamed_ranks``) and whether its cost covers the profiler window only (``cost_scope``). A fault whose
``finding`` is not a declared kind is refused in one line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from workbench.format import duration
from workbench_zoo.registry import GROUND_TRUTH, Fault, get_fault

if TYPE_CHECKING:
    from workbench.analyses.kinds import KindSpec

def planted_spec(fault: Fault) -> KindSpec:
    """The :class:`~workbench.analyses.kinds.KindSpec` of ``fault``'s ``finding``; ValueError, in one line, for a
    kind that is not declared (``analyses/kinds.py``): the verifier cannot check it."""
    from workbench.analyses.kinds import kind_spec

    try:
        return kind_spec(fault.finding)
    except KeyError:
        raise ValueError(f"fault {fault.name}: its finding {fault.finding!r} is not a declared finding kind "
                         "(analyses/kinds.py), so the verifier cannot check it") from None


def planted_kinds(fault: Fault) -> tuple[str, ...]:
    """The kinds that count as the planted finding of ``fault``: its ``finding`` and the kinds the same problem may
    also be reported as (``KindSpec.also_found_as``)."""
    spec = planted_spec(fault)
    return (spec.kind.value, *(k.value for k in spec.also_found_as))


#: A fault's cost is "right" within this relative error of the ground truth.
COST_TOLERANCE = 0.25

@dataclass
class Found:
    """How the analyses' root causes match a planted fault."""

    position: int | None            # index of the matching root cause (0 = top), None = missing
    finding: Any = None             # the matching Finding
    ranks_ok: bool = False
    steps_ok: bool = False
    cost_ns: int | None = None
    cost_basis: str | None = None
    truth_ns: int | None = None
    top_kind: str | None = None

    @property
    def cost_error(self) -> float | None:
        if self.cost_ns is None or not self.truth_ns:
            return None
        return abs(self.cost_ns - self.truth_ns) / self.truth_ns

    def label(self) -> str:
        if self.position is None:
            return f"no (top: {self.top_kind or 'nothing'})"
        where = "top" if self.position == 0 else f"#{self.position + 1} (top: {self.top_kind})"
        return f"{where}; ranks {'ok' if self.ranks_ok else 'WRONG'}, steps {'ok' if self.steps_ok else 'WRONG'}"


def ground_truth(run_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / GROUND_TRUTH).read_text())


def roots_of(run_dir: str | Path) -> list[Any]:
    """The typed root causes ``workbench analyze`` reports for ``run_dir`` (most costly first)."""
    import workbench
    from workbench.analyses.summary import analysis_tables

    return list(analysis_tables(workbench.open(run_dir)).roots)


def check_found(fault: Fault, roots: list[Any], truth: dict[str, Any]) -> Found:
    """Where the planted kind is among ``roots``, whether its ranks and steps are the planted ones, its cost."""
    kinds = planted_kinds(fault)
    top = roots[0].kind if roots else None
    for i, f in enumerate(roots):
        if f.kind not in kinds:
            continue
        same = [g for g in roots if g.kind in kinds]      # e.g. the recompiles and the limit they ran into
        if planted_spec(fault).names_culprit:             # the ranks it blames are the faulty ones
            ranks_ok = set(f.blamed_ranks) == set(fault.ranks)
        else:                                             # a job-wide fault may come as one finding per rank
            ranks_ok = set(fault.ranks) <= {r for g in same for r in g.ranks}
        seen = {s for g in same for s in g.steps} | {_step_of(g) for g in same}
        steps_ok = (not fault.steps) or set(fault.steps) <= seen
        # one cost shared by several findings of the kind at the same ranks and steps (the frames of one step's
        # divergent recompile share its wait): the fault's cost is their sum
        parts = [g.cost.ns for g in same if g.kind == f.kind and g.ranks == f.ranks and g.steps == f.steps]
        cost = sum(parts) if f.cost.ns is not None and None not in parts else f.cost.ns
        return Found(i, f, ranks_ok, steps_ok, cost, f.cost.basis, expected_cost(f, truth), top)
    return Found(None, None, truth_ns=truth.get("cost_ns"), top_kind=top)


def expected_cost(f: Any, truth: dict[str, Any]) -> int | None:
    """The ground truth to compare ``f``'s cost with: for a kind whose cost covers the analysed profiler window
    only (``KindSpec.cost_scope == "window"``), the script's own measurement summed over the finding's steps, on
    the finding's rank (a one-rank finding) or the worst rank, as the kinds define their cost; else the run's
    ``cost_ns``."""
    by = truth.get("cost_by_rank_step_ns")
    if f.spec.cost_scope == "window" and by and f.steps:
        ranks = [str(r) for r in f.ranks if str(r) in by] if len(f.ranks) == 1 else list(by)   # like with like
        sums = [sum(int(by[r].get(str(s), 0)) for s in f.steps) for r in ranks or list(by)]
        return max(sums) if sums else None
    return truth.get("cost_ns")


def _step_of(f: Any) -> int | None:
    return getattr(f.evidence, "step", None)


def compiles_per_rank(run_dir: str | Path) -> dict[int, int]:
    """The most compiles of any one frame, per rank (``frame_id`` groups a code object's compiles)."""
    import workbench

    c = workbench.open(run_dir).compiles
    if c.is_empty():
        return {}
    key = [k for k in ("frame_id", "co_name") if k in c.columns][:1] or ["rank"]
    g = c.group_by(["rank", *key]).agg(pl.len().alias("n")).group_by("rank").agg(pl.col("n").max())
    return {int(r): int(n) for r, n in g.iter_rows()}


def applied_report(run_dir: str | Path) -> list[dict[str, Any]]:
    meta = json.loads((Path(run_dir) / "run.json").read_text())
    return list(meta.get("compile_config_applied") or [])


@dataclass
class LoopResult:
    """One fault through the loop (a row of the bench table)."""

    fault: str
    found: Found
    fix_written: str = "n/a"
    fix_applied: str = "n/a"
    gone: str = "n/a"
    verdict: str = "n/a"
    compiles_after: dict[int, int] = field(default_factory=dict)
    config_path: str | None = None
    recommendations: Any = None
    seconds: float = 0.0

    def row(self) -> dict[str, str]:
        err = self.found.cost_error
        truth = self.found.truth_ns
        cost = ("n/a (no time cost)" if not truth else "not found" if err is None else
                f"{100 * err:.0f}% ({duration(self.found.cost_ns or 0)} vs {duration(truth)}, "
                f"{self.found.cost_basis})")
        return {"fault": self.fault, "found": self.found.label(), "cost error": cost,
                "fix written": self.fix_written, "fix applied": self.fix_applied,
                "fault gone on rerun": self.gone, "diff verdict": self.verdict}


def recommend_for(run_dir: str | Path, roots: list[Any], out: Path, sites: Any = None) -> tuple[Any, Path]:
    """The ranked fixes for ``roots`` of ``run_dir`` as their RECOMMENDATIONS frame, and ``out``, where their
    compile config is written."""
    from workbench.analyses.recommendations import ranked_fixes_run, recommendations_frame, to_compile_config

    import workbench

    fixes = ranked_fixes_run(workbench.open(run_dir), roots, sites=sites)
    out.write_text(to_compile_config(fixes, header=f"fixes for {run_dir} (bench/faults.py)"))
    return recommendations_frame(fixes), out


def source_sites_of(run_dir: str | Path) -> dict[str, Any] | None:
    """``run.json``'s ``source_sites`` (the lines the collector found in the training script), if recorded."""
    path = Path(run_dir) / "run.json"
    return json.loads(path.read_text()).get("source_sites") if path.is_file() else None


def script_sites(name: str) -> Any:
    """The source sites of fault ``name``'s script as the collector would record them (scanned now, at its
    ``with collector.step():``): for a recording made before the collector recorded ``source_sites``."""
    import ast

    from workbench.collectors.source_sites import scan
    from workbench_zoo.registry import script_path

    path = str(script_path(name))
    tree = ast.parse(Path(path).read_text())
    line = next(n.lineno for n in ast.walk(tree) if isinstance(n, ast.With) and any(
        isinstance(i.context_expr, ast.Call) and isinstance(i.context_expr.func, ast.Attribute)
        and i.context_expr.func.attr == "step" for i in n.items))
    return scan(path, line)


def fix_written(fault: Fault, recs: Any) -> str:
    """The best fix for the planted kind: ``config <settings>`` when it is a config fix written to the TOML, else
    ``code (<fix>, file:line)``, plus the config alternative written for it, if any."""
    kinds = planted_kinds(fault)
    mine = recs.filter(pl.col("finding_kind").is_in(list(kinds)))
    if mine.is_empty():
        return "no fix for it"
    applied = mine.filter(pl.col("apply"))
    best = mine.row(0, named=True)
    if best["apply"]:
        return "config " + "; ".join(_settings(c) for c in applied["config"].to_list())
    if fault.fix == "config":
        return "no config fix"
    loc = best["location"]
    why = re.search(r"\((no [^()]*)\)$", best["code_advice"] or "")
    short = (f"{Path(loc.rsplit(':', 1)[0]).name}:{loc.rsplit(':', 1)[1]}" if loc else
             why.group(1) if why else "no line")
    text = f"code ({best['fix_id']}, {short})"
    if applied.height:
        text += "; config alternative " + "; ".join(_settings(c) for c in applied["config"].to_list())
    return text


def _settings(cfg_json: str) -> str:
    cfg = json.loads(cfg_json)
    return ", ".join(f"{s}.{k}={v!r}" for s, body in cfg.items() for k, v in body.items())


def gone_on_rerun(fault: Fault, before_found: Found, after_roots: list[Any], after_dir: Path) -> tuple[bool, str]:
    """The planted finding is absent after (same kind on the planted ranks); recompiles: ≤ 2 per rank."""
    from workbench.analyses.kinds import RECOMPILE_KINDS, Kind

    kinds = planted_kinds(fault)
    again = [f for f in after_roots if f.kind in kinds and set(f.blamed_ranks) & set(fault.ranks)]
    per_rank = compiles_per_rank(after_dir)
    recompile = planted_spec(fault).kind in {Kind.DIVERGENT_RECOMPILE, Kind.RECOMPILE_LIMIT, *RECOMPILE_KINDS}
    ok = not again and (not recompile or all(n <= 2 for n in per_rank.values()))
    detail = f"{'yes' if ok else 'NO'}"
    if recompile:
        detail += f" (compiles of the frame per rank: {', '.join(f'r{r}={n}' for r, n in sorted(per_rank.items()))})"
    if again:
        detail += f"; still: {again[0].kind} {again[0].cost.label()}"
    return ok, detail


def planted_settings(fault: Fault, recs: Any) -> set[str]:
    """``section.key`` of the applied config fixes that answer the planted kind (``mark_dynamic.<arg>:<dim>``)."""
    kinds = planted_kinds(fault)
    out: set[str] = set()
    for c in recs.filter(pl.col("apply") & pl.col("finding_kind").is_in(list(kinds)))["config"].to_list():
        for sec, body in json.loads(c).items():
            for k, v in body.items():
                out.add(f"{sec}.{k}:{v['dim']}" if sec == "mark_dynamic" and isinstance(v, dict) else f"{sec}.{k}")
    return out


def applied_label(fault: Fault, recs: Any, report: list[dict[str, Any]]) -> str:
    """``yes (settings)`` when every setting of the planted fix was applied on the rerun, else what was not and
    why; the other settings of the config that did not apply are named after it."""
    mine = planted_settings(fault, recs)
    planted = [r for r in report if r["setting"] in mine]
    others = [r for r in report if r["setting"] not in mine and not r["applied"]]
    bad = [r for r in planted if not r["applied"]]
    text = ("yes (" + ", ".join(r["setting"] for r in planted) + ")") if planted and not bad else \
        "NO: " + ("; ".join(f"{r['setting']}: {r['reason']}" for r in bad) or "the fix is not in the run's config")
    if others:
        text += "; not applied: " + "; ".join(f"{r['setting']} ({r['reason']})" for r in others)
    return text


def diff_verdict(before: Path, after: Path, fault: Fault) -> str:
    """The diff's verdict on the planted finding (``analyses/diff.py``)."""
    import workbench
    from workbench.analyses.diff import RunData, diff_runs
    from workbench.analyses.summary import analysis_tables

    rb, ra = workbench.open(before), workbench.open(after)
    d = diff_runs(RunData.from_run(rb, analysis_tables(rb)), RunData.from_run(ra, analysis_tables(ra)))
    kinds = planted_kinds(fault)
    mine = [v for v in d.findings if v.kind in kinds]
    return mine[0].verdict if mine else "no verdict for the kind"


def loop(name: str, work: Path, *, rerun: bool = True, reuse: bool = False) -> LoopResult:
    """Run fault ``name`` through the whole loop under ``work/<name>/`` (before/, fixes.toml, after/);
    ``reuse``: runs already recorded there are analysed again (their ground truth recomputed), not rerun."""
    import time

    from workbench_zoo.runner import run_fault as _run, write_ground_truth

    def run_fault(n: str, out: Path, **kw: Any) -> dict[str, Any]:
        if reuse and (out / GROUND_TRUTH).is_file():
            return write_ground_truth(n, out)
        return _run(n, out, **kw)

    t0 = time.monotonic()
    fault = get_fault(name)
    planted_spec(fault)                   # an undeclared kind is refused before anything runs
    base = work / name
    base.mkdir(parents=True, exist_ok=True)
    before = base / "before"
    truth = run_fault(name, before)
    roots = roots_of(before)
    found = check_found(fault, roots, truth)
    recs, cfg = recommend_for(before, roots, base / "fixes.toml")
    res = LoopResult(name, found, fix_written=fix_written(fault, recs), config_path=str(cfg), recommendations=recs)
    if rerun and fault.fix == "config" and recs.filter(pl.col("apply")).height:
        after = base / "after"
        run_fault(name, after, compile_config=cfg)
        res.fix_applied = applied_label(fault, recs, applied_report(after))
        ok, res.gone = gone_on_rerun(fault, found, roots_of(after), after)
        res.compiles_after = compiles_per_rank(after)
        res.verdict = diff_verdict(before, after, fault)
    res.seconds = time.monotonic() - t0
    return res


def recorded_loop(name: str, before: Path, after: Path | None = None) -> LoopResult:
    """The loop's row for runs recorded elsewhere (the GPU faults in ``sample_traces/``): analysed here, the fix
    written for ``before`` compared with what the ``after`` rerun applied."""
    import tempfile
    import time

    t0 = time.monotonic()
    fault = get_fault(name)
    planted_spec(fault)
    roots = roots_of(before)
    found = check_found(fault, roots, ground_truth(before))
    # recorded before the collector wrote source_sites: the script's sites, scanned now (say so in the row)
    recorded = source_sites_of(before)
    with tempfile.TemporaryDirectory() as tmp:
        recs, _ = recommend_for(before, roots, Path(tmp) / "fixes.toml", sites=recorded or script_sites(name))
    res = LoopResult(name, found, fix_written=fix_written(fault, recs), recommendations=recs)
    if not recorded and fault.fix == "code":
        res.fix_written += " [line from the script scanned now: recorded before source_sites]"
    if after is not None and (after / "run.json").is_file():
        res.fix_applied = applied_label(fault, recs, applied_report(after))
        _, res.gone = gone_on_rerun(fault, found, roots_of(after), after)
        res.verdict = diff_verdict(before, after, fault)
    res.seconds = time.monotonic() - t0
    return res


def markdown_table(results: list[LoopResult]) -> str:
    rows = [r.row() for r in results]
    cols = list(rows[0]) if rows else []
    out = ["| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    out += ["| " + " | ".join(r[c].replace("|", "/") for c in cols) + " |" for r in rows]
    return "\n".join(out)
