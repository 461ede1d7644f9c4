"""Does a recommended fix change what torch.compile does on the installed torch, and in which order of calls?

One process = one (fix, order, variant). It runs the fix's bench (the situation the fix answers) with a
``CompileCounterWithBackend("aot_eager")`` backend and prints one JSON line: graphs compiled, graph breaks, whether
the recompile limit was hit, and any error. ``run_fixes.py`` runs every combination on every torch and compares each
with the bench's baseline (order ``none``).

Orders (when the fix is applied, relative to the user's code):
  none               no fix (the baseline)
  before_compile     set, then ``torch.compile(model, ...)``, then the calls
  after_compile      ``torch.compile(model, ...)``, then set, then the first call (a collector created after the
                     user compiled the model)
  env_before_import  environment variable set before ``import torch``
  env_after_import   environment variable set after ``import torch``, before the compile
  other_thread       set in the main thread; the model is compiled and called in another thread
  worker_thread      set in the thread that compiles and calls the model (not the main thread)
  after_first_call   set after the first call (for stances: after warm-up)
  per_call           before every call (``mark_dynamic``)
  compile_kwarg      an argument of ``torch.compile`` (``dynamic=True``, ``mode=...``)
  load_before_compile / load_after_compile   ``[cache] load``: artifacts from an earlier process loaded before the
                     compile call / after it, before the first call; ``save`` writes them (the earlier process)

    python scripts/compile_matrix/fix_probe.py --fix dynamic_sources --order after_compile --value "L['x']:1"
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import threading
import traceback

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--fix", required=True)
ap.add_argument("--order", default="none")
ap.add_argument("--value", default=None, help="the setting's value where it has variants (dynamic_sources)")
ap.add_argument("--dynamic", default="false", choices=["false", "none", "true"], help="torch.compile(dynamic=...)")
ap.add_argument("--key", default=None, help="config key as written (recompile_limit vs cache_size_limit)")
ap.add_argument("--artifacts", default=None, help="cache artifacts file for save/load")
A = ap.parse_args()

ENV_FOR = {"dynamic_sources": "TORCH_COMPILE_DYNAMIC_SOURCES"}
if A.order == "env_before_import":
    os.environ[ENV_FOR[A.fix]] = A.value

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

VERSION = torch.__version__
LIMIT_RX = re.compile(r"cache_size_limit|recompile_limit|accumulated_cache_size_limit", re.I)
result: dict = {"torch": VERSION, "fix": A.fix, "order": A.order, "value": A.value, "dynamic": A.dynamic,
                "key": A.key}


class _LimitWatch(logging.Handler):
    """Notes dynamo's warning that a frame hit the recompile limit."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits = 0

    def emit(self, record: logging.LogRecord) -> None:
        if LIMIT_RX.search(record.getMessage()):
            self.hits += 1


WATCH = _LimitWatch()
logging.getLogger("torch._dynamo").addHandler(WATCH)
DYN = {"false": False, "none": None, "true": True}[A.dynamic]


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.tanh(self.lin(x)).sum(-1)


def lengths_inputs():
    """10 sequence lengths on dim 1 (the issue's case), then one length again."""
    torch.manual_seed(0)
    return [torch.randn(4, 8 + 2 * i, 16) for i in range(10)] + [torch.randn(4, 26, 16)]


def item_fn(x):
    s = x.sum().item()
    return x * s + 1


def print_fn(x):
    y = torch.tanh(x)
    print("inside")
    return y + 1


def float_fn(x, s):
    return torch.tanh(x) * s


# --- how each fix is set (the object it changes) ---------------------------------------------------------------
def set_fix() -> None:
    f = A.fix
    if f == "dynamic_sources":
        if A.order in ("env_before_import",):
            return
        if A.order == "env_after_import":
            os.environ["TORCH_COMPILE_DYNAMIC_SOURCES"] = A.value
            return
        torch.compiler.config.dynamic_sources = A.value
    elif f == "recompile_limit":
        setattr(torch._dynamo.config, A.key or "recompile_limit", 16)
    elif f == "capture_scalar_outputs":
        torch._dynamo.config.capture_scalar_outputs = True
    elif f == "reorderable_logging_functions":
        torch._dynamo.config.reorderable_logging_functions = {print}
    elif f == "specialize_float":
        torch._dynamo.config.specialize_float = False
    elif f == "eager_on_recompile":
        torch.compiler.set_stance("eager_on_recompile")
    elif f in ("mark_dynamic", "dynamic_true", "reduce_overhead", "cache"):
        pass
    else:
        raise SystemExit(f"unknown fix {f}")


def read_back() -> object:
    """The setting's value as this thread sees it (after the run), where it is a config value."""
    f = A.fix
    try:
        if f == "dynamic_sources":
            return torch.compiler.config.dynamic_sources
        if f == "recompile_limit":
            return getattr(torch._dynamo.config, A.key or "recompile_limit")
        if f in ("capture_scalar_outputs", "specialize_float"):
            return getattr(torch._dynamo.config, f)
        if f == "reorderable_logging_functions":
            return sorted(getattr(x, "__name__", str(x)) for x in torch._dynamo.config.reorderable_logging_functions)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# --- the benches ---------------------------------------------------------------------------------------------------
def bench(apply_between: bool) -> dict:
    """Compile the fix's model, (set the fix when the order says so), call it; return the counts."""
    cnt = CompileCounterWithBackend("aot_eager")
    f = A.fix
    out: dict = {}
    if f in ("dynamic_sources", "recompile_limit", "mark_dynamic", "eager_on_recompile", "dynamic_true"):
        model = Net()
        dyn = True if f == "dynamic_true" and A.order == "compile_kwarg" else DYN
        cm = torch.compile(model, backend=cnt, dynamic=dyn)
        if apply_between:
            set_fix()
        with torch.no_grad():
            for i, x in enumerate(lengths_inputs()):
                if f == "mark_dynamic" and A.order == "per_call":
                    torch._dynamo.mark_dynamic(x, 1)
                cm(x)
                if i == 0 and A.order == "after_first_call":
                    set_fix()
    elif f == "capture_scalar_outputs":
        cf = torch.compile(item_fn, backend=cnt, dynamic=DYN)
        if apply_between:
            set_fix()
        for _ in range(3):
            cf(torch.ones(4, 4))
    elif f == "reorderable_logging_functions":
        cf = torch.compile(print_fn, backend=cnt, dynamic=DYN)
        if apply_between:
            set_fix()
        for _ in range(3):
            cf(torch.ones(4, 4))
    elif f == "specialize_float":
        cf = torch.compile(float_fn, backend=cnt, dynamic=DYN)
        if apply_between:
            set_fix()
        for s in (0.5, 0.75, 1.25, 1.5, 2.5):
            cf(torch.ones(4, 4), s)
    elif f == "reduce_overhead":
        cf = torch.compile(item_free, mode="reduce-overhead" if A.order == "compile_kwarg" else None)
        for _ in range(3):
            cf(torch.ones(64, 64))
        c = torch._dynamo.utils.counters
        out["cudagraph_skips"] = dict(c.get("inductor", {})).get("cudagraph_skips", 0)
        out["inductor_counters"] = {k: v for k, v in dict(c.get("inductor", {})).items() if "cudagraph" in k}
        return out | {"compiles": int(c["stats"]["unique_graphs"])}
    elif f == "cache":
        return cache_bench()
    out["compiles"] = cnt.frame_count
    return out


def item_free(x):
    return torch.relu(x @ x).sum(0)


def cache_bench() -> dict:
    """``[cache] save``: compile with inductor and write the artifacts; ``load_*``: load them (before the compile
    call or after it) and count the FX-graph and AOTAutograd cache hits."""
    if not hasattr(torch.compiler, "save_cache_artifacts"):
        return {"error": "absent: torch.compiler.save_cache_artifacts / load_cache_artifacts not in this torch"}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(8, 16)
    if A.order == "save":
        torch.compile(model)(x).sum().backward()
        art = torch.compiler.save_cache_artifacts()
        if art is None:
            return {"error": "save_cache_artifacts returned None"}
        with open(A.artifacts, "wb") as fh:
            fh.write(art[0])
        return {"saved_bytes": len(art[0])}
    if A.order == "load_before_compile" and A.artifacts:
        torch.compiler.load_cache_artifacts(open(A.artifacts, "rb").read())
    cm = torch.compile(model)
    if A.order == "load_after_compile" and A.artifacts:
        torch.compiler.load_cache_artifacts(open(A.artifacts, "rb").read())
    cm(x).sum().backward()
    c = torch._dynamo.utils.counters
    ind = dict(c.get("inductor", {}))
    return {"fxgraph_cache_hit": ind.get("fxgraph_cache_hit", 0),
            "fxgraph_cache_miss": ind.get("fxgraph_cache_miss", 0),
            "aot_autograd_cache_hit": dict(c.get("aot_autograd", {})).get("autograd_cache_hit", 0),
            "aot_autograd_cache_miss": dict(c.get("aot_autograd", {})).get("autograd_cache_miss", 0)}


def _guarded(box: dict, fn) -> None:
    """Run ``fn`` in a thread, keeping its exception as the result's error."""
    try:
        fn()
    except Exception as exc:
        box["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"


def main() -> None:
    order = A.order
    try:
        if order in ("before_compile", "env_after_import"):
            set_fix()
            res = bench(False)
        elif order == "after_compile":
            res = bench(True)
        elif order == "other_thread":
            set_fix()
            box: dict = {}
            t = threading.Thread(target=lambda: _guarded(box, lambda: box.update(res=bench(False), seen=read_back())))
            t.start()
            t.join()
            res = box.get("res", {"error": box.get("error", "the thread raised")})
            result["value_seen_in_thread"] = box.get("seen")
        elif order == "worker_thread":
            box = {}

            def work() -> None:
                set_fix()
                box.update(res=bench(False))
            t = threading.Thread(target=lambda: _guarded(box, work))
            t.start()
            t.join()
            res = box.get("res", {"error": box.get("error", "the thread raised")})
            result["value_seen_in_main_thread"] = read_back()
        else:  # none, env_before_import, per_call, after_first_call, compile_kwarg, save, load_*
            res = bench(False)
        result.update(res)
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        result["traceback_tail"] = traceback.format_exc().strip().splitlines()[-3:]
    c = torch._dynamo.utils.counters
    result["graph_breaks"] = int(sum(c["graph_break"].values()))
    result["limit_hits"] = WATCH.hits
    result["unique_graphs"] = int(c["stats"]["unique_graphs"])
    result.setdefault("value_seen", read_back())
    print("FIX_RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
