"""What counts as communication: the one definition, by event name, for ingest and the analyses.

Device activity is classified once, at ingest (``kernel_class`` of KERNELS, :mod:`workbench.kineto`): a kernel is
``communication`` when its name matches :data:`COMM_KERNEL_RE` or it was launched by a ``record_param_comms`` op
(the collective's external id). Analyses read that column; the names below are for what has no class — host-side
ranges of a CPU run, and the point-to-point subset of communication.

* :data:`COMM_KERNEL_RE` — communication kernels: NCCL (``ncclDevKernel_*``, older ``ncclKernel_*``), RCCL, and the
  one-rank reduce kernels NCCL runs for a world of one.
* :data:`COMM_CALL` — the host op that records a collective's arguments (``record_param_comms``).
* :data:`GLOO_OP_RE` — gloo's collective ranges (``gloo:all_reduce``: group 1 is the collective).
* :func:`is_collective_range` — host ranges that *execute* a collective (``gloo:*``, ``nccl:*``);
  :func:`is_comm_host_op` — any host op that issues or executes communication (those, ``c10d::*`` and
  ``record_param_comms``); :func:`is_p2p_kernel` — point-to-point communication kernels (send / recv);
  :func:`is_p2p_call_range` — host ranges where a thread is in a point-to-point call (a pipeline stage's
  receive wait or send call);
  :func:`is_p2p_range` — host send / receive ranges.

Example:
    >>> import polars as pl
    >>> names = pl.DataFrame({"name": ["gloo:all_reduce", "gloo:recv", "aten::mm", "c10d::allreduce_"]})
    >>> names.select(is_collective_range(pl.col("name")) & ~is_p2p_range(pl.col("name")))["name"].to_list()
    [True, False, False, False]
"""

from __future__ import annotations

import polars as pl

COMM_KERNEL_RE = r"(?i)^(nccl|rccl)|ncclDevKernel|ncclKernel|rcclKernel|onerank"
COMM_CALL = "record_param_comms"
GLOO_OP_RE = r"^gloo:(.+)$"
_COLLECTIVE_RANGE_RE = r"^(gloo:|nccl:)"
_COMM_HOST_OP_RE = r"^(gloo:|nccl:|c10d::|record_param_comms)"
_P2P_KERNEL_RE = r"(?i)sendrecv|_send|_recv"
_P2P_RANGE_RE = r"(send|recv)$"
_P2P_CALL_RANGE_RE = r"(?i)^(gloo|nccl):recv|^c10d::(recv|send)"


def _s(name: pl.Expr) -> pl.Expr:
    return name.cast(pl.String)


def is_comm_kernel_name(name: pl.Expr) -> pl.Expr:
    """A device kernel whose name says it communicates (:data:`COMM_KERNEL_RE`)."""
    return _s(name).str.contains(COMM_KERNEL_RE)


def is_collective_range(name: pl.Expr) -> pl.Expr:
    """A host range during which a collective executes (``gloo:*`` / ``nccl:*``)."""
    return _s(name).str.contains(_COLLECTIVE_RANGE_RE)


def is_comm_host_op(name: pl.Expr) -> pl.Expr:
    """A host op that issues or executes communication (``gloo:*``, ``nccl:*``, ``c10d::*``, ``record_param_comms``)."""
    return _s(name).str.contains(_COMM_HOST_OP_RE)


def is_p2p_kernel(name: pl.Expr) -> pl.Expr:
    """A communication kernel that sends or receives point to point (read it with ``kernel_class`` =
    ``communication``)."""
    return _s(name).str.contains(_P2P_KERNEL_RE)


def is_p2p_range(name: pl.Expr) -> pl.Expr:
    """A host communication range that is a point-to-point send or receive (``gloo:send``, ``nccl:recv``)."""
    return _s(name).str.contains(_P2P_RANGE_RE)


def is_p2p_call_range(name: pl.Expr) -> pl.Expr:
    """A host range where the thread is in a point-to-point call: a receive wait (``gloo:recv``, ``nccl:recv``,
    ``c10d::recv_``) or a send call (``c10d::send``), not the asynchronous ``gloo:send`` range, which runs on
    under the compute."""
    return _s(name).str.contains(_P2P_CALL_RANGE_RE)


__all__ = ["COMM_CALL", "COMM_KERNEL_RE", "GLOO_OP_RE", "is_collective_range", "is_comm_host_op",
           "is_comm_kernel_name", "is_p2p_kernel", "is_p2p_range", "is_p2p_call_range"]
