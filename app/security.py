"""Requests the app answers: only those addressed to the host it serves (a DNS-rebinding page can't drive it).

A page on another site can make the browser send requests to ``127.0.0.1:8050`` under its own name (DNS
rebinding); such a request carries that site's name in ``Host``. The app answers only ``Host`` values naming the
address it serves (the localhost names by default, plus ``--allow-host`` names), and refuses a state-changing
request whose ``Origin`` names another host.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

LOCAL_NAMES: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
WILDCARD_BINDS: frozenset[str] = frozenset({"0.0.0.0", "::", ""})


def allowed_hosts(bind: str | None = None, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names (no port) the app answers: the localhost names, the bound address unless it is a wildcard,
    and ``extra``."""
    names = set(LOCAL_NAMES)
    if bind and bind not in WILDCARD_BINDS:
        names.add(bind.lower())
    names.update(h.strip().lower() for h in extra if h.strip())
    return frozenset(names)


def host_name(value: str | None) -> str | None:
    """The name part of a ``Host`` header (``[::1]:8050`` → ``[::1]``, ``a.b:80`` → ``a.b``), lower-case."""
    if not value:
        return None
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else None
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def refusal(host: str | None, origin: str | None, method: str, allowed: frozenset[str]) -> str | None:
    """Why a request must be refused (one line), or None when it may be answered."""
    name = host_name(host)
    if name not in allowed:
        return f"Host {host!r} is not an address this app serves (allowed: {', '.join(sorted(allowed))})"
    if origin and method not in ("GET", "HEAD", "OPTIONS"):
        origin_host = urlsplit(origin).hostname
        if origin_host is None or host_name(origin_host) not in allowed and f"[{origin_host}]" not in allowed:
            return f"Origin {origin!r} is not an address this app serves"
    return None


def install(server, allowed: frozenset[str]) -> None:
    """Refuse (403, one line) every request of the Flask ``server`` that :func:`refusal` rejects."""
    from flask import request

    @server.before_request
    def _check_host():  # noqa: ANN202 - Flask hook
        problem = refusal(request.headers.get("Host"), request.headers.get("Origin"), request.method, allowed)
        if problem:
            return problem + "\n", 403, {"Content-Type": "text/plain; charset=utf-8"}
        return None
