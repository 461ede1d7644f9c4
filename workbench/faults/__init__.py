"""The fault zoo: small planted-fault training scripts with their ground truth.

Convention (one fault = one module; hang faults are ``hang_*.py``)
-----------------------------------------------------------------
A fault is a module ``workbench/faults/<name>.py`` that defines two things:

``FAULT = Fault(...)``
    its name (the module name), a one-line description, the world size, the planted ranks and steps, the finding
    kind the analyses should report (``finding``), how it is fixed (``fix``: ``"config"``, ``"code"`` or
    ``"none"``), the device it needs (``"cpu"`` or ``"cuda"``), optional per-rank environment variables
    (``rank_env``) and a run timeout.

``def main(ctx: FaultContext) -> None``
    the training loop, run on every rank (gloo on CPU; the runner initialises ``torch.distributed``). It records
    with ``ctx.collector()`` — the plain README surface — and measures what the fault costs with its OWN timers
    (``with ctx.timed("allreduce"):`` inside a step, ``ctx.note(key, value)``); it never reads the workbench's
    analyses.

Optionally ``def ground_truth(ranks: dict[int, RankRecord], fault: Fault) -> dict`` turns the ranks' own
measurements into the run's ground truth (``fault``, ``ranks``, ``steps``, ``cost_ns``, ``cost_method``); the default
(:func:`workbench.faults.truth.default_ground_truth`) takes the planted ranks and steps and the healthy ranks'
step-time excess in the planted steps. The runner writes it to ``<run>/ground_truth.json`` beside ``run.json``
after every rank has exited (so a rank that was killed or hung still leaves a ground truth).

Modules whose names start with ``_`` and the modules ``registry``, ``runner``, ``truth``, ``common``, ``verify`` are
helpers, not faults.
Modules register themselves by being in this package: :func:`workbench.faults.registry.faults` imports every
non-helper module and keeps those that define ``FAULT``. Run one with ``workbench faults run NAME --out DIR`` or
``python -m workbench.faults run NAME --out DIR``; list them with ``... faults list``.
"""

from workbench.faults.registry import Fault, FaultContext, RankRecord, faults, get_fault

__all__ = ["Fault", "FaultContext", "RankRecord", "faults", "get_fault"]
