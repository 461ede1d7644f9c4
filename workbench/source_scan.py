"""The typed record of ``run.json``'s ``source_sites``: the lines of the user's training script a code fix is about.

The collector writes it (:mod:`workbench.collectors.source_sites` finds the lines); the recommendations read it
back (:meth:`SourceScan.from_json`) to name the line each code fix is about. Standard library only: the collector
imports it in the training process, where the analysis stack (polars) may be absent.

Example:
    >>> scan = SourceScan.from_json({"file": "/x/train.py", "line": 9,
    ...                              "sites": [{"file": "/x/train.py", "line": 4, "kind": "ddp", "snippet": "DDP(m)"}]})
    >>> [(s.kind, s.location) for s in scan.of("ddp")], scan.filename
    ([('ddp', '/x/train.py:4')], 'train.py')
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

#: The longest snippet kept (the source line, whitespace collapsed).
SNIPPET_CHARS = 120
#: What a site is.
KINDS = ("loop", "batch_fetch", "step", "dataloader", "ddp", "fsdp", "compile", "collective", "pipeline_schedule",
         "microbatch_count", "h2d_copy", "pin_memory", "config_set", "sync_call", "optimizer", "optimizer_step")


@dataclass(frozen=True)
class SourceSite:
    """One line of the user's script: ``kind`` (one of :data:`KINDS`), its source text and what matters in it
    (``detail``, e.g. ``pin_memory not set``, ``blocking``, ``n_microbatches=MICROBATCHES``)."""

    file: str
    line: int
    kind: str
    snippet: str
    detail: str = ""
    in_loop: bool = False            # runs every step: in the loop around the step (or the function entering it)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class SourceScan:
    """What was found in the file that runs ``with collector.step():`` (``line``: that statement)."""

    file: str | None
    line: int | None
    sites: tuple[SourceSite, ...] = ()
    note: str | None = None          # why there are no sites (unreadable file, exec'd code, ...)

    @property
    def filename(self) -> str:
        return os.path.basename(self.file) if self.file else "the training script"

    def of(self, *kinds: str) -> list[SourceSite]:
        """The sites of ``kinds``, in file order."""
        return [s for s in self.sites if s.kind in kinds]

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "sites": [asdict(s) for s in self.sites], "note": self.note}

    @classmethod
    def from_json(cls, d: Any) -> SourceScan | None:
        """The scan recorded in ``run.json`` (``source_sites``); None when absent or not a scan. Sites with a wrong
        field type are dropped (the others kept)."""
        if not isinstance(d, dict):
            return None
        sites = []
        for s in d.get("sites") or ():
            if (isinstance(s, dict) and isinstance(s.get("file"), str) and isinstance(s.get("line"), int)
                    and s.get("kind") in KINDS and isinstance(s.get("snippet"), str)):
                sites.append(SourceSite(s["file"], s["line"], s["kind"], s["snippet"][:SNIPPET_CHARS],
                                        str(s.get("detail") or "")[:SNIPPET_CHARS], s.get("in_loop") is True))
        file, line, note = d.get("file"), d.get("line"), d.get("note")
        return cls(file if isinstance(file, str) else None, line if isinstance(line, int) else None,
                   tuple(sites), note if isinstance(note, str) else None)
