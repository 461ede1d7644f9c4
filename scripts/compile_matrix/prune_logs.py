"""Store the recorded matrix logs small: payloads the workbench does not read dropped, every log gzip -9.

Usage: ``python scripts/compile_matrix/prune_logs.py SRC_MATRIX_DIR DEST_MATRIX_DIR``. Every
``<version>/<class>/*.log`` under SRC becomes ``*.log.gz`` under DEST with:

- every event line the workbench reads kept, in order, with its time, thread and ``has_payload`` md5 (compile
  ids, metrics, artifacts, cache events); the lines of the events it skips (:data:`DROP_EVENTS`: graphs, guards,
  generated code, tensor descriptions, chromium events) dropped;
- the payload lines kept only for the artifacts whose text is read (:data:`KEEP_PAYLOAD`), and for the
  ``*_cache_hash`` artifacts (torch 2.5's only record of a cache hit or miss); other payloads (graphs, generated
  code, guards, chromium bodies) are dropped;
- ``compilation_metrics.inductor_config`` (tens of KB of config text per compile) replaced by ``"sha256:<16 hex>"``
  of that text, so compiles with different configs still differ.

tlparse's counts (``tlparse.json``) were taken from the unpruned logs; tlparse warns about the md5 of a dropped
payload when re-run on a pruned log. The JSON files (expected.json, tlparse.json, fix_matrix.json) are stored
gzip -9 (``*.json.gz``); ``console.txt`` (the recording's stderr) is left out.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sys
from pathlib import Path

DROP_EVENTS = frozenset({
    "chromium_event", "describe_tensor", "describe_storage", "describe_source", "dynamo_output_graph",
    "aot_forward_graph", "aot_backward_graph", "aot_inference_graph", "aot_joint_graph", "inductor_output_code",
    "dynamo_cpp_guards_str", "create_symbol", "inductor_post_grad_graph", "inductor_pre_grad_graph", "dynamo_guards",
})
KEEP_PAYLOAD = frozenset({
    "recompile_reasons", "dynamo_graph_break_reason", "dynamo_error", "inductor_collective_schedule",
    "torch_version", "aotautograd_cache_bypass", "fx_graph_cache_bypass", "fx_graph_cache_hash",
    "aotautograd_cache_hash",
})


def prune(text: str) -> str:
    """One log's text, pruned as the module docstring says."""
    out: list[str] = []
    keep = False
    for line in text.splitlines(keepends=True):
        if line.startswith("\t"):
            if keep:
                out.append(line)
            continue
        keep = False
        i = line.find("] {")
        if i < 0:
            out.append(line)
            continue
        body = line[i + 2:]
        try:
            ev = json.loads(body)
        except json.JSONDecodeError:
            out.append(line)
            continue
        if next(iter(ev), None) in DROP_EVENTS:
            continue
        if "artifact" in ev:
            keep = (ev["artifact"] or {}).get("name") in KEEP_PAYLOAD
        m = ev.get("compilation_metrics")
        if isinstance(m, dict) and isinstance(m.get("inductor_config"), str):
            m["inductor_config"] = "sha256:" + hashlib.sha256(m["inductor_config"].encode()).hexdigest()[:16]
            line = line[:i + 2] + json.dumps(ev) + "\n"
        out.append(line)
    return "".join(out)


def main(src: Path, dest: Path) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or "__pycache__" in rel.parts:
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name == "console.txt":
            continue   # stderr of the recording: not test data
        if path.suffix == ".log":
            data = prune(path.read_text(encoding="utf-8", errors="surrogateescape"))
            blob = gzip.compress(data.encode("utf-8", "surrogateescape"), 9, mtime=0)
            target.with_name(target.name + ".gz").write_bytes(blob)
        elif path.suffix == ".json":   # expected.json, tlparse.json, fix_matrix.json: read gzip-compressed
            target.with_name(target.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), 9, mtime=0))
        else:
            shutil.copyfile(path, target)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
