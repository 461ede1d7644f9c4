"""Reading one input file safely: regular files only, never blocking, never more than a size cap. Every reader of
an input file (traces, compile logs, run files, Flight Recorder dumps, compile configs) goes through
:func:`read_regular`, so every refusal reads the same.

:func:`read_regular` opens with ``O_NONBLOCK`` (a FIFO with no writer cannot block the open) and checks the opened
file with ``fstat`` (no race between the check and the read): a FIFO, socket, device (``/dev/zero``) or folder is
refused with one line naming the file. A file over the cap is refused, or read in part: its first or last ``limit``
bytes (a log whose end matters, such as ``fatal.txt``).

Example:
    >>> got = read_regular("run/rank0/hang/fatal.txt", 1 << 20, what="fatal.txt", keep="tail")  # doctest: +SKIP
    >>> got.truncated, len(got.data) <= 1 << 20                                                    # doctest: +SKIP
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from workbench.errors import TraceError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What :func:`read_regular` read: ``data``, the file's ``size`` when opened, and whether ``data`` is a part."""

    data: bytes
    size: int
    truncated: bool


def size_text(n: int) -> str:
    """``n`` bytes for a person: ``1 MiB``, ``512 MiB``, ``3,000 bytes``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def read_regular(path: str | Path, limit: int, *, what: str = "file",
                 keep: Literal["refuse", "head", "tail"] = "refuse") -> ReadResult:
    """The bytes of the regular file ``path``, at most ``limit`` of them; :class:`TraceError` naming the file when
    it is not a regular file, cannot be read, or (``keep="refuse"``) is larger than ``limit``.

    ``keep="head"`` / ``"tail"``: a larger file is read in part (its first / last ``limit`` bytes; a tail starts
    after the first line break in it, so no line is cut) and ``truncated`` is set.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc}): the {what} is not found") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise TraceError(path, f"{kind}, not a file: a {what} is read only from a regular file")
        size = st.st_size
        start, want = 0, size
        if size > limit:
            if keep == "refuse":
                raise TraceError(path, f"{size:,} bytes: larger than the {size_text(limit)} a {what} may have "
                                       "(not read)")
            want = limit
            start = size - limit if keep == "tail" else 0
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        chunks: list[bytes] = []
        got = 0
        while got < want:
            chunk = os.read(fd, min(want - got, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise TraceError(path, f"cannot read the file ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    truncated = size > limit
    if truncated and keep == "tail":
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data
    return ReadResult(data, size, truncated)
