"""Run tlparse on every recorded log and store what it counts next to the log as ``tlparse.json``, so tests compare
the workbench's reading against tlparse without running it.

    python scripts/compile_matrix/tlparse_counts.py --tlparse /tmp/tv/t2.13.0/bin/tlparse [DIR ...]

With no DIR: every class folder under ``tests/data/compile_logs/matrix/<version>/``, and the tlparse test logs under
``../shared/compile_logs/tlparse`` (their counts go to ``matrix/tlparse_inputs/``).

What is taken from tlparse's output (0.4.3):
- ``compile_directory.json``: the compile ids (``[0/1]``, ``[0/0_1]``, ``[!0/1/0]``) and the artifacts each has;
- ``index.html``: the status tlparse gives each compile id in its stack trie (``ok``, ``break`` = success with
  restart, ``empty`` = empty graph, ``error``, ``missing`` = metrics missing);
- ``failures_and_restarts.html``: one row per failure or restart (compile id, type, first line of the reason,
  failure source);
- its console line ``Stats { ok: N, ... }`` and ``Unknown fields: {...}``, and its exit code.
Counts are derived from those, each named after where it comes from.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MATRIX = REPO / "tests" / "data" / "compile_logs" / "matrix"
TLPARSE_INPUTS = REPO.parent / "shared" / "compile_logs" / "tlparse"
_RANK = re.compile(r"_rank_(\d+)(?=[_.]|$)")
_STATUS = re.compile(r"<a href='#\[(?P<id>[^\]]+)\]' class='status-(?P<status>[a-z]+)'>")
_ROW = re.compile(r"<tr>\s*<td>\s*<a [^>]*>\[(?P<id>[^\]]+)\]</a>\s*</td>\s*<td><pre>(?P<type>.*?)</pre></td>\s*"
                  r"<td><pre>(?P<desc>.*?)</pre></td>\s*<td><pre>(?P<src>.*?)</pre></td>", re.S)
_STATS = re.compile(r"Stats \{(?P<body>[^}]*)\}")
_UNKNOWN = re.compile(r"Unknown fields: \{(?P<body>[^}]*)\}")
_ARTIFACT_N = re.compile(r"_\d+\.(txt|json|html)$")
CACHE_NAMES = ("fx_graph_cache_hit", "fx_graph_cache_miss", "fx_graph_cache_bypass", "aotautograd_cache_hit",
               "aotautograd_cache_miss", "aotautograd_cache_bypass")


def _plain(s: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", s)).strip()


def parse_one(tlparse: str, log: Path) -> dict:
    """tlparse on one log → its counts (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="tlp_") as tmp:
        out = Path(tmp) / "out"
        p = subprocess.run([tlparse, str(log), "-o", str(out), "--overwrite", "--no-browser"],
                           capture_output=True, text=True, timeout=600)
        console = (p.stdout + p.stderr).strip()
        res: dict = {"log": log.name, "exit": p.returncode}
        if m := _STATS.search(console):
            res["stats"] = {k.strip(): int(v) for k, v in
                            (kv.split(":") for kv in m.group("body").split(",") if ":" in kv)}
        if m := _UNKNOWN.search(console):
            res["unknown_fields"] = sorted(x.strip().strip('"') for x in m.group("body").split(",") if x.strip())
        if p.returncode != 0 or not (out / "compile_directory.json").exists():
            res["error"] = console[-2000:]
            return res
        directory = json.loads((out / "compile_directory.json").read_text())
        index = (out / "index.html").read_text()
        fr = (out / "failures_and_restarts.html").read_text() if (out / "failures_and_restarts.html").exists() else ""
    ids = [k.strip("[]") for k in directory if k != "[-/-]"]
    artifacts = {k.strip("[]"): [_ARTIFACT_N.sub("", a["name"]) for a in v.get("artifacts", [])]
                 for k, v in directory.items()}
    status = {}
    for m in _STATUS.finditer(index):
        status.setdefault(m.group("id"), m.group("status"))
    rows = [{"compile_id": m.group("id"), "type": _plain(m.group("type")),
             "reason_head": (_plain(m.group("desc")).splitlines() or [""])[0][:300],
             "source": _plain(m.group("src")) or None} for m in _ROW.finditer(fr)]
    names = Counter(n for arts in artifacts.values() for n in arts)
    per_id_cache = {i: dict(Counter(n for n in artifacts.get(i, []) if n in CACHE_NAMES)) for i in ids}
    res.update({
        "compile_ids": ids,
        "status": status,
        "failures_and_restarts": rows,
        "artifacts_per_id": {i: artifacts.get(i, []) for i in ids},
        "counts": {
            "compile_ids": len(ids),
            "with_compilation_metrics": sum(1 for i in ids if "compilation_metrics" in artifacts.get(i, [])),
            "status": dict(Counter(status.values())),
            "frame_compile_id_gt0": sum(1 for i in ids if _frame_compile_id(i) > 0),
            "recompile_reasons_artifacts": names.get("recompile_reasons", 0),
            "graph_break_artifacts": names.get("dynamo_graph_break_reason", 0),
            "failure_rows": sum(1 for r in rows if r["source"]),
            "restart_rows": sum(1 for r in rows if not r["source"]),
            "cache": {n: names[n] for n in CACHE_NAMES if names.get(n)},
        },
        "cache_per_id": {i: c for i, c in per_id_cache.items() if c},
    })
    return res


def _frame_compile_id(cid: str) -> int:
    m = re.search(r"(\d+)/(\d+)(?:_\d+)?$", cid)
    return int(m.group(2)) if m else 0


def tlparse_version(tlparse: str) -> str:
    return subprocess.run([tlparse, "--version"], capture_output=True, text=True).stdout.strip()


def do_dir(tlparse: str, folder: Path, dest: Path | None = None) -> dict:
    """tlparse on every ``*.log`` of ``folder`` (one per rank) → ``tlparse.json`` in ``dest`` (default: folder)."""
    logs = sorted(folder.glob("*.log"))
    ranks = {}
    for log in logs:
        m = _RANK.search(log.name)
        ranks[m.group(1) if m else log.stem if len(logs) > 1 and not m else "0"] = parse_one(tlparse, log)
    out = {"tlparse": tlparse_version(tlparse), "ranks": ranks}
    (dest or folder / "tlparse.json").write_text(json.dumps(out, indent=1) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tlparse", required=True)
    ap.add_argument("--inputs-only", action="store_true", help="only the tlparse test logs under ../shared")
    ap.add_argument("--extra", nargs="*", type=Path, default=[],
                    help="more tlparse test inputs (a log or a folder of rank logs), counts to matrix/tlparse_inputs/")
    ap.add_argument("--source", default="", help="where the --extra inputs come from (written into the JSON)")
    ap.add_argument("dirs", nargs="*", type=Path)
    a = ap.parse_args()
    if a.extra:
        dest = MATRIX / "tlparse_inputs"
        dest.mkdir(parents=True, exist_ok=True)
        for x in a.extra:
            name = x.stem if x.is_file() else x.name
            if x.is_file():
                res = {"tlparse": tlparse_version(a.tlparse), "ranks": {"0": parse_one(a.tlparse, x)}}
            else:
                res = do_dir(a.tlparse, x, Path(tempfile.mkdtemp()) / "t.json")
            res["source"] = a.source
            (dest / f"{name}.tlparse.json").write_text(json.dumps(res, indent=1) + "\n")
            print("tlparse input", name, {r: v.get("counts", {}).get("compile_ids") for r, v in res["ranks"].items()})
        return
    dirs = [] if a.inputs_only else (a.dirs or sorted(p for p in MATRIX.glob("*/*")
                                                      if p.is_dir() and any(p.glob("*.log"))))
    for d in dirs:
        res = do_dir(a.tlparse, d)
        print(d.relative_to(REPO) if d.is_relative_to(REPO) else d,
              {r: (v.get("exit"), v.get("counts", {}).get("compile_ids"), v.get("error", "")[:80])
               for r, v in res["ranks"].items()}, flush=True)
    if (a.inputs_only or not a.dirs) and TLPARSE_INPUTS.exists():
        dest = MATRIX / "tlparse_inputs"
        dest.mkdir(parents=True, exist_ok=True)
        for sub in [TLPARSE_INPUTS] + sorted(p for p in TLPARSE_INPUTS.iterdir() if p.is_dir()):
            for log in sorted(sub.glob("*.log")) if sub == TLPARSE_INPUTS else [sub]:
                name = log.stem if log.is_file() else log.name
                if log.is_file():
                    res = {"tlparse": tlparse_version(a.tlparse), "ranks": {"0": parse_one(a.tlparse, log)}}
                    (dest / f"{name}.tlparse.json").write_text(json.dumps(res, indent=1) + "\n")
                else:
                    res = do_dir(a.tlparse, log, dest / f"{name}.tlparse.json")
                res["source"] = "../shared/compile_logs/tlparse (tlparse's tests/inputs)"
                (dest / f"{name}.tlparse.json").write_text(json.dumps(res, indent=1) + "\n")
                print("tlparse input", name, {r: v.get("counts", {}).get("compile_ids")
                                              for r, v in res["ranks"].items()}, flush=True)


if __name__ == "__main__":
    main()
