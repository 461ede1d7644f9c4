"""Every finding kind the code names is declared (``analyses/kinds.py``), and the code names kinds through ``Kind``.

The check parses every ``.py`` under ``workbench/``, ``analyses/``, ``app/``, ``collectors/`` and the fault zoo
(``zoo/workbench_zoo/``) (the AST: nothing is imported or run) and reports two things:

1. **An undeclared kind.** A string literal *in a kind context* must be a declared kind (or a word of one of the
   other vocabularies also called "kind": trace event kinds, source-site kinds, graph-break types, the config
   allowlist's rule kinds). Kind contexts: compared (``==``, ``!=``, ``in``) with a kind value (an attribute
   ``kind`` / ``*_kind``, ``row["kind"]``, ``pl.col("kind")``, a variable ``*_kind``, or a variable ``kind`` in a
   module that imports the findings); passed to ``.is_in`` / ``.eq`` / ``.startswith`` of one; the kind argument of
   ``make_finding``, ``finding_id``, ``kind_spec``, ``Kind``, ``register_detector``, ``register_fixer(kinds=...)``;
   a key looked up in a mapping named ``*kind*``; an element of a literal dict/set/list/tuple of which more than
   half the elements name kinds (a kind map such as the old ``KIND_PAGE``); a fault spec's ``finding``. Such a
   branch never runs: the five stale names this test was written against (``timeout_risk``, ``compile_failed``, ``collective_skew``,
   ``data_wait``, ``recompile``) are each reported with the kind they meant (``KindSpec.aliases``).
2. **A kind named by a string.** Outside ``analyses/kinds.py``, a string literal equal to a declared kind name is
   reported (use ``Kind.X``: a typo is then an AttributeError at import), except where the same word means something
   else: compared with a compile *cause* (``cause == "graph_break"``), or listed in :data:`OTHER_MEANING` with
   the reason. :data:`PENDING` lists kind strings in modules this change did not own, to be switched to ``Kind``.

A fault script's ``FAULT = Fault(..., finding="...")`` is the one place a kind must be a string: the zoo's registry
reads the spec as literals, without running the script: that argument is exempt from rule 2, and its ``name=`` is
the fault's name (which may equal its kind's). :data:`NOT_DECLARED_YET` lists the faults whose kind a
later change declares (the zoo's verifier refuses them in one line until then).
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.analyses.kinds import Kind, resolve

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("workbench", "analyses", "app", "collectors", "zoo/workbench_zoo")
SKIPPED = ("analyses/kinds.py",)

DECLARED = frozenset(k.value for k in Kind)


def _other_vocabularies() -> frozenset[str]:
    """Words of the other things the code calls a "kind"."""
    from typing import get_args

    from workbench.analyses.recompiles import GRAPH_BREAK_TYPES
    from workbench.config_policy import RuleKind
    from workbench.schema import EventKindType
    from workbench.source_scan import KINDS as SITE_KINDS

    return (frozenset(EventKindType.categories.to_list()) | frozenset(SITE_KINDS) | frozenset(GRAPH_BREAK_TYPES)
            | frozenset(get_args(RuleKind)))


OTHER = _other_vocabularies()

#: (file, word): a declared kind's name used for something else there, and what.
OTHER_MEANING: dict[tuple[str, str], str] = {
    ("workbench/compile_config.py", "recompile_limit"): "torch._dynamo.config.recompile_limit, a config key",
    ("workbench/config_policy.py", "recompile_limit"): "torch._dynamo.config.recompile_limit, a config key",
    ("analyses/recommendations.py", "recompile_limit"): "torch._dynamo.config.recompile_limit, a config key",
    ("analyses/recompiles.py", "recompile_limit"): "the limit type torch's eager-fallback message names",
    ("analyses/recompiles.py", "graph_break"): "a compile cause (kinds.CAUSES)",
    ("workbench/compile_log.py", "graph_break"): "a TORCH_TRACE record name",
    ("app/page_recompiles.py", "graph_break"): "a compile cause (kinds.CAUSES)",
    ("app/page_recompiles.py", "compile_time"): "a summary row's id",
    ("workbench/flight_recorder.py", "hang"): "the collector's hang/ directory",
    ("collectors/hang_capture.py", "hang"): "the collector's hang/ directory",
    ("workbench/schema.py", "collective_wait"): "an analysis table's name",
    ("zoo/workbench_zoo/faults/_gpu_idle.py", "unfused_optimizer"): "the GPU-idle fault the shared loop plants",
    ("zoo/workbench_zoo/faults/gpu_unfused_optimizer.py", "unfused_optimizer"): "the GPU-idle fault it plants",
    ("workbench/schema.py", "collective_drift"): "an analysis table's name",
    ("analyses/summary.py", "collective_wait"): "an analysis table's name",
    ("analyses/summary.py", "collective_drift"): "an analysis table's name",
    ("analyses/collectives.py", "collective_drift"): "an analysis table's name",
    ("app/page_drift.py", "collective_drift"): "an analysis table's name",
    ("workbench/figures.py", "compiling"): "a plot trace's label",
    ("workbench/compile_log.py", "skipped_frame"): "a compile status (schema.COMPILES.status)",
    ("analyses/recompiles.py", "skipped_frame"): "a compile status and cause (schema.COMPILES, kinds.CAUSES)",
}

#: (file, word): kind strings in modules owned elsewhere, switched to ``Kind`` when those modules are next changed.
PENDING: dict[tuple[str, str], str] = {}

#: (fault script, kind): a fault whose ``finding`` names a kind not declared yet, and the change that declares it.
NOT_DECLARED_YET: dict[tuple[str, str], str] = {
    (f"zoo/workbench_zoo/faults/{script}.py", kind): "a GPU fault recorded ahead of its detector (a later issue)"
    for script, kind in ()     # every zoo fault's kind is declared now
}

_KIND_NAME = re.compile(r"(^|_)kind$")
_SUFFIX_KIND = re.compile(r"_kind$")
_CAUSE_NAME = re.compile(r"(^|_)cause$")
_KIND_FUNCS = {"make_finding", "finding_id", "kind_spec", "Kind", "declare_kind", "fixers_for", "kind_page"}
_KIND_METHODS = {"is_in", "eq", "ne", "startswith", "endswith"}


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    word: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.word!r} {self.why}"


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _named(node: ast.AST, pattern: re.Pattern[str], bare: re.Pattern[str] | None = None) -> bool:
    """``node`` is a value called like ``pattern``: a variable (matching ``bare`` when given), an attribute,
    ``x["..."]``, ``x.get("...")``, ``pl.col("...")``, or a ``.cast(...)`` / ``.fill_null(...)`` of one."""
    if isinstance(node, ast.Name):
        return bool((bare or pattern).search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(pattern.search(node.attr))
    if isinstance(node, ast.Subscript):
        key = _str(node.slice)
        return key is not None and bool(pattern.search(key))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("get", "col") and node.args:
            key = _str(node.args[0])
            return key is not None and bool(pattern.search(key))
        if node.func.attr in ("cast", "fill_null", "value"):
            return _named(node.func.value, pattern, bare)
    return False


def _literals(node: ast.AST) -> list[ast.Constant]:
    """The string constants of ``node``: itself, or the elements of a literal list/tuple/set."""
    if _str(node) is not None:
        return [node]  # type: ignore[list-item]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [e for e in node.elts if _str(e) is not None]  # type: ignore[misc]
    return []


def _is_kind_member(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Kind"


def _kind_like(node: ast.AST) -> bool:
    word = _str(node)
    return _is_kind_member(node) or (word is not None and (word in DECLARED or bool(resolve(word))))


def _uses_findings(tree: ast.AST) -> bool:
    """The module imports the findings or the kinds (its variables called ``kind`` are finding kinds)."""
    return any(isinstance(n, ast.ImportFrom) and n.module in ("workbench.analyses.findings", "workbench.analyses.kinds")
               for n in ast.walk(tree))


def _fault_spec(tree: ast.AST) -> tuple[set[int], set[int]]:
    """ids of the string constants of ``Fault(finding=...)`` (a kind, a literal by necessity) and of
    ``Fault(name=...)`` (a fault's name) in a fault script."""
    finding: set[int] = set()
    name: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Fault":
            for kw in node.keywords:
                into = finding if kw.arg == "finding" else name if kw.arg == "name" else None
                if into is not None:
                    into.update(id(n) for n in _literals(kw.value))
    return finding, name


def _contexts(tree: ast.AST) -> tuple[set[int], set[int]]:
    """ids of the string constants in a kind context, and of those compared with a compile cause."""
    kind: set[int] = set()
    cause: set[int] = set()
    bare = _KIND_NAME if _uses_findings(tree) else _SUFFIX_KIND

    def kindish(x: ast.AST) -> bool:
        return _named(x, _KIND_NAME, bare)

    def mark(nodes: list[ast.Constant], into: set[int]) -> None:
        into.update(id(n) for n in nodes)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for a, b in zip(sides, sides[1:]):
                for x, y in ((a, b), (b, a)):
                    if kindish(x):
                        mark(_literals(y), kind)
                    elif _named(x, _CAUSE_NAME):
                        mark(_literals(y), cause)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if isinstance(func, ast.Attribute) and func.attr in _KIND_METHODS:
                if kindish(func.value):
                    for a in node.args:
                        mark(_literals(a), kind)
                elif _named(func.value, _CAUSE_NAME):
                    for a in node.args:
                        mark(_literals(a), cause)
            if name in _KIND_FUNCS and node.args:
                mark(_literals(node.args[0]), kind)
            if name == "register_detector":
                for a in node.args:
                    mark(_literals(a), kind)
            for kw in node.keywords:
                if name in ("register_fixer", "register_detector") and kw.arg == "kinds":
                    mark(_literals(kw.value), kind)
            if (name == "get" and isinstance(func, ast.Attribute) and node.args
                    and _named(func.value, re.compile(r"(?i)kind"))):
                mark(_literals(node.args[0]), kind)
        elif isinstance(node, ast.Subscript) and _named(node.value, re.compile(r"(?i)kind")):
            mark(_literals(node.slice), kind)
        elif isinstance(node, (ast.Dict, ast.Set, ast.List, ast.Tuple)):
            elts = [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else list(node.elts)
            named = [e for e in elts if _str(e) is not None or _is_kind_member(e)]
            if named and 2 * sum(_kind_like(e) for e in named) > len(named):
                mark([e for e in named if _str(e) is not None], kind)  # type: ignore[misc]
    return kind, cause


def _meant(word: str) -> str:
    kinds = resolve(word)
    if not kinds:
        return ""
    return f" (meant: {', '.join(k.value for k in kinds[:3])}{', …' if len(kinds) > 3 else ''})"


def problems(path: str, source: str) -> list[Problem]:
    """What this test reports in one file (``path``: relative to the repository root)."""
    tree = ast.parse(source, filename=path)
    kind_ctx, cause_ctx = _contexts(tree)
    fault_finding, fault_name = _fault_spec(tree)
    kind_ctx |= fault_finding
    out = []
    for node in ast.walk(tree):
        word = _str(node)
        if word is None:
            continue
        line = getattr(node, "lineno", 0)
        if id(node) in fault_finding and (path, word) in NOT_DECLARED_YET:
            continue
        if id(node) in kind_ctx and word not in DECLARED and word not in OTHER:
            out.append(Problem(path, line, word, "names an undeclared finding kind" + _meant(word)))
        elif (word in DECLARED and id(node) not in cause_ctx and id(node) not in fault_finding
              and id(node) not in fault_name and (path, word) not in OTHER_MEANING
              and (path, word) not in PENDING):
            member = next(k for k in Kind if k.value == word).name
            out.append(Problem(path, line, word, f"is a kind named by a string: use Kind.{member}"))
    return out


def _files() -> list[Path]:
    out = []
    for top in SCANNED:
        for p in sorted((ROOT / top).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if not any(rel == s or rel.startswith(s) for s in SKIPPED) and ".venv" not in rel:
                out.append(p)
    return out


def test_every_kind_the_code_names_is_declared() -> None:
    found = [p for f in _files() for p in problems(f.relative_to(ROOT).as_posix(), f.read_text())]
    assert not found, "kinds named outside analyses/kinds.py:\n" + "\n".join(map(str, found))


def test_other_meanings_are_still_there() -> None:
    """Each exception is still needed (a stale entry would hide a real kind string)."""
    words: dict[str, set[str]] = {}
    for f in _files():
        rel = f.relative_to(ROOT).as_posix()
        words[rel] = {n.value for n in ast.walk(ast.parse(f.read_text())) if _str(n) is not None}  # type: ignore[attr-defined]
    stale = [k for k in (*OTHER_MEANING, *PENDING, *NOT_DECLARED_YET) if k[1] not in words.get(k[0], set())]
    assert not stale, f"OTHER_MEANING / PENDING / NOT_DECLARED_YET entries no longer needed: {stale}"
    declared = [k for k in NOT_DECLARED_YET if k[1] in DECLARED]
    assert not declared, f"NOT_DECLARED_YET entries whose kind is now declared: {declared}"


@pytest.mark.parametrize("code, word", [
    ('if f.kind == "timeout_risk":\n    pass', "timeout_risk"),
    ('x = {"compile_skew", "timeout_risk"}', "timeout_risk"),
    ('PAGE = {Kind.STRAGGLER: "/drift", "data_wait": "/drift"}', "data_wait"),
    ('PAGE = {Kind.GRAPH_BREAK: 1, "recompile": 1, "compile_failed": 2}', "recompile"),
    ('frame.filter(pl.col("kind").is_in(["collective_skew"]))', "collective_skew"),
    ('frame.filter(pl.col("finding_kind") == "compile_failed")', "compile_failed"),
    ('make_finding("data_wait", "m", ev, cost)', "data_wait"),
    ('reason = KIND_REASON.get("recompile")', "recompile"),
    ('if row["kind"] in ("straggler", "data_wait"):\n    pass', "data_wait"),
])
def test_a_stale_name_is_caught(code: str, word: str) -> None:
    found = problems("analyses/planted.py", textwrap.dedent(code))
    assert any(p.word == word and "undeclared" in str(p) for p in found), found


def test_a_kind_string_is_caught_and_a_cause_is_not() -> None:
    found = problems("analyses/planted.py", 'a = f.kind == "straggler"\nb = ev.cause == "graph_break"\n')
    assert [(p.word, p.why) for p in found] == [("straggler", "is a kind named by a string: use Kind.STRAGGLER")]


def test_a_fault_spec_names_its_kind_by_a_string_and_it_must_be_declared() -> None:
    ok = 'FAULT = Fault(name="straggler", description="d", finding="straggler", ranks=(1,))\n'
    assert problems("zoo/workbench_zoo/faults/planted.py", ok) == []
    stale = 'FAULT = Fault(name="slow_data", description="d", finding="data_wait", ranks=(1,))\n'
    assert [(p.word, p.why) for p in problems("zoo/workbench_zoo/faults/planted.py", stale)] == [
        ("data_wait", "names an undeclared finding kind (meant: straggler)")]


def test_other_kind_vocabularies_pass() -> None:
    code = 'a = pl.col("kind") == "cpu_op"\nb = site.kind == "ddp"\nc = kind != "other"\n'
    assert problems("analyses/planted.py", code) == []


def test_every_kind_has_a_spec_a_detector_and_resolvable_aliases() -> None:
    import workbench.analyses.summary  # noqa: F401  (registers every detector)
    from workbench.analyses.detectors import detectors
    from workbench.analyses.kinds import KINDS

    assert set(KINDS) == set(Kind)
    produced = {k for d in detectors() for k in d.kinds}
    produced.add(Kind.COLLECTIVE_WAIT)   # the waits a cause's cost was measured from: made by rootcause.attribute
    assert produced == set(Kind), sorted(k.value for k in set(Kind) - produced)
    for stale, meant in (("timeout_risk", Kind.NCCL_TIMEOUT_RISK), ("compile_failed", Kind.COMPILE_FAILURE),
                         ("collective_skew", Kind.COLLECTIVE_WAIT), ("data_wait", Kind.STRAGGLER)):
        assert resolve(stale) == (meant,)
    assert set(resolve("recompile")) == {k for k in Kind if k.value.startswith("recompile_")} - {Kind.RECOMPILE_LIMIT}
