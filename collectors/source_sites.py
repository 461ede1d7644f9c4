"""Source sites: the lines of the user's training script a code fix is about, found by reading it, never running it.

The collector notes once, at the first ``with collector.step():``, the user's frame that entered the step and its
callers (:func:`call_site`: file names and line numbers; nothing per step after that). At ``close()`` rank 0 parses
that file with :mod:`ast` (:func:`scan`; the callers' files too, up to the one with the loop: :func:`scan_stack`)
and writes what it found into ``run.json`` as ``source_sites``: the enclosing loop, the statement that
fetches the batch, and every call or assignment a code fix may point at — DataLoader, DDP, FSDP, ``torch.compile``,
collectives, pipeline schedules and micro-batch counts, host→device copies, compile settings and ``os.environ``.

The source is only parsed: nothing in it is executed, and nothing found becomes a setting (snippets are text,
at most :data:`SNIPPET_CHARS` characters, shown escaped). Scanning never raises into training: an unreadable file,
code without a file (``exec``, a notebook cell) or a syntax error is recorded as ``note`` and the scan goes on
without sites. :class:`SourceScan` is the typed record (``SourceScan.from_json`` reads it back from ``run.json``).

Example:
    >>> import tempfile, os
    >>> src = "for batch in loader:\\n    with collector.step():\\n        loss = model(batch)\\n"
    >>> with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    ...     _ = f.write(src)
    >>> [(s.kind, s.line) for s in scan(f.name, 2).sites]
    [('loop', 1), ('batch_fetch', 1), ('step', 2)]
    >>> os.unlink(f.name)
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import replace
from typing import Any

from workbench.source_scan import KINDS, SNIPPET_CHARS, SourceScan, SourceSite

#: Files larger than this are not parsed (a generated or bundled script, not a training loop).
MAX_FILE_BYTES = 2_000_000
_COLLECTIVES = frozenset({"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                          "reduce_scatter_tensor", "broadcast", "all_to_all", "all_to_all_single", "reduce",
                          "gather", "scatter", "barrier", "all_reduce_coalesced"})
_DIST_NAMES = frozenset({"dist", "distributed", "c10d"})
_MICROBATCH_WORDS = ("microbatch", "micro_batch", "n_microbatches", "num_microbatches", "chunks", "n_mb",
                     "accum_steps", "grad_accum", "accumulation_steps")
_CONFIG_ROOTS = ("torch._dynamo.config", "torch._inductor.config", "torch._functorch.config",
                 "torch.compiler.config", "dynamo_config", "inductor_config")
_THIS_PACKAGE = os.path.dirname(os.path.abspath(__file__))
#: Tensor methods that wait for the device and copy to the host (a host-device sync where they run on a GPU tensor).
_SYNC_METHODS = frozenset({"item", "cpu", "tolist", "numpy"})
#: Calls that wait for the device.
_SYNC_CALLS = frozenset({"torch.cuda.synchronize", "cuda.synchronize", "torch.cuda.current_stream().synchronize"})
#: ``torch.optim`` optimizers (their ``foreach`` / ``fused`` flags are what an unfused-optimizer fix is about).
_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "RMSprop", "Rprop", "NAdam",
                         "RAdam", "ASGD", "LBFGS", "SparseAdam", "Adafactor"})


# ---------------------------------------------------------------------- where the step is entered
#: User frames kept above the step (a step entered in a helper that the loop calls: the loop is a frame up).
FRAMES = 4


def call_site(depth: int = 2) -> tuple[tuple[str, int], ...] | None:
    """The user's frames above ``depth``, innermost first (at most :data:`FRAMES`), outside the collectors package
    and :mod:`contextlib`: the user's ``with collector.step():`` (or the call of a function decorated with
    ``@collector.step``) and its callers. Only file names and line numbers are kept. Never raises."""
    try:
        frames: list[tuple[str, int]] = []
        frame = sys._getframe(depth)
        while frame is not None and len(frames) < FRAMES:
            path = frame.f_code.co_filename
            if not (os.path.dirname(os.path.abspath(path)) == _THIS_PACKAGE or path.endswith("contextlib.py")):
                frames.append((path, frame.f_lineno))
            frame = frame.f_back
        return tuple(frames) or None
    except Exception:  # noqa: BLE001 - never into training
        return None


def scan_safely(frames: Any) -> dict[str, Any]:
    """:func:`scan_stack` of ``frames`` (:func:`call_site`'s ``(file, line)`` pairs) as ``run.json`` holds it;
    anything that goes wrong becomes the ``note``."""
    if not frames:
        return SourceScan(None, None, note="no step was entered (or its caller could not be read)").to_json()
    try:
        return scan_stack(frames).to_json()
    except Exception as exc:  # noqa: BLE001 - never into training
        return SourceScan(frames[0][0], frames[0][1], note=f"scan failed: {type(exc).__name__}").to_json()


def scan_stack(frames: Any) -> SourceScan:
    """:func:`scan` of the innermost frame and of its callers up to the first one that runs the step in a loop
    (the step entered in a helper function: the loop, and the batch it fetches, are in the caller). Callers above
    the loop (a launcher, a framework) are not scanned: their lines are not the user's to fix."""
    scans = []
    for path, line in frames:
        scans.append(scan(path, line))
        if scans[-1].of("loop"):
            break
    first = scans[0]
    seen: set[tuple[str, str, int]] = set()
    sites = []
    for s in (site for sc in scans for site in sc.sites):
        if (s.file, s.kind, s.line) not in seen:
            seen.add((s.file, s.kind, s.line))
            sites.append(s)
    return SourceScan(first.file, first.line, tuple(sites), None if sites else first.note)


# ---------------------------------------------------------------------- the scan
def scan(path: str, line: int) -> SourceScan:
    """Parse ``path`` (never run it) and find the sites around the statement at ``line``."""
    if not path or path.startswith("<") or not os.path.isfile(path):
        return SourceScan(path, line, note=f"no source file ({path or 'unknown'}): code run by exec or a notebook")
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return SourceScan(path, line, note=f"not parsed: larger than {MAX_FILE_BYTES} bytes")
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        return SourceScan(path, line, note=f"not parsed: {type(exc).__name__}")
    lines = text.splitlines()
    nodes = list(ast.walk(tree))   # walked once: the finder and the lookups below read this list
    finder = _Finder(path, lines, nodes)
    finder.find(nodes)
    sites = _loop_sites(nodes, path, lines, line) + finder.sites
    sites += _microbatch_counts(nodes, path, lines, finder.schedule_names)
    loop = next((s for s in sites if s.kind == "loop"), None)
    start, end = (loop.line, _end_of_loop(nodes, loop.line)) if loop is not None else _function_around(nodes, line)
    sites = [replace(s, in_loop=start <= s.line <= end) for s in sites]
    seen: set[tuple[str, int]] = set()
    unique = []
    for s in sorted(sites, key=lambda s: (s.line, KINDS.index(s.kind))):
        if (s.kind, s.line) not in seen:
            seen.add((s.kind, s.line))
            unique.append(s)
    return SourceScan(path, line, tuple(unique))


def _snippet(lines: list[str], lineno: int) -> str:
    text = " ".join(lines[lineno - 1].split()) if 0 < lineno <= len(lines) else ""
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` of a Name/Attribute chain ('' for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):          # torch.distributed.pipelining.ScheduleGPipe(...).step -> keep the tail
        return ".".join(reversed(parts))
    return ""


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _kw_text(call: ast.Call, name: str) -> str:
    v = _kw(call, name)
    if v is None:
        return f"{name} not set"
    try:
        return f"{name}={ast.unparse(v)}"[:60]
    except Exception:  # noqa: BLE001
        return f"{name}=?"


def _mentions_rank(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and "rank" in n.id.lower() or isinstance(n, ast.Attribute)
               and "rank" in n.attr.lower() or isinstance(n, ast.Call) and "rank" in _dotted(n.func).lower()
               for n in ast.walk(test))


class _Finder:
    """Calls and assignments anywhere in the file (helper functions included)."""

    def __init__(self, path: str, lines: list[str], nodes: list[ast.AST]) -> None:
        self.path, self.lines = path, lines
        self.sites: list[SourceSite] = []
        self.schedule_names: set[str] = set()     # names passed as a schedule's micro-batch count
        # the lines of the branches of every ``if`` that tests the rank (a setting made there is rank-conditional)
        self._rank_branches = [(n.body[0].lineno, getattr((n.orelse or n.body)[-1], "end_lineno", n.lineno))
                               for n in nodes if isinstance(n, ast.If) and n.body and _mentions_rank(n.test)]

    def find(self, nodes: list[ast.AST]) -> None:
        """Every call and assignment of ``nodes`` (the file's nodes, walked once)."""
        for node in nodes:
            if isinstance(node, ast.Call):
                self.visit_Call(node)
            elif isinstance(node, ast.Assign):
                self._assign(node, node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                self._assign(node, [node.target])

    def add(self, node: ast.AST, kind: str, detail: str = "") -> None:
        line = getattr(node, "lineno", 0)
        self.sites.append(SourceSite(self.path, line, kind, _snippet(self.lines, line), detail))

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        tail = node.func.attr if isinstance(node.func, ast.Attribute) else name.rsplit(".", 1)[-1]
        if tail.endswith("DataLoader"):
            self.add(node, "dataloader", f"{_kw_text(node, 'pin_memory')}, {_kw_text(node, 'num_workers')}")
        elif tail in ("DistributedDataParallel", "DDP"):
            self.add(node, "ddp", _kw_text(node, "bucket_cap_mb"))
        elif tail in ("FullyShardedDataParallel", "FSDP", "fully_shard"):
            self.add(node, "fsdp")
        elif name in ("torch.compile", "compile") and (name == "torch.compile" or node.args):
            if name == "torch.compile" or _kw(node, "backend") is not None or _kw(node, "mode") is not None:
                self.add(node, "compile", ", ".join(f"{k.arg}={ast.unparse(k.value)}"[:40]
                                                     for k in node.keywords if k.arg)[:SNIPPET_CHARS])
        elif tail in _COLLECTIVES and "." in name and name.split(".")[-2] in _DIST_NAMES:
            av = _kw(node, "async_op")
            blocking = av is None or (isinstance(av, ast.Constant) and av.value is False)
            self.add(node, "collective", f"{tail}, {'blocking' if blocking else 'async_op'}")
        elif tail.startswith("Schedule") or tail == "PipelineSchedule":
            count = _kw(node, "n_microbatches") or (node.args[1] if len(node.args) > 1 else None)
            text = "n_microbatches " + (ast.unparse(count)[:40] if count is not None else "not set")
            if isinstance(count, ast.Name):
                self.schedule_names.add(count.id)
            self.add(node, "pipeline_schedule", text)
        elif tail in ("Pipe", "pipeline", "PipelineStage") and _kw(node, "chunks") is not None:
            chunks = _kw(node, "chunks")
            if isinstance(chunks, ast.Name):
                self.schedule_names.add(chunks.id)
            self.add(node, "pipeline_schedule", f"chunks {ast.unparse(chunks)[:40]}")
        elif tail == "pin_memory" and isinstance(node.func, ast.Attribute):
            self.add(node, "pin_memory")
        elif isinstance(node.func, ast.Attribute) and tail in ("to", "cuda") and _is_device_copy(node):
            nb = _kw(node, "non_blocking")
            self.add(node, "h2d_copy", "non_blocking" if isinstance(nb, ast.Constant) and nb.value else "blocking")
        elif isinstance(node.func, ast.Attribute) and tail in _SYNC_METHODS and not node.args \
                or name in _SYNC_CALLS or tail == "to" and _to_host(node):
            self.add(node, "sync_call", f".{tail}()" if name not in _SYNC_CALLS else name)
        elif name.startswith(("torch.optim.", "optim.")) and tail[:1].isupper() and tail in _OPTIMIZERS:
            self.add(node, "optimizer", f"{tail}, {_kw_text(node, 'foreach')}, {_kw_text(node, 'fused')}")
        elif tail == "step" and isinstance(node.func, ast.Attribute) and not node.args and "opt" in ast.unparse(
                node.func.value).lower():
            self.add(node, "optimizer_step", ast.unparse(node.func.value)[:60])
        elif name in ("os.environ.setdefault", "os.environ.update", "os.putenv", "environ.setdefault"):
            key = node.args[0] if node.args else None
            self.add(node, "config_set", self._config_detail(node,
                key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else "os.environ"))

    def _config_detail(self, node: ast.AST, key: str) -> str:
        line = getattr(node, "lineno", 0)
        rank = any(a <= line <= b for a, b in self._rank_branches)
        return key[:80] + (", rank-conditional" if rank else "")

    def _assign(self, node: ast.stmt, targets: list[ast.expr]) -> None:
        for t in targets:
            if isinstance(t, ast.Subscript) and _dotted(t.value) in ("os.environ", "environ"):
                key = t.slice.value if isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str) else "?"
                self.add(node, "config_set", self._config_detail(node, key))
            elif isinstance(t, ast.Attribute):
                dotted = _dotted(t)
                if any(dotted.startswith(root + ".") for root in _CONFIG_ROOTS):
                    self.add(node, "config_set", self._config_detail(node, dotted))


def _to_host(call: ast.Call) -> bool:
    """``x.to("cpu")``, ``x.to(device="cpu")``, ``x.to(torch.device("cpu"))``: a copy to the host."""
    a = _kw(call, "device") or (call.args[0] if call.args else None)
    if isinstance(a, ast.Call) and a.args:
        a = a.args[0]
    return isinstance(a, ast.Constant) and a.value == "cpu"


def _is_device_copy(call: ast.Call) -> bool:
    """``x.cuda()``, ``x.to(device)``, ``x.to("cuda")``, ``x.to(device=...)`` (not ``x.to(torch.float16)``)."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        return True
    if _kw(call, "device") is not None:
        return True
    if not call.args:
        return False
    a = call.args[0]
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        return a.value.startswith(("cuda", "xpu", "mps", "npu"))
    text = _dotted(a) if isinstance(a, (ast.Name, ast.Attribute)) else (
        _dotted(a.func) if isinstance(a, ast.Call) else "")
    low = text.lower()
    return "dev" in low or "cuda" in low or low.endswith("torch.device")


def _loop_sites(nodes: list[ast.AST], path: str, lines: list[str], line: int) -> list[SourceSite]:
    """The step statement at ``line``, the innermost loop around it and the statement that fetches the batch: a
    ``next(...)`` before the step in the loop body, else the loop's own iteration unless it only counts
    (``range``, ``enumerate(range)``, ``itertools.count``)."""
    step = loop = None
    for node in nodes:
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= line <= end and (loop is None or node.lineno > loop.lineno):
                loop = node
        if isinstance(node, ast.stmt) and node.lineno == line and step is None:
            step = node
    out = [SourceSite(path, line, "step", _snippet(lines, line))] if step is not None else []
    if loop is None:
        return out
    out.append(SourceSite(path, loop.lineno, "loop", _snippet(lines, loop.lineno)))
    body_before = [s for s in loop.body if s.lineno < line]
    fetch = [s for s in body_before if any(isinstance(n, ast.Call) and _dotted(n.func) in ("next", "builtins.next")
                                          for n in ast.walk(s))]
    if fetch:
        out.append(SourceSite(path, fetch[-1].lineno, "batch_fetch", _snippet(lines, fetch[-1].lineno), "next()"))
    elif isinstance(loop, (ast.For, ast.AsyncFor)) and not _counts_only(loop.iter):
        out.append(SourceSite(path, loop.lineno, "batch_fetch", _snippet(lines, loop.lineno), "loop iteration"))
    return out


def _function_around(nodes: list[ast.AST], line: int) -> tuple[int, int]:
    """The lines of the innermost function around ``line`` (it runs every step when the step is entered in it);
    an empty range at module level."""
    best = (0, -1)
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = getattr(node, "end_lineno", node.lineno) or node.lineno
            if node.lineno <= line <= end and node.lineno >= best[0]:
                best = (node.lineno, end)
    return best


def _end_of_loop(nodes: list[ast.AST], lineno: int) -> int:
    for node in nodes:
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.lineno == lineno:
            return getattr(node, "end_lineno", lineno) or lineno
    return lineno


def _counts_only(it: ast.expr) -> bool:
    """The loop's iterable only counts: it yields step numbers, not batches."""
    if isinstance(it, ast.Call):
        name = _dotted(it.func).rsplit(".", 1)[-1]
        if name in ("range", "count"):
            return True
        if name == "enumerate" and it.args:
            return _counts_only(it.args[0])
        if name == "steps":                   # e.g. ``for step in ctx.steps():`` — a step counter
            return True
    return False


def _microbatch_counts(nodes: list[ast.AST], path: str, lines: list[str], names: set[str]) -> list[SourceSite]:
    """Assignments of a micro-batch count: a name passed to a pipeline schedule, or one named like one
    (``n_microbatches``, ``chunks``, ``grad_accum``, ...) that is given a number."""
    out = []
    for node in nodes:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if not isinstance(t, ast.Name):
                continue
            low = t.id.lower()
            named = any(w in low for w in _MICROBATCH_WORDS)
            numeric = isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
            if t.id in names or (named and numeric):
                out.append(SourceSite(path, node.lineno, "microbatch_count", _snippet(lines, node.lineno),
                                      "passed to the schedule" if t.id in names else "named like a micro-batch count"))
    return out
