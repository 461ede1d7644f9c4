"""The fix × torch version × order matrix: run ``fix_probe.py`` (and ``fix_probe_dist.py``) for every combination
on each torch and write ``tests/data/compile_logs/matrix/fix_matrix.json``.

    python scripts/compile_matrix/run_fixes.py --python /tmp/tv/t2.11.0/bin/python [--python ...] [--only FIX ...]

Results for other versions already in the file are kept (one torch at a time can be added). A combination
"took effect" when its counts differ from the same bench's baseline (order ``none``) in the direction the fix
promises — see :func:`took_effect`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = REPO / "tests" / "data" / "compile_logs" / "matrix" / "fix_matrix.json"
ABOUT = ("fix x torch version x order: one row per combination, run in a fresh process by "
         "scripts/compile_matrix/fix_probe.py (fix_probe_dist.py for guard_collectives). compiles = graphs compiled "
         "(CompileCounterWithBackend('aot_eager')); limit_hits = recompile-limit warnings; graph_breaks = "
         "counters['graph_break'] total; baseline = the same bench with order 'none'; outcome = took_effect | "
         "no_effect | absent | raises | not_applicable | baseline. Orders: see fix_probe.py.")
ORDERS_CFG = ["none", "before_compile", "after_compile", "other_thread", "worker_thread"]

#: (fix, the setting as the recommender writes it, order, extra args)
COMBOS: list[tuple[str, str, str, dict]] = []
for value in ("L['x']", "L['x']:1"):
    for order in ORDERS_CFG + ["env_before_import", "env_after_import", "after_first_call"]:
        COMBOS.append(("dynamic_sources", f'[compiler] dynamic_sources = "{value}"', order,
                       {"value": value, "dynamic": "false"}))
    for order in ("none", "before_compile", "after_compile"):
        COMBOS.append(("dynamic_sources", f'[compiler] dynamic_sources = "{value}"', order,
                       {"value": value, "dynamic": "none"}))
COMBOS += [("mark_dynamic", "[mark_dynamic] x = { dim = 1 }", o, {"dynamic": "false"}) for o in ("none", "per_call")]
for key in ("recompile_limit", "cache_size_limit"):
    COMBOS += [("recompile_limit", f"[dynamo] {key} = 16", o, {"key": key, "dynamic": "false"}) for o in ORDERS_CFG]
COMBOS += [("capture_scalar_outputs", "[dynamo] capture_scalar_outputs = true", o, {"dynamic": "none"})
           for o in ORDERS_CFG]
COMBOS += [("reorderable_logging_functions", '[dynamo] reorderable_logging_functions = ["print"]', o,
            {"dynamic": "none"}) for o in ORDERS_CFG]
COMBOS += [("specialize_float", "[dynamo] specialize_float = false", o, {"dynamic": "none"}) for o in ORDERS_CFG]
COMBOS += [("eager_on_recompile", '[stance] stance = "eager_on_recompile"', o, {"dynamic": "false"})
           for o in ("none", "after_first_call", "before_compile", "other_thread")]
COMBOS += [("dynamic_true", "[compile] dynamic = true", o, {"dynamic": "false"}) for o in ("none", "compile_kwarg")]
COMBOS += [("reduce_overhead", '[compile] mode = "reduce-overhead"', o, {}) for o in ("none", "compile_kwarg")]
COMBOS += [("cache", '[cache] load/save = "compile_cache.bin"', o, {})
           for o in ("none", "save", "load_before_compile", "load_after_compile")]
DIST = [("guard_collectives", "[distributed] guard_collectives = true", o, {})
        for o in ("none", "before_compile", "after_compile")]


def _env(cache: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TRITON_CACHE_DIR": cache + "/triton",
           "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONHASHSEED": "0"}
    for k in ("TORCH_TRACE", "TORCH_COMPILE_DYNAMIC_SOURCES", "TORCH_LOGS"):
        env.pop(k, None)
    return env


def _result(text: str) -> dict:
    for line in text.splitlines()[::-1]:
        if line.startswith("FIX_RESULT "):
            return json.loads(line[len("FIX_RESULT "):])
    return {"error": "no result: " + " | ".join(text.strip().splitlines()[-3:])[:400]}


def run_probe(python: str, fix: str, order: str, extra: dict, artifacts: str) -> dict:
    args = [python, str(HERE / "fix_probe.py"), "--fix", fix, "--order", order]
    for k in ("value", "dynamic", "key"):
        if k in extra:
            args += [f"--{k}", extra[k]]
    if fix == "cache":
        args += ["--artifacts", artifacts]
    with tempfile.TemporaryDirectory(prefix="fixc_") as cache:
        p = subprocess.run(args, env=_env(cache), capture_output=True, text=True, timeout=900)
    return _result(p.stdout + p.stderr)


def run_dist(python: str, order: str) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="fixc_") as cache:
        procs = [subprocess.Popen([python, str(HERE / "fix_probe_dist.py"), "--order", order],
                                  env={**_env(cache), "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                       "MASTER_PORT": str(port)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=600)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outs.append(p.communicate()[0] + "\n(killed)")
    ranks = [_result(o) for o in outs]
    res = {"torch": ranks[0].get("torch"), "compiles_by_rank": [r.get("compiles") for r in ranks]}
    errs = [r["error"] for r in ranks if r.get("error")]
    if errs:
        res["error"] = errs[0]
    return res


def took_effect(fix: str, res: dict, base: dict | None) -> bool | None:
    """Whether ``res`` differs from the baseline the way the fix promises; None when not comparable."""
    if res.get("error") or base is None or base.get("error"):
        return None
    if fix in ("dynamic_sources", "mark_dynamic", "dynamic_true", "eager_on_recompile", "specialize_float"):
        return res["compiles"] < base["compiles"] or (res.get("limit_hits", 0) < base.get("limit_hits", 0))
    if fix == "recompile_limit":
        return res["compiles"] > base["compiles"] and res.get("limit_hits", 0) == 0
    if fix in ("capture_scalar_outputs", "reorderable_logging_functions"):
        return res["graph_breaks"] < base["graph_breaks"]
    if fix == "guard_collectives":
        c, b = res["compiles_by_rank"], base["compiles_by_rank"]
        return len(set(c)) == 1 and len(set(b)) > 1
    if fix == "cache":
        return res.get("fxgraph_cache_hit", 0) > base.get("fxgraph_cache_hit", 0)
    if fix == "reduce_overhead":
        return None  # CUDA graphs: nothing to capture on a CPU
    return None


def outcome(row: dict) -> str:
    """One word for a combination: took_effect, no_effect, absent (the setting is not in this torch), raises (the
    run fails with it), not_applicable (CUDA graphs on a CPU), or baseline."""
    if row["order"] in ("none", "save"):
        return "baseline"
    err = row.get("error") or ""
    if any(t in err for t in ("has no attribute", "absent", "No module", "does not exist", "has no set_")):
        return "absent"
    if err:
        return "raises"
    if row["fix"] == "reduce_overhead":
        return "not_applicable"
    return {True: "took_effect", False: "no_effect"}.get(row.get("took_effect"), "unknown")


def relabel(rows: list[dict]) -> list[dict]:
    """Fill ``baseline``, ``took_effect`` and ``outcome`` on every row from the rows of the same torch."""
    for row in rows:
        if row["order"] in ("none", "save"):
            row["outcome"] = "baseline"
            continue
        base = next((r for r in rows if r["fix"] == row["fix"] and r["order"] == "none"
                     and r["variant"].get("dynamic") == row["variant"].get("dynamic")
                     and r.get("key") == row.get("key")), None)
        row["baseline"] = {k: base.get(k) for k in ("compiles", "compiles_by_rank", "graph_breaks", "limit_hits",
                                                    "fxgraph_cache_hit")} if base else None
        row["took_effect"] = took_effect(row["fix"], row, base)
        row["outcome"] = outcome(row)
    return rows


def run_version(python: str, only: list[str] | None) -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fixart_") as art_dir:
        artifacts = str(Path(art_dir) / "compile_cache.bin")
        for fix, setting, order, extra in COMBOS + DIST:
            if only and fix not in only:
                continue
            res = run_dist(python, order) if fix == "guard_collectives" else run_probe(python, fix, order, extra,
                                                                                        artifacts)
            row = {"fix": fix, "setting": setting, "order": order,
                   "variant": {k: v for k, v in extra.items() if k != "key"}, **res}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", default=[])
    ap.add_argument("--relabel", action="store_true", help="only recompute took_effect / outcome of the stored rows")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    data = json.loads(a.out.read_text()) if a.out.exists() else {"versions": {}}
    data["about"] = ABOUT
    if a.relabel:
        for v, rows in data["versions"].items():
            data["versions"][v] = relabel(rows)
        a.out.write_text(json.dumps(data, indent=1) + "\n")
        return
    for py in a.python:
        rows = run_version(py, a.only)
        version = next((r["torch"] for r in rows if r.get("torch")), "unknown").split("+")[0]
        old = data["versions"].get(version, [])
        if a.only:
            rows = [r for r in old if r["fix"] not in a.only] + rows
        data["versions"][version] = relabel(rows)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
