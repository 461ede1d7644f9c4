"""The fault registry: :class:`Fault` (what is planted), :class:`FaultContext` (what a fault's ``main`` gets) and
:class:`RankRecord` (what one rank measured). See the package docstring for the convention.

A fault's spec is read from its script's source (:func:`read_spec`), never by running the script: listing the zoo
imports no torch. Running a fault imports its module (:func:`load_module`).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import pkgutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Literal

Fix = Literal["config", "code", "none"]


@dataclass(frozen=True)
class Fault:
    """One planted fault: what it is, where it is (ranks, steps), what should find it and how it is fixed."""

    name: str
    description: str
    finding: str                      # the finding kind the analyses should put first
    ranks: tuple[int, ...]            # the planted (faulty) ranks
    steps: tuple[int, ...] = ()       # the planted steps (empty: every step)
    world_size: int = 2
    fix: Fix = "config"               # config: the written compile config removes it; code: a file:line fix
    device: Literal["cpu", "cuda"] = "cpu"
    num_steps: int = 10
    rank_env: dict[int, dict[str, str]] = field(default_factory=dict)  # extra environment per rank
    timeout_s: float = 240.0
    notes: str = ""                   # what the fault shows / why it is fixed this way (for docs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"], d["steps"] = list(self.ranks), list(self.steps)
        d["rank_env"] = {str(k): v for k, v in self.rank_env.items()}
        return d


@dataclass
class RankRecord:
    """What one rank measured with its own timers: per step wall time, named timed sections, notes."""

    rank: int
    step_ns: dict[int, int] = field(default_factory=dict)              # step → wall time of the step
    timed: dict[str, dict[int, int]] = field(default_factory=dict)     # section → step → ns (summed per step)
    notes: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step_ns": {str(k): v for k, v in self.step_ns.items()},
                "timed": {n: {str(k): v for k, v in t.items()} for n, t in self.timed.items()},
                "notes": self.notes, "finished": self.finished}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankRecord:
        return cls(rank=int(d["rank"]), step_ns={int(k): int(v) for k, v in d.get("step_ns", {}).items()},
                   timed={n: {int(k): int(v) for k, v in t.items()} for n, t in d.get("timed", {}).items()},
                   notes=dict(d.get("notes", {})), finished=bool(d.get("finished")))


#: Per-rank measurements and logs, outside the rank directories (which the workbench reads as the run).
RECORD_FILE = "fault/rank{rank}.json"
LOG_FILE = "fault/rank{rank}.log"
GROUND_TRUTH = "ground_truth.json"


class FaultContext:
    """Handed to a fault's ``main``: this rank, the run directory, the compile config of a rerun, and timers."""

    def __init__(self, fault: Fault, rank: int, world_size: int, out: Path,
                 compile_config: str | None = None, device: str = "cpu") -> None:
        self.fault, self.rank, self.world_size, self.out = fault, rank, world_size, Path(out)
        self.compile_config = compile_config
        self.device = device
        self.record = RankRecord(rank)
        self.step: int | None = None
        self._t_step = 0

    @property
    def planted(self) -> bool:
        """This rank is one of the fault's planted ranks."""
        return self.rank in self.fault.ranks

    def collector(self, **options: Any) -> Any:
        """``Collector(out, compile_config=<the rerun's config>, **options)``: the README surface."""
        from workbench.collectors import Collector

        options.setdefault("profile_start", 2)
        options.setdefault("profile_length", 3)
        return Collector(self.out, compile_config=self.compile_config, **options)

    def steps(self, n: int | None = None) -> Iterator[int]:
        """``for step in ctx.steps():`` — times each iteration (the rank's own step wall time)."""
        for step in range(self.fault.num_steps if n is None else n):
            self.step = step
            t0 = time.perf_counter_ns()
            yield step
            self.record.step_ns[step] = time.perf_counter_ns() - t0
        self.step = None
        self.save(finished=True)

    @contextlib.contextmanager
    def timed(self, section: str) -> Iterator[None]:
        """Time a section of the current step (summed when entered several times in one step)."""
        t0 = time.perf_counter_ns()
        try:
            yield
        finally:
            dt = time.perf_counter_ns() - t0
            per = self.record.timed.setdefault(section, {})
            step = -1 if self.step is None else self.step
            per[step] = per.get(step, 0) + dt

    def note(self, key: str, value: Any) -> None:
        self.record.notes[key] = value

    def save(self, *, finished: bool = False) -> None:
        self.record.finished = self.record.finished or finished
        path = self.out / RECORD_FILE.format(rank=self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record.to_dict()))
        tmp.replace(path)


#: The package of the fault scripts: ``<name>.py`` is the fault ``name``; ``_*.py`` are the pieces they share.
SCRIPTS = "workbench_zoo.faults"


def fault_names() -> list[str]:
    """The names of the zoo's faults (its scripts' module names), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules([str(_scripts_dir())]) if not m.name.startswith("_"))


def _scripts_dir() -> Path:
    return Path(__file__).resolve().parent / "faults"


def script_path(name: str) -> Path:
    """The script of fault ``name`` (raises KeyError for an unknown fault)."""
    names = fault_names()
    if name not in names:
        raise KeyError(f"unknown fault {name!r}; known: {', '.join(names)}")
    return _scripts_dir() / f"{name}.py"


def read_spec(path: str | Path) -> Fault:
    """The ``FAULT = Fault(...)`` of the script at ``path``, read from its source: every argument a keyword with a
    literal value (ValueError naming the file, line and argument otherwise)."""
    path = Path(path)
    tree = ast.parse(path.read_text(), filename=str(path))
    call = next((node.value for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
                 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "FAULT"), None)
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "Fault"):
        raise ValueError(f"{path}: no module-level FAULT = Fault(...)")
    if call.args:
        raise ValueError(f"{path}:{call.lineno}: FAULT = Fault(...) takes keyword arguments only")
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        try:
            kwargs[str(kw.arg)] = ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError):
            raise ValueError(f"{path}:{kw.value.lineno}: FAULT argument {kw.arg or '**'!r} is not a literal (the "
                             "registry reads it without running the script)") from None
    for key in ("ranks", "steps"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    try:
        fault = Fault(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{path}:{call.lineno}: FAULT: {exc}") from None
    if fault.name != path.stem:
        raise ValueError(f"{path}:{call.lineno}: FAULT name {fault.name!r} is not the module's name {path.stem!r}")
    return fault


#: The name of a generated case (:mod:`workbench_zoo.generated`): its spec is the run's ``fault/plan.json``.
GENERATED = "generated"
PLAN_FILE = "fault/plan.json"


def load_module(name: str) -> ModuleType:
    """The script of fault ``name``, imported (raises KeyError for an unknown fault); a generated case's is
    :mod:`workbench_zoo.generated`."""
    if name == GENERATED:
        return importlib.import_module("workbench_zoo.generated")
    script_path(name)
    return importlib.import_module(f"{SCRIPTS}.{name}")


def faults() -> dict[str, Fault]:
    """Every fault in the zoo, by name (read from the scripts' sources: imports none of them)."""
    return {name: read_spec(_scripts_dir() / f"{name}.py") for name in fault_names()}


def get_fault(name: str, out: str | Path | None = None) -> Fault:
    """The spec of fault ``name`` (raises KeyError for an unknown fault); a generated case's comes from its run
    directory ``out`` (``fault/plan.json``, written by :func:`workbench_zoo.generated.run_case`)."""
    if name == GENERATED:
        if out is None:
            raise KeyError("a generated case's spec is in its run directory: pass out")
        plan = json.loads((Path(out) / PLAN_FILE).read_text())
        spec = dict(plan["fault"])
        spec["ranks"], spec["steps"] = tuple(spec["ranks"]), tuple(spec["steps"])
        return Fault(**spec)
    return read_spec(script_path(name))
