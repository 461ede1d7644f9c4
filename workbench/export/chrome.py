"""The Chrome JSON trace (``chrome://tracing``, Perfetto, and the workbench's own Kineto reader), streamed.

The document is written in pieces: the header (``baseTimeNanoseconds``, the origin every ``ts`` is counted from, as
Kineto does), then ``traceEvents`` one rank at a time, then the ``workbench`` metadata. ``ts`` and ``dur`` are µs
with three decimals relative to that origin, so float64 holds them to the nanosecond. Each track is a thread of the
rank's process (``tid`` numbered across the file so no two processes share one), named by a ``thread_name``
metadata event and ordered by ``thread_sort_index``. Flows are version-1 flow events: ``s`` at the start of the wait,
``f`` (binding to the enclosing slice) at the start of the activity waited for.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import orjson

from workbench.export.model import FINDINGS_PID, INSTANT, FindingsTrace, RankTrace

_OPT = orjson.OPT_NON_STR_KEYS


class ChromeWriter:
    """Writes the JSON document to ``fh`` piece by piece; ``base_ns`` must be at or before every exported time."""

    def __init__(self, fh: BinaryIO, base_ns: int, name: str) -> None:
        self.fh = fh
        self.base = base_ns
        self.bytes = 0
        self.events = 0
        self.next_tid = 1
        self._first = True
        head = {"schemaVersion": 1, "traceName": name, "displayTimeUnit": "ns", "baseTimeNanoseconds": base_ns}
        self._put(orjson.dumps(head)[:-1] + b',\n"traceEvents":[\n')

    def _put(self, blob: bytes) -> None:
        self.fh.write(blob)
        self.bytes += len(blob)

    def _events(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        body = b",\n".join(orjson.dumps(e, option=_OPT, default=str) for e in events)
        self._put(body if self._first else b",\n" + body)
        self._first = False
        self.events += len(events)

    def _us(self, t: int) -> float:
        return (t - self.base) / 1000

    def _tracks(self, pid: int, pname: str, labels: list[str], sort: int, names: list[str]) -> list[int]:
        meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": pname}},
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}}]
        if labels:
            meta.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                         "args": {"labels": ", ".join(labels)}})
        tids = list(range(self.next_tid, self.next_tid + len(names)))
        self.next_tid += len(names)
        for k, (tid, name) in enumerate(zip(tids, names)):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": k}})
        self._events(meta)
        return tids

    def rank(self, rt: RankTrace) -> None:
        tids = self._tracks(rt.pid, rt.name, rt.labels, rt.rank, rt.tracks)
        out: list[dict[str, Any]] = []
        us = self._us
        pid = rt.pid
        for t, name, cat, s, e, kind, args, flows in zip(rt.track, rt.names, rt.cats, rt.starts, rt.ends, rt.kinds,
                                                          rt.args, rt.flows):
            tid = tids[t]
            ev: dict[str, Any]
            if kind == INSTANT:
                ev = {"ph": "i", "s": "t", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us(s)}
            else:
                ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us(s), "dur": (e - s) / 1000}
            if args:
                ev["args"] = args
            out.append(ev)
            if flows:
                src = cat == "workbench.wait"
                for fid in flows:
                    fl = {"ph": "s" if src else "f", "id": fid, "cat": "workbench.flow", "name": "wait", "pid": pid,
                          "tid": tid, "ts": us(s)}
                    if not src:
                        fl["bp"] = "e"
                    out.append(fl)
            if len(out) >= 4096:
                self._events(out)
                out = []
        self._events(out)

    def findings(self, ft: FindingsTrace) -> None:
        tids = self._tracks(FINDINGS_PID, "workbench findings", [], -1, [n for n, _ in ft.tracks])
        self._events([{"ph": "X", "cat": "workbench.finding", "name": name, "pid": FINDINGS_PID, "tid": tids[t],
                       "ts": self._us(s), "dur": (e - s) / 1000, "args": args}
                      for t, name, s, e, args in zip(ft.track, ft.names, ft.starts, ft.ends, ft.args)])

    def close(self, metadata: dict[str, Any]) -> None:
        self._put(b'\n],\n"workbench":' + orjson.dumps(metadata, option=_OPT, default=str) + b"}\n")


__all__ = ["ChromeWriter"]
