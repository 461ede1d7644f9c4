"""Small programs the hostile corpus runs where the CLI is not the door: ``python driver.py NAME ARGS...``.

Each behaves as the CLI does towards a person: success prints JSON on stdout and exits 0; a
:class:`workbench.errors.InputError` prints ``error: <its one line>`` on stderr and exits 1; anything else is left
to escape with its traceback (the harness counts that as an internal error).

- ``load_config PATH [unsafe]``: :func:`workbench.compile_config.load_compile_config`.
- ``collector RUN CONFIG BACKEND``: ``Collector(RUN, compile_config=CONFIG)`` around two steps of a function
  compiled with ``BACKEND`` (``inductor`` runs the C++ compiler on CPU, ``eager`` does not, ``none``: no compile).
- ``open PATH``: :func:`workbench.open` and the run's summary.
- ``app_request ROOT METHOD URL HOST ORIGIN [PORT]``: one request to the app's Flask server (test client);
  prints the status and the first bytes of the body.
- ``app_store ROOT RID...``: the runs the app lists under ROOT (id, real path), then Apply on each listed run and
  on each RID (JSON strings, so a NUL can travel); prints what each Apply did.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys


def _fail(exc: BaseException) -> None:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(1)


def load_config(path: str, unsafe: str = "") -> None:
    from workbench.compile_config import load_compile_config

    cfg = load_compile_config(path, allow_unsafe=unsafe == "unsafe")
    print(json.dumps({"env": sorted(cfg.env), "unsafe_allowed": bool(cfg.unsafe_allowed)}))


def collector(run: str, config: str, backend: str) -> None:
    import torch

    from workbench.collectors import Collector

    c = Collector(run, compile_config=config, profile_repeat=0)

    def f(x):
        return (x * 2 + 1).relu().sum()

    fn = f if backend == "none" else torch.compile(f, backend=backend)
    with c:
        for n in (4, 4):
            with c.step():
                fn(torch.randn(n, 8))
    print(json.dumps({"steps": 2}))


def open_run(path: str) -> None:
    import workbench

    run = workbench.open(path, cache=False)
    print(json.dumps(run.info(), default=str))


def _app(root: str, port: int | None):
    from workbench.app.main import create_app

    kwargs = {"bind": "127.0.0.1", "background": False}
    if port is not None and "port" in inspect.signature(create_app).parameters:
        kwargs["port"] = port   # the served origin's port, where create_app takes it
    return create_app([root], **kwargs)


def app_request(root: str, method: str, url: str, host: str, origin: str, port: str = "8050") -> None:
    app = _app(root, int(port))
    client = app.server.test_client()
    headers = {"Host": host} if host != "-" else {}
    if origin != "-":
        headers["Origin"] = origin
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"}, "inputs": [],
            "changedPropIds": [], "state": []} if method == "POST" else None
    app.server.config["PROPAGATE_EXCEPTIONS"] = False   # as served: a callback that fails answers 500
    logging.disable(logging.CRITICAL)   # ... and its traceback goes to the server log, not to the requester
    res = client.open(url, method=method, headers=headers, json=body)
    print(json.dumps({"status": res.status_code, "body": res.get_data(as_text=True)[:300]}))


def app_store(root: str, *rids: str) -> None:
    from workbench.app import page_recommendations
    from workbench.app.store import RunStore

    store = RunStore([root])
    listed = [{"id": e.id, "real": os.path.realpath(e.path)} for e in store.entries]
    applied = {}
    for rid in [e["id"] for e in listed] + [json.loads(r) for r in rids]:
        try:
            path, _ = page_recommendations.apply(store, rid)
            applied[rid] = os.path.realpath(path)
        except Exception as exc:  # noqa: BLE001 - Apply refusing is what some cases want; shown, not raised
            applied[rid] = f"refused: {exc}"
    print(json.dumps({"root": os.path.realpath(root), "listed": listed, "applied": applied}))


COMMANDS = {"load_config": load_config, "collector": collector, "open": open_run, "app_request": app_request,
            "app_store": app_store}


def main() -> None:
    from workbench.errors import InputError

    name, *args = sys.argv[1:]
    try:
        COMMANDS[name](*args)
    except InputError as exc:
        _fail(exc)


if __name__ == "__main__":
    main()
