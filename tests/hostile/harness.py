"""Runs a hostile case in a subprocess with a CPU-time limit, an address-space limit and a far wall-clock guard, and
puts it in one
column: executed > crash > hang > internal error > wrong > silent > handled (the first that applies wins).

- **executed**: the case's marker file (``EXECUTED-<case>``) exists afterwards: input became code.
- **crash**: killed by a signal, ``MemoryError``, a failed allocation, or past the memory limit.
- **hang**: past its step's ``timeout`` in CPU seconds (``RLIMIT_CPU``: a loop), or still running at
  :data:`WALL_FACTOR` times that in wall-clock seconds (a blocked read); killed with its process group. CPU time,
  not wall time, so a case on a machine that other work keeps busy is not called a hang.
- **internal error**: a traceback, an exception class name (``ValueError``, ``ComputeError``, ...) in what the
  user sees, a Rust panic, or an error line that does not name the file.
- **wrong**: the oracle's output checks fail: exit code, more than one error line, control characters from the
  input in the output, files written outside the case's run and temp folders, good data lost or refused,
  a peak memory that shows a capped file read whole.
- **silent**: it worked but the count or note the contract asks for (a SKIPPED reason phrase, a problem line) is
  missing.
- **handled**: none of these.

The code under test is the ``workbench`` that ``sys.executable`` imports (its editable install): run the bench with
another checkout's interpreter to test that checkout. A case runs in its own folder: ``in/`` (the inputs),
``outside/`` (what must stay untouched; symlinks point here), ``home/`` and ``tmp/`` (``HOME``,
``XDG_CACHE_HOME``, ``TMPDIR``: the user cache dir the contract allows).
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "driver.py"

#: Columns, most severe first; "handled" is the only good one.
COLUMNS = ("executed", "crash", "hang", "internal error", "wrong", "silent", "handled")
#: A step blocked (no CPU used) this many times its ``timeout`` in wall-clock seconds is a hang too.
WALL_FACTOR = 10
#: Address-space limit of every case process (``RLIMIT_AS``).
MEMORY_LIMIT = 3 << 30
#: Exit codes of a clean refusal: 1 for bad input (the contract), 2 as click gives usage errors and the CLI
#: gave input errors before issue 35.
ERROR_CODES = (1, 2)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CLASS_NAME = re.compile(r"\b(?:[A-Z][A-Za-z0-9]*(?:Error|Exception)|Traceback|KeyboardInterrupt|StopIteration"
                         r"|PanicException)\b")
_CRASH = re.compile(r"MemoryError|memory allocation of \d+ bytes failed|std::bad_alloc|Cannot allocate memory|"
                    r"out of memory", re.I)


# --------------------------------------------------------------------------------------------- the oracle
@dataclass(slots=True)
class Outcome:
    """What one step produced: exit code, output, the parsed JSON (when the step prints JSON), peak memory."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float
    timed_out: bool
    data: Any = None
    ctx: Any = None


@dataclass(slots=True)
class Check:
    """One oracle check on a successful step: ``fn(outcome)`` must be true, else ``column`` with ``what``."""

    what: str
    fn: Callable[[Outcome], bool]
    column: str = "wrong"


@dataclass(slots=True)
class Step:
    """One command of a case and its oracle.

    ``argv``: arguments of ``workbench`` (run as ``python -m workbench.cli``), or ``["@driver", NAME, *ARGS]``
    for :mod:`driver`. ``{in}``, ``{case}``, ``{outside}``, ``{marker}`` are replaced by the case's paths.
    ``expect``: ``ok`` (exit 0 and ``checks`` hold), ``error`` (one line on stderr naming one of ``names``, exit 1
    or 2), ``either`` (one of the two). ``accepted``: the column when an expected error did not come.
    ``error_has`` / ``error_re``: what the error line must also say (the key, the field, both folders).
    """

    argv: list[str]
    expect: str = "ok"
    names: tuple[str, ...] = ()
    checks: list[Check] = field(default_factory=list)
    json_out: bool = False
    accepted: str = "wrong"
    error_has: tuple[str, ...] = ()
    error_re: str | None = None
    timeout: float = 60.0
    max_rss_mb: float | None = None
    memory_limit: int = MEMORY_LIMIT


@dataclass(slots=True)
class Case:
    """A hostile input (``make`` writes it under the case folder) and the steps that read it."""

    id: str
    cls: str
    make: Callable[[Any], None]
    steps: list[Step]
    note: str = ""
    slow: bool = False


@dataclass(slots=True)
class Ctx:
    """The folders of one case run."""

    case: Path
    inp: Path
    outside: Path
    home: Path
    tmp: Path
    marker: Path

    def fmt(self, s: str) -> str:
        return (s.replace("{in}", str(self.inp)).replace("{case}", str(self.case))
                .replace("{outside}", str(self.outside)).replace("{marker}", str(self.marker)))


@dataclass(slots=True)
class Result:
    """A case's column, the one-line reason (empty when handled) and its seconds."""

    id: str
    cls: str
    column: str
    reason: str
    seconds: float
    steps: list[dict[str, Any]] = field(default_factory=list)
    folder: str = ""   # the case's folder, when kept


# --------------------------------------------------------------------------------------------- running
def _limit(limit: int, cpu_s: int) -> Callable[[], None]:
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return pre


def run_process(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, memory_limit: int,
                out_dir: Path) -> Outcome:
    """Run ``argv`` with its output in files, ``timeout`` seconds of CPU per process (``RLIMIT_CPU``; past it the
    kernel ends it with SIGXCPU), :data:`WALL_FACTOR` times that in wall-clock seconds (then the process group is
    killed) and ``memory_limit`` bytes of address space; peak memory from ``wait4``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fo, fe = out_dir / "stdout", out_dir / "stderr"
    t0 = time.monotonic()
    with open(fo, "wb") as o, open(fe, "wb") as e:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                             preexec_fn=_limit(memory_limit, max(1, math.ceil(timeout))),
                             start_new_session=True)
        timed_out, status, usage = False, 0, None
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout * WALL_FACTOR:
                timed_out = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) and usage is not None and \
            usage.ru_utime + usage.ru_stime >= max(1, math.ceil(timeout)):   # its CPU limit ended it
        timed_out = True
    p.returncode = rc
    try:  # a child that forked and left a grandchild: end the group
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    read = lambda f: f.read_bytes()[:4_000_000].decode("utf-8", "replace")  # noqa: E731
    return Outcome(None if timed_out else rc, read(fo), read(fe), time.monotonic() - t0,
                   (usage.ru_maxrss / 1024) if usage else 0.0, timed_out)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


def _env(ctx: Ctx) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "TORCH", "PYTEST"))}
    env.update(HOME=str(ctx.home), XDG_CACHE_HOME=str(ctx.home / ".cache"), TMPDIR=str(ctx.tmp),
               TORCHINDUCTOR_CACHE_DIR=str(ctx.home / "inductor"), COLUMNS="160", LINES="50",
               POLARS_MAX_THREADS="2", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
               )
    env.pop("TERM", None)
    env.pop("PYTHONPATH", None)   # the code under test is the workbench the interpreter has installed
    return env


def _argv(step: Step, ctx: Ctx) -> list[str]:
    args = [ctx.fmt(a) for a in step.argv]
    if args and args[0] == "@driver":
        return [sys.executable, str(DRIVER), *args[1:]]
    return [sys.executable, "-m", "workbench.cli", *args]


def judge(step: Step, out: Outcome, ctx: Ctx) -> tuple[str, str]:
    """The column and reason of one step's outcome (marker and outside files are judged by the caller)."""
    both = out.stdout + "\n" + out.stderr
    if out.timed_out:
        return "hang", (f"still running after {step.timeout:.0f} s of CPU time (or {step.timeout * WALL_FACTOR:.0f} s "
                        f"of wall-clock time)")
    if out.rc is not None and out.rc < 0:
        return "crash", f"killed by signal {-out.rc} ({_last_line(out.stderr)})"
    m = _CRASH.search(both)
    if m:
        return "crash", f"out of memory: {m.group(0)} ({_last_line(out.stderr)})"
    if "Traceback (most recent call last)" in both:
        return "internal error", f"traceback: {_last_line(out.stderr) or _last_line(out.stdout)}"
    if "panicked at" in both:
        return "internal error", f"panic: {_first_with(both, 'panicked at')}"
    m = _CLASS_NAME.search(both)
    if m:
        return "internal error", f"exception class {m.group(0)} shown: {_first_with(both, m.group(0))}"
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    if out.rc != 0:
        if step.expect == "ok":
            if out.rc in ERROR_CODES and len(lines) == 1:
                named = any(n in lines[0] for n in step.names) if step.names else True
                if not named:
                    return "internal error", f"error line names no input: {lines[0][:200]}"
                return "wrong", f"refused good input: {lines[0][:200]}"
            return "wrong", f"exit {out.rc}, expected 0: {_last_line(out.stderr)}"
        if out.rc not in ERROR_CODES:
            return "wrong", f"exit {out.rc}, expected 1 (or 2): {_last_line(out.stderr)}"
        if len(lines) != 1:
            return "wrong", f"{len(lines)} lines on stderr, expected one: {' | '.join(lines)[:240]}"
        if step.names and not any(n in lines[0] for n in step.names):
            return "internal error", f"error line names no input ({step.names[0]}): {lines[0][:200]}"
        missing = [h for h in step.error_has if h not in lines[0]]
        if missing or (step.error_re and not re.search(step.error_re, lines[0])):
            return "wrong", f"error line does not name {(missing or [step.error_re])[0]!r}: {lines[0][:200]}"
    else:
        if step.expect == "error":
            what = step.error_has[0] if step.error_has else step.names[0] if step.names else "the file"
            what += f" and /{step.error_re}/" if step.error_re else ""
            return step.accepted, f"accepted, expected a refusal naming {what}"
    m = _CONTROL.search(both)
    if m:
        return "wrong", f"control character {m.group(0)!r} in the output: {_first_with(both, m.group(0))!r}"
    if step.max_rss_mb is not None and out.max_rss_mb > step.max_rss_mb:
        return "wrong", f"peak memory {out.max_rss_mb:.0f} MB > {step.max_rss_mb:.0f} MB (a capped file read whole?)"
    if out.rc == 0:
        if step.json_out:
            try:
                out.data = json.loads(out.stdout)
            except ValueError:
                return "wrong", f"--json printed no JSON: {out.stdout[:120]!r}"
        out.ctx = ctx
        for col in ("wrong", "silent"):
            for c in step.checks:
                if c.column != col:
                    continue
                try:
                    ok = c.fn(out)
                except Exception as exc:  # noqa: BLE001 - a check that cannot look is a failed check
                    ok = False
                    return col, f"{c.what} (check could not look: {type(exc).__name__} {exc})"[:300]
                if not ok:
                    return col, c.what
    return "handled", ""


def _last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip()[:200] if lines else ""


def _first_with(text: str, needle: str) -> str:
    return next((ln.strip()[:200] for ln in text.splitlines() if needle in ln), "")


def worst(columns: list[str]) -> str:
    return min(columns, key=COLUMNS.index)


def run_case(case: Case, workdir: Path, keep: bool = False) -> Result:
    """Build ``case`` under ``workdir`` and run its steps; one :class:`Result`."""
    root = Path(tempfile.mkdtemp(prefix=f"{case.id[:40]}-", dir=workdir))
    ctx = Ctx(root, root / "in", root / "outside", root / "home", root / "tmp", root / f"EXECUTED-{case.id}")
    for d in (ctx.inp, ctx.outside, ctx.home, ctx.tmp):
        d.mkdir(parents=True)
    (ctx.outside / "keep.txt").write_text("must stay as it is\n")
    t0 = time.monotonic()
    try:
        case.make(ctx)
    except Exception as exc:  # noqa: BLE001 - a corpus bug: shown as such, never as the code's fault
        return Result(case.id, case.cls, "internal error", f"CORPUS BUG building the case: {exc!r}", 0.0)
    before = _snapshot(ctx.outside)
    cols: list[tuple[str, str]] = []
    steps_out = []
    env = _env(ctx)
    for i, step in enumerate(case.steps):
        out = run_process(_argv(step, ctx), cwd=ctx.case, env=env, timeout=step.timeout,
                          memory_limit=step.memory_limit, out_dir=root / f".out{i}")
        col, why = judge(step, out, ctx)
        if col == "handled":
            after = _snapshot(ctx.outside)
            if after != before:
                changed = sorted(set(after.items()) ^ set(before.items()))
                col, why = "wrong", f"wrote outside the run: {changed[0][0]}"
        cols.append((col, f"{' '.join(step.argv[:2])}: {why}" if why else ""))
        steps_out.append({"argv": step.argv, "rc": out.rc, "seconds": round(out.seconds, 2),
                          "max_rss_mb": round(out.max_rss_mb), "column": col, "reason": why,
                          "stderr": out.stderr[-600:]})
    markers = [p for p in root.rglob("EXECUTED-*")]
    if markers or ctx.marker.exists():
        cols.append(("executed", f"marker {markers[0].name if markers else ctx.marker.name} exists: input ran as code"))
    col = worst([c for c, _ in cols]) if cols else "handled"
    reason = next((r for c, r in cols if c == col and r), "")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    return Result(case.id, case.cls, col, reason, round(time.monotonic() - t0, 2), steps_out,
                  str(root) if keep else "")


# --------------------------------------------------------------------------------------------- many cases
_CORPUS: dict[int, dict[str, Case]] = {}


def _case_by_id(seed: int, case_id: str) -> Case:
    if seed not in _CORPUS:
        from corpus import build_corpus

        _CORPUS[seed] = {c.id: c for c in build_corpus(seed)}
    return _CORPUS[seed][case_id]


def run_case_id(seed: int, case_id: str, workdir: str, keep: bool = False) -> Result:
    """:func:`run_case` of the case ``case_id`` of the corpus of ``seed`` (what a pool worker is sent)."""
    case = _case_by_id(seed, case_id)
    try:
        return run_case(case, Path(workdir), keep)
    except Exception as exc:  # noqa: BLE001 - a corpus or harness bug: shown as such, never as the code's fault
        return Result(case.id, case.cls, "internal error", f"CORPUS BUG running the case: {exc!r}", 0.0)


def run_cases(seed: int, ids: list[str], *, jobs: int = 2, workdir: Path | None = None, keep: bool = False,
              on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Run the cases ``ids`` of the corpus of ``seed`` over ``jobs`` processes; results in the order of ``ids``."""
    work = Path(workdir or tempfile.mkdtemp(prefix="hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Result] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futs = {pool.submit(run_case_id, seed, cid, str(work), keep): cid for cid in ids}
        from concurrent.futures import as_completed

        for f in as_completed(futs):
            r = f.result()
            results[r.id] = r
            if on_result:
                on_result(r)
    if workdir is None and not keep:
        shutil.rmtree(work, ignore_errors=True)
    return [results[i] for i in ids]
