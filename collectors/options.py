"""Options of :class:`~workbench.collectors.Collector`, validated once with ``ValueError``.

Example:
    >>> CollectorOptions(profile_start=2, profile_length=2).windows(10)
    [(2, 3)]
    >>> CollectorOptions(profile_repeat=0).windows(100)
    []
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Activity = Literal["cpu", "cuda"]
ACTIVITIES: tuple[str, ...] = ("cpu", "cuda")

#: Environment variable naming a compile-config TOML file when ``compile_config`` is not given.
COMPILE_CONFIG_ENV = "WORKBENCH_COMPILE_CONFIG"


@dataclass(kw_only=True, slots=True)
class CollectorOptions:
    """What the collector records. Every field has a cheap default; see ``Collector``.

    Profiler windows: window ``k`` (``0 <= k < profile_repeat``) records steps
    ``[profile_start + k*profile_every, ... + profile_length)``; the step before each window is a profiler
    warm-up step (not recorded). ``profile_repeat=0`` disables the profiler. ``profile_ranks=None``: every rank.
    """

    profile_start: int = 5
    profile_length: int = 3
    profile_repeat: int = 1
    profile_every: int = 100
    profile_ranks: tuple[int, ...] | None = None
    activities: tuple[Activity, ...] | None = None      # None: cpu, plus cuda when CUDA is available
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    with_modules: bool = False
    compile_config: str | Path | None = None            # None: $WORKBENCH_COMPILE_CONFIG if set
    allow_unsafe: bool = False                          # settings outside the config allowlist (this code's choice)
    compile_capture: bool = True                        # TORCH_TRACE-format log in rank<R>/compile/
    device_timing: bool = True                          # CUDA events (resolved later, no sync)
    device_timing_every: int = 100                      # on every n-th step (a timed step costs ~130 µs more)
    nvtx: bool = True                                   # NVTX / record_function ranges
    gc_pauses: bool = True                              # garbage collections of 1 ms or more in rank<R>/gc.jsonl
    run_id: str | None = None                           # None: $TORCHELASTIC_RUN_ID or a generated id
    extra: dict[str, object] = field(default_factory=dict)  # user metadata copied into run.json

    def __post_init__(self) -> None:
        for name in ("profile_start", "profile_length", "profile_repeat", "profile_every", "device_timing_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if self.profile_start < 0:
            raise ValueError(f"profile_start must be >= 0, got {self.profile_start}")
        if self.profile_length < 1:
            raise ValueError(f"profile_length must be >= 1, got {self.profile_length}")
        if self.device_timing_every < 1:
            raise ValueError(f"device_timing_every must be >= 1, got {self.device_timing_every}")
        if self.profile_repeat < 0:
            raise ValueError(f"profile_repeat must be >= 0 (0 disables profiling), got {self.profile_repeat}")
        if self.profile_repeat > 1 and self.profile_every < self.profile_length + 1:
            raise ValueError(
                f"profile_every ({self.profile_every}) must be at least profile_length + 1 "
                f"({self.profile_length + 1}) so windows do not overlap"
            )
        if self.profile_ranks is not None:
            ranks = tuple(self.profile_ranks)
            if any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in ranks):
                raise ValueError(f"profile_ranks must be non-negative ints, got {self.profile_ranks!r}")
            self.profile_ranks = ranks
        if self.activities is not None:
            acts = tuple(self.activities)
            bad = [a for a in acts if a not in ACTIVITIES]
            if bad or not acts:
                raise ValueError(f"activities must be a non-empty subset of {ACTIVITIES}, got {self.activities!r}")
            self.activities = acts
        if self.compile_config is None and os.environ.get(COMPILE_CONFIG_ENV):
            self.compile_config = os.environ[COMPILE_CONFIG_ENV]
        if self.compile_config is not None and not isinstance(self.compile_config, (str, Path)):
            raise ValueError(f"compile_config must be a path, got {self.compile_config!r}")
        if not isinstance(self.allow_unsafe, bool):
            raise ValueError(f"allow_unsafe must be True or False, got {self.allow_unsafe!r}")

    def profiles_rank(self, rank: int) -> bool:
        return self.profile_repeat > 0 and (self.profile_ranks is None or rank in self.profile_ranks)

    def windows(self, steps: int | None = None) -> list[tuple[int, int]]:
        """The profiled windows as inclusive ``(first, last)`` steps, cut to ``steps`` steps if given."""
        out = []
        for k in range(self.profile_repeat):
            first = self.profile_start + k * self.profile_every
            last = first + self.profile_length - 1
            if steps is not None:
                if first >= steps:
                    break
                last = min(last, steps - 1)
            out.append((first, last))
        return out

    def window_of(self, step: int) -> tuple[int, int] | None:
        """The window ``(first, last)`` that records ``step``, else None."""
        if self.profile_repeat <= 0 or step < self.profile_start:
            return None
        k = (step - self.profile_start) // self.profile_every if self.profile_repeat > 1 else 0
        if k >= self.profile_repeat:
            return None
        first = self.profile_start + k * self.profile_every
        last = first + self.profile_length - 1
        return (first, last) if first <= step <= last else None
