"""The fault zoo: small planted-fault training scripts with their ground truth (``docs/faults.md``).

A separate distribution (``workbench-zoo``, ``pip install -e ./zoo``) beside the workbench: the core wheel ships no
fault scripts. With it installed, ``workbench faults ...`` runs this package's command line
(``python -m workbench_zoo``).

Convention (one fault = one module of :mod:`workbench_zoo.faults`; hang faults are ``hang_*.py``)
--------------------------------------------------------------------------------------------------
A fault is a module ``workbench_zoo/faults/<name>.py`` that defines two things:

``FAULT = Fault(...)``
    its name (the module name), a one-line description, the world size, the planted ranks and steps, the finding
    kind the analyses should report (``finding``), how it is fixed (``fix``: ``"config"``, ``"code"`` or
    ``"none"``), the device it needs (``"cpu"`` or ``"cuda"``), optional per-rank environment variables
    (``rank_env``) and a run timeout. Keyword arguments with literal values only: the registry reads them from
    the source without running the script, so listing the zoo imports no torch.

``def main(ctx: FaultContext) -> None``
    the training loop, run on every rank (gloo on CPU; the runner initialises ``torch.distributed``). It records
    with ``ctx.collector()`` — the plain README surface — and measures what the fault costs with its OWN timers
    (``with ctx.timed("allreduce"):`` inside a step, ``ctx.note(key, value)``); it never reads the workbench's
    analyses.

Optionally ``def ground_truth(ranks: dict[int, RankRecord], fault: Fault) -> dict`` turns the ranks' own
measurements into the run's ground truth (``fault``, ``ranks``, ``steps``, ``cost_ns``, ``cost_method``); the default
(:func:`workbench_zoo.truth.default_ground_truth`) takes the planted ranks and steps and the healthy ranks'
step-time excess in the planted steps. The runner writes it to ``<run>/ground_truth.json`` beside ``run.json``
after every rank has exited (so a rank that was killed or hung still leaves a ground truth).

Modules of :mod:`workbench_zoo.faults` whose names start with ``_`` are pieces the scripts share (a loop several
faults run, a tiny model), not faults. A module registers itself by being in that package
(:func:`workbench_zoo.registry.faults`). Run one with ``workbench faults run NAME --out DIR`` or
``python -m workbench_zoo run NAME --out DIR``; list them with ``... list``.

Only the fault scripts and the pieces they share import torch at the top; the registry, runner, launcher, truth and
verifier import without it (the runner and launcher also without polars: a GPU machine records with them alone).
"""

from workbench_zoo.registry import Fault, FaultContext, RankRecord, faults, get_fault

__all__ = ["Fault", "FaultContext", "RankRecord", "faults", "get_fault"]
