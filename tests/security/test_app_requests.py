"""Real HTTP requests against the app served on a free port: a page of another origin (another port of this
machine included) cannot drive Apply, and a run whose real path leaves the app's roots is not listed, opened or
written to; Apply never writes through a link."""

from __future__ import annotations

import http.client
import json
import logging
import shutil
import threading
from pathlib import Path

import pytest

from workbench.app.security import allowed_hosts, origin_parts, refusal, served_origin

pytest.importorskip("dash")

SAMPLE = "cpu-recompile-before"


class Server:
    """The app on 127.0.0.1:<free port>, served by werkzeug in a thread."""

    def __init__(self, dash_app) -> None:
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.app = dash_app
        self.httpd = make_server("127.0.0.1", 0, dash_app.server, threaded=True)
        self.port = self.httpd.server_port
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, path: str, body: dict | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        h = {"Host": f"127.0.0.1:{self.port}", **({"Content-Type": "application/json"} if body is not None else {}),
             **(headers or {})}
        conn.request(method, path, json.dumps(body) if body is not None else None, h)
        res = conn.getresponse()
        return res.status, res.read()

    def apply(self, run_id: str, **headers: str) -> tuple[int, bytes]:
        """The POST the Apply button sends (the Dash callback of app/page_recommendations.py)."""
        body = {"output": "..apply-result.children...apply-target.children..",
                "outputs": [{"id": "apply-result", "property": "children"},
                            {"id": "apply-target", "property": "children"}],
                "inputs": [{"id": "apply-config", "property": "n_clicks", "value": 1}],
                "changedPropIds": ["apply-config.n_clicks"],
                "state": [{"id": "url", "property": "search", "value": f"?run={run_id}"}]}
        return self.request("POST", "/_dash-update-component", body,
                            {k.replace("_", "-"): v for k, v in headers.items()})

    def close(self) -> None:
        self.httpd.shutdown()
        self.thread.join(timeout=10)


@pytest.fixture()
def layout(tmp_path, repo_dir):
    """roots/inside (a run), roots/linked → elsewhere/outside (a run outside the roots), and the server over roots."""
    from workbench.app.main import create_app

    sample = repo_dir / "sample_traces" / SAMPLE
    roots, elsewhere = tmp_path / "roots", tmp_path / "elsewhere"
    roots.mkdir()
    elsewhere.mkdir()
    ignore = shutil.ignore_patterns(".workbench", "*.toml")
    shutil.copytree(sample, roots / "inside", ignore=ignore)
    shutil.copytree(sample, elsewhere / "outside", ignore=ignore)
    (roots / "linked").symlink_to(elsewhere / "outside", target_is_directory=True)
    server = Server(create_app([roots], background=False))
    yield roots, elsewhere, server
    server.close()


def _configs(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("compile_config"))


def test_origin_must_be_this_apps_scheme_host_and_port(layout):
    roots, _, server = layout
    assert server.app.workbench_store.ids() == ["inside"]
    for origin in (f"http://127.0.0.1:{server.port + 1}", f"http://localhost:{server.port + 1}", "http://127.0.0.1",
                   f"https://127.0.0.1:{server.port}", "http://evil.example", "null", ""):
        status, body = server.apply("inside", Origin=origin)
        assert status == 403, (origin, body)
        assert b"not this app's origin" in body and body.count(b"\n") == 1
    status, body = server.apply("inside", Origin=server.origin, Sec_Fetch_Site="same-site")
    assert status == 403 and b"Sec-Fetch-Site" in body
    assert _configs(roots / "inside") == [], "a refused request wrote a config"
    status, body = server.apply("inside", Origin=server.origin, Sec_Fetch_Site="same-origin")
    assert status == 200 and b"apply-ok" in body, body[:500]
    assert _configs(roots / "inside") == ["compile_config.toml"]
    status, _ = server.request("GET", "/", headers={"Origin": f"http://127.0.0.1:{server.port + 1}"})
    assert status == 200   # reading a page is not changing anything (and another origin cannot read the answer)


def test_a_run_outside_the_roots_is_not_listed_served_or_written(layout):
    roots, elsewhere, server = layout
    store = server.app.workbench_store
    assert "linked" not in store.ids()
    assert any("linked: not listed" in n and str(elsewhere / "outside") in n for n in store.notes)
    status, body = server.request("GET", "/")
    assert status == 200 and b"linked" not in body
    status, body = server.apply("linked", Origin=server.origin)
    assert status == 200 and b"apply-error" in body
    assert _configs(elsewhere / "outside") == []


def test_a_run_swapped_for_a_link_after_listing_is_refused(layout):
    """The listed folder is replaced by a link to a run outside the roots: nothing is opened or written there."""
    roots, elsewhere, server = layout
    shutil.rmtree(roots / "inside")
    (roots / "inside").symlink_to(elsewhere / "outside", target_is_directory=True)
    status, body = server.apply("inside", Origin=server.origin)
    assert status == 200 and b"apply-error" in body and b"outside the folders the app serves" in body, body[:800]
    assert _configs(elsewhere / "outside") == []
    assert "Error" not in body.decode().replace("apply-error", "")   # no exception class name in the panel


def test_apply_never_writes_through_a_link(layout, tmp_path):
    roots, _, server = layout
    victim = tmp_path / "victim.toml"
    victim.write_text("# not yours\n")
    run = roots / "inside"
    (run / "compile_config.toml").symlink_to(victim)
    (run / "compile_config-2.toml").symlink_to(tmp_path / "dangling.toml")   # a broken link holds its name too
    status, body = server.apply("inside", Origin=server.origin)
    assert status == 200 and b"apply-ok" in body, body[:800]
    assert victim.read_text() == "# not yours\n" and not (tmp_path / "dangling.toml").exists()
    assert (run / "compile_config-3.toml").is_file() and not (run / "compile_config-3.toml").is_symlink()
    text = body.decode()
    assert "Not written through the link(s) compile_config.toml, compile_config-2.toml" in text
    assert "compile_config-3.toml" in text


def test_origin_parts_and_refusal_rules():
    assert origin_parts("http://127.0.0.1:8050") == ("http", "127.0.0.1", 8050)
    assert origin_parts("HTTP://LocalHost") == ("http", "localhost", 80)
    assert origin_parts("http://[::1]:8050") == ("http", "[::1]", 8050)
    assert origin_parts("null") is None and origin_parts("http://a:99999") is None
    assert origin_parts("http://a/b") is None and origin_parts("file:///x") is None
    assert served_origin("http", "127.0.0.1:8050") == ("http", "127.0.0.1", 8050)
    assert served_origin("http", "[::1]:8050") == ("http", "[::1]", 8050)
    assert served_origin("http", "localhost:x") is None
    local = allowed_hosts("127.0.0.1")
    assert refusal("127.0.0.1:8050", "http://127.0.0.1:8050", "POST", local) is None
    assert refusal("127.0.0.1:8050", "http://127.0.0.1:8051", "POST", local)
    assert refusal("[::1]:8050", "http://[::1]:8050", "POST", local) is None
    assert refusal("localhost:8050", "http://127.0.0.1:8050", "POST", local)   # another origin, same machine
    assert refusal("127.0.0.1:8050", None, "POST", local) is None               # no Origin: not a browser page
    assert refusal("127.0.0.1:8050", None, "POST", local, fetch_site="cross-site")
    assert refusal("127.0.0.1:8050", "http://127.0.0.1:9", "GET", local) is None
