"""Requests the app answers: only those addressed to the host it serves, and state-changing ones only from its own
pages (a page on another site, or on another port of this machine, can't drive Apply).

A page on another site can make the browser send requests to ``127.0.0.1:8050`` under its own name (DNS
rebinding); such a request carries that site's name in ``Host``. The app answers only ``Host`` values naming the
address it serves (the localhost names by default, plus ``--allow-host`` names). A state-changing request (every
Dash callback is a POST) must come from the app's own origin: its ``Origin``, when sent, must be the same scheme,
host and port as the address the request reached (``http://127.0.0.1:8050`` — a page served on
``http://127.0.0.1:9999`` is another origin), and a browser's ``Sec-Fetch-Site`` must say ``same-origin``.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

LOCAL_NAMES: frozenset[str] = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
WILDCARD_BINDS: frozenset[str] = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


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


def served_origin(scheme: str, host: str | None) -> tuple[str, str, int] | None:
    """(scheme, host name, port) of the address a request reached: its scheme and ``Host`` header (the port
    defaults to the scheme's); None when ``Host`` is not a usable address."""
    name = host_name(host)
    if not name or host is None:
        return None
    rest = host.strip()[len(name):]
    scheme = scheme.lower()
    if not rest:
        return scheme, name, _DEFAULT_PORTS.get(scheme, 0)
    if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
        return None
    return scheme, name, int(rest[1:])


def origin_parts(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host name, port) of an ``Origin`` header (``http://[::1]:8050`` → ``("http", "[::1]", 8050)``);
    None for ``null`` or anything that is not a scheme://host[:port] origin."""
    try:
        u = urlsplit(origin.strip())
        port = u.port
    except ValueError:
        return None
    if u.scheme.lower() not in _DEFAULT_PORTS or not u.hostname or u.path not in ("", "/") or u.query or u.username:
        return None
    name = f"[{u.hostname}]" if ":" in u.hostname else u.hostname.lower()
    return u.scheme.lower(), name, port if port is not None else _DEFAULT_PORTS[u.scheme.lower()]


def refusal(host: str | None, origin: str | None, method: str, allowed: frozenset[str], *, scheme: str = "http",
            fetch_site: str | None = None) -> str | None:
    """Why a request must be refused (one line), or None when it may be answered.

    ``host``, ``origin``, ``fetch_site``: its ``Host``, ``Origin`` and ``Sec-Fetch-Site`` headers; ``scheme``: the
    scheme it arrived by."""
    name = host_name(host)
    if name not in allowed:
        return f"Host {host!r} is not an address this app serves (allowed: {', '.join(sorted(allowed))})"
    if method.upper() in SAFE_METHODS:
        return None
    if fetch_site is not None and fetch_site.strip().lower() not in ("same-origin", "none"):
        return f"a {fetch_site.strip()!r} request (Sec-Fetch-Site): only this app's own pages may change anything"
    if origin is not None:
        served = served_origin(scheme, host)
        if served is None or origin_parts(origin) != served:
            where = f"{served[0]}://{served[1]}:{served[2]}" if served else repr(host)
            return f"Origin {origin!r} is not this app's origin ({where}): only its own pages may change anything"
    return None


def install(server, allowed: frozenset[str]) -> None:
    """Refuse (403, one line) every request of the Flask ``server`` that :func:`refusal` rejects."""
    from flask import request

    @server.before_request
    def _check_host():  # noqa: ANN202 - Flask hook
        problem = refusal(request.headers.get("Host"), request.headers.get("Origin"), request.method, allowed,
                          scheme=request.scheme, fetch_site=request.headers.get("Sec-Fetch-Site"))
        if problem:
            return problem + "\n", 403, {"Content-Type": "text/plain; charset=utf-8"}
        return None
