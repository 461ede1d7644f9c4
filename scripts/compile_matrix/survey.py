"""What each recorded log shows, per torch version and event class: the event types and artifacts it holds, each
``compilation_metrics`` in short (compile id, fail type and reason, restart reasons, whether a graph was made,
the recompile reason field, the user context), compile ids that have no ``compilation_metrics``, and how cache
hits and misses are written. Output: ``tests/data/compile_logs/matrix/survey.json.gz`` (the facts behind the tables in
docs/compile-logs.md).

    python scripts/compile_matrix/survey.py
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MATRIX = REPO / "tests" / "data" / "compile_logs" / "matrix"
_KIND = re.compile(r'\] \{"(\w+)"')



def _log_text(path: Path) -> str:
    """A log's text, gunzipped when it is ``*.log.gz``."""
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8", "replace")

def _head(text, n: int = 160):
    if not text:
        return None
    return str(text).strip().splitlines()[0][:n]


def _cid(ev: dict) -> str | None:
    if ev.get("frame_id") is None:
        return None
    s = f"{ev['frame_id']}/{ev.get('frame_compile_id')}"
    if ev.get("attempt"):
        s += f"_{ev['attempt']}"
    if ev.get("compiled_autograd_id") is not None:
        s = f"!{ev['compiled_autograd_id']}/{s}"
    return s


def events(path: Path):
    """(event dict, payload text) for every line of a TORCH_TRACE log."""
    cur, payload = None, []
    for line in _log_text(path).splitlines():
        if line.startswith("\t"):
            payload.append(line[1:])
            continue
        if cur is not None:
            yield cur, "\n".join(payload)
        cur, payload = None, []
        i = line.find("] {")
        if i >= 0:
            try:
                cur = json.loads(line[i + 2:])
            except json.JSONDecodeError:
                cur = {"_malformed": True}
    if cur is not None:
        yield cur, "\n".join(payload)


def survey_log(path: Path) -> dict:
    kinds: Counter = Counter()
    arts: Counter = Counter()
    chrom: Counter = Counter()
    cache_states: list[dict] = []
    metrics: list[dict] = []
    ids_seen: list[str] = []
    starts: Counter = Counter()
    for ev, payload in events(path):
        kind = next((k for k in ev if k not in ("frame_id", "frame_compile_id", "attempt", "rank",
                                                 "compiled_autograd_id", "has_payload")), "?")
        kinds[kind] += 1
        cid = _cid(ev)
        if cid and cid not in ids_seen:
            ids_seen.append(cid)
        if kind == "dynamo_start" and cid:
            starts[cid] += 1
        if kind == "artifact":
            name = ev["artifact"].get("name")
            arts[name] += 1
            if name and name.endswith("_cache_hash") and payload:
                try:
                    st = json.loads(payload).get("cache_state")
                except (json.JSONDecodeError, AttributeError):
                    st = None
                cache_states.append({"artifact": name, "compile_id": cid, "cache_state": st})
        elif kind == "chromium_event" and payload:
            try:
                name = json.loads(payload).get("name", "")
            except json.JSONDecodeError:
                name = ""
            if "cache" in name:
                chrom[name] += 1
        elif kind in ("compilation_metrics", "bwd_compilation_metrics"):
            m = ev[kind] or {}
            metrics.append({
                "kind": kind, "compile_id": m.get("compile_id") or cid, "context_id": cid, "co_name": m.get("co_name"),
                "fail_type": m.get("fail_type"), "fail_reason": _head(m.get("fail_reason"), 240),
                "fail_user_frame": (f"{Path(m['fail_user_frame_filename']).name}:{m.get('fail_user_frame_lineno')}"
                                    if m.get("fail_user_frame_filename") else None),
                "restart_reasons": [_head(r, 160) for r in (m.get("restart_reasons") or [])],
                "has_guarded_code": m.get("has_guarded_code"),
                "graph_op_count": m.get("graph_op_count"),
                "guard_count": m.get("guard_count"),
                "recompile_reason": _head(m.get("recompile_reason"), 160) if "recompile_reason" in m else "absent",
                "recompile_user_contexts": m.get("recompile_user_contexts", "absent"),
                "num_graph_breaks": m.get("num_graph_breaks", "absent"),
                "cache_size": m.get("cache_size"),
                "time_keys": sorted(k for k in ("start_time", "start_time_us", "duration_us",
                                                "entire_frame_compile_time_s") if k in m),
                "cache_counts": {k: v for k, v in m.items() if k.endswith("_cache_hit_count") or
                                 k.endswith("_cache_miss_count") or k.endswith("_cache_bypass_count")
                                 if v},
            })
    with_metrics = {i for m in metrics if m["kind"] == "compilation_metrics"
                    for i in (m["compile_id"], m["context_id"])}
    return {
        "log": path.name, "bytes": path.stat().st_size, "events": dict(kinds.most_common()),
        "artifacts": dict(arts.most_common()), "cache_chromium_events": dict(chrom),
        "cache_states": cache_states, "compilation_metrics": metrics,
        "ids_without_compilation_metrics": [i for i in ids_seen if i not in with_metrics],
        "dynamo_starts": dict(starts),
    }


def main() -> None:
    out: dict = {}
    for vdir in sorted(p for p in MATRIX.iterdir() if p.is_dir() and re.match(r"\d+\.\d+", p.name)):
        for cdir in sorted(p for p in vdir.iterdir() if p.is_dir()):
            exp = json.loads((cdir / "expected.json").read_text()) if (cdir / "expected.json").exists() else {}
            out.setdefault(vdir.name, {})[cdir.name] = {
                "supported": exp.get("supported"), "why": exp.get("why"),
                "logs": [survey_log(p) for p in sorted([*cdir.glob("*.log"), *cdir.glob("*.log.gz")])],
            }
    (MATRIX / "survey.json.gz").write_bytes(gzip.compress((json.dumps(out, indent=1) + "\n").encode(), 9, mtime=0))
    print(f"wrote {MATRIX / 'survey.json.gz'}")


if __name__ == "__main__":
    main()
