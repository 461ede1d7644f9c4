"""The compile-cache bundle of ``[cache] load``: read and checked by the workbench before torch sees a byte of it.

A bundle is what ``torch.compiler.save_cache_artifacts()`` returns. In torch 2.13 (``torch/compiler/_cache.py``,
``torch/utils/_appending_byte_serializer.py``) it is a binary frame, not a pickle::

    crc32 of the rest (4 bytes, big-endian) | version (uint64 = 1) | sections to the end, each:
    kind (text) | count (uint64) | count × (key (text), content (bytes))
    text = uint64 length + base64 of UTF-8; bytes = uint64 length + bytes; integers big-endian

:func:`read_bundle` parses that frame itself, bounded (no unpickling at all). What torch does with each kind when the
bundle is loaded decides what is admitted (:data:`KINDS`):

- ``autotune``: JSON best configs, written to ``<torch cache dir>/<key>``: data. Admitted when the key is a plain
  relative name and the content a JSON object.
- ``inductor`` / ``aot_autograd``: pickles of compiled graphs, unpickled at the first compile, whose generated
  Python source torch then imports: code, whatever classes the pickle names. Admitted only from a bundle the
  workbench itself saved for this user (:func:`seal`: an HMAC-SHA256 under a key kept in the user cache dir, never
  in the config's folder), so a bundle that came with a config from elsewhere cannot run code.
- ``pgo`` (a pickled code state written as the job's code-state file and unpickled at the first compile),
  ``precompile`` (Dynamo bytecode) and unknown kinds: never without the caller's opt-in.

Every key must be a plain relative name (it becomes a file name under torch's cache dir: an absolute key writes
anywhere). With the caller's ``allow_unsafe=True`` a well-formed bundle goes to torch as it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import InputError

#: What a kind of artifact is to the process that loads it: ``data``, ``code`` (own bundles only), ``refused``.
KINDS: dict[str, str] = {"autotune": "data", "inductor": "code", "aot_autograd": "code", "pgo": "refused",
                         "precompile": "refused"}
#: A key per kind: one hash-like name, or (autotune) ``<dir>/<file>`` of plain names.
_KEY = {"autotune": re.compile(r"[A-Za-z0-9_]{1,128}/[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}", re.ASCII)}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_]{1,128}", re.ASCII)
#: Largest bundle read (bytes), most sections and artifacts, largest autotune entry.
MAX_BUNDLE_BYTES = 1 << 30
MAX_SECTIONS = 64
MAX_ARTIFACTS = 100_000
MAX_DATA_ARTIFACT = 1 << 20
#: The workbench's seal in front of a bundle it saved: magic, then HMAC-SHA256 of the torch bytes.
MAGIC = b"WBCACHE1"
KEY_FILE = "compile-cache.key"


@dataclass(frozen=True)
class Artifact:
    """One artifact of a bundle: its kind, its key, and where its content lies in the torch bytes."""

    kind: str
    key: str
    start: int
    size: int


class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.i, self.where = data, 0, where

    def bad(self, why: str) -> InputError:
        return InputError(f"{self.where}: not a torch compile-cache bundle ({why} at byte {self.i})")

    def uint64(self) -> int:
        if self.i + 8 > len(self.data):
            raise self.bad("cut short")
        value = int.from_bytes(self.data[self.i:self.i + 8], "big")
        self.i += 8
        return value

    def span(self, limit: int) -> tuple[int, int]:
        size = self.uint64()
        if size > limit or self.i + size > len(self.data):
            raise self.bad(f"a length of {size} bytes runs past the end")
        start, self.i = self.i, self.i + size
        return start, size

    def text(self, limit: int = 4096) -> str:
        start, size = self.span(limit)
        try:
            return base64.b64decode(self.data[start:start + size], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise self.bad("a name that is not base64 UTF-8 text") from None


def read_bundle(data: bytes, where: str) -> list[Artifact]:
    """The artifacts of a torch 2.13 bundle (its frame checked: crc, version, lengths, counts), or InputError."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise InputError(f"{where}: {len(data)} bytes: over the {MAX_BUNDLE_BYTES}-byte limit of a cache bundle")
    r = _Reader(data, where)
    if len(data) < 12 or zlib.crc32(data[4:]).to_bytes(4, "big") != data[:4]:
        raise r.bad("checksum does not match")
    r.i = 4
    if (version := r.uint64()) != 1:
        raise r.bad(f"version {version}, torch 2.13 writes 1")
    out: list[Artifact] = []
    sections = 0
    while r.i < len(data):
        sections += 1
        kind = r.text(256)
        count = r.uint64()
        if sections > MAX_SECTIONS or len(out) + count > MAX_ARTIFACTS:
            raise r.bad(f"more than {MAX_SECTIONS} kinds or {MAX_ARTIFACTS} artifacts")
        for _ in range(count):
            key = r.text()
            start, size = r.span(len(data))
            out.append(Artifact(kind, key, start, size))
    return out


def check(blob: bytes, where: str, *, allow_unsafe: bool = False, key: bytes | None = None) -> bytes:
    """The torch bytes of ``blob`` (a bundle, sealed or not) if every artifact is admitted; else InputError naming
    the first refused artifact. ``where`` starts every message (the config file, the key, the bundle file);
    ``key``: the seal key (default: this user's, when there is one)."""
    data, sealed = unseal(blob, key if key is not None else seal_key(create=False))
    artifacts = read_bundle(data, where)
    if allow_unsafe:
        return data
    for a in artifacts:
        what = KINDS.get(a.kind)
        head = f"{where}: artifact {a.kind!r} {a.key[:80]!r}"
        if what is None:
            raise InputError(f"{head} is of a kind the workbench does not know ({', '.join(KINDS)}); "
                             f"it needs allow_unsafe=True in the caller's code")
        if what == "refused":
            raise InputError(f"{head} is a pickle or bytecode torch would load and run; "
                             f"it needs allow_unsafe=True in the caller's code")
        if not (_KEY.get(a.kind) or _PLAIN_KEY).fullmatch(a.key):
            raise InputError(f"{head}: the key is not a plain relative name (torch would write a file there)")
        if what == "code" and not sealed:
            raise InputError(f"{head} is compiled code (a pickle torch unpickles and imports), and the workbench "
                             f"did not save this bundle for you; load it with allow_unsafe=True in the caller's "
                             f"code if you trust where it came from")
        if what == "data":
            _check_json(data[a.start:a.start + a.size], head)
    return data


def _check_json(content: bytes, head: str) -> None:
    if len(content) > MAX_DATA_ARTIFACT:
        raise InputError(f"{head}: {len(content)} bytes, over {MAX_DATA_ARTIFACT}")
    try:
        value = json.loads(content)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise InputError(f"{head}: not a JSON object")


# ------------------------------------------------------------------------------------------------ the seal
def seal_key(*, create: bool) -> bytes | None:
    """This user's seal key (``<user cache dir>/compile-cache.key``, 32 random bytes, mode 0600), made when
    ``create`` and absent; None when there is none (or it cannot be read or made)."""
    from workbench.cache import user_cache_dir

    path = user_cache_dir() / KEY_FILE
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        try:
            os.link(tmp, path)          # atomic and never over another rank's key: the first one made wins
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return _read_key(path)
    except OSError:
        return None


def _read_key(path: Path) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        key = f.read(64)
    return key if len(key) == 32 else None


def seal(data: bytes, key: bytes | None) -> bytes:
    """``data`` (torch bytes) with the workbench's seal in front; unchanged without a key."""
    return data if key is None else MAGIC + hmac.new(key, data, hashlib.sha256).digest() + data


def unseal(blob: bytes, key: bytes | None) -> tuple[bytes, bool]:
    """``(torch bytes, sealed by this key)``; a blob without the seal is returned as it is, unsealed."""
    if not blob.startswith(MAGIC):
        return blob, False
    mac, data = blob[len(MAGIC):len(MAGIC) + 32], blob[len(MAGIC) + 32:]
    ok = key is not None and hmac.compare_digest(mac, hmac.new(key, data, hashlib.sha256).digest())
    return data, ok
