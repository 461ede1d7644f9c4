"""The app answers only requests addressed to the host it serves (DNS rebinding can't drive Apply)."""

from __future__ import annotations

import pytest

from workbench.app.security import allowed_hosts, host_name, refusal


def test_host_names():
    assert host_name("127.0.0.1:8050") == "127.0.0.1"
    assert host_name("[::1]:8050") == "[::1]"
    assert host_name("LocalHost") == "localhost"
    assert host_name("evil.example:80") == "evil.example"
    assert host_name(None) is None


def test_refusal_rules():
    local = allowed_hosts("127.0.0.1")
    assert refusal("127.0.0.1:8050", None, "GET", local) is None
    assert refusal("localhost:8050", "http://localhost:8050", "POST", local) is None
    assert "evil.example" in refusal("evil.example:8050", None, "GET", local)
    assert refusal(None, None, "GET", local)
    assert "Origin" in refusal("127.0.0.1:8050", "http://evil.example", "POST", local)
    wide = allowed_hosts("0.0.0.0", ["box.lan"])
    assert "0.0.0.0" not in wide and refusal("box.lan:8050", None, "GET", wide) is None


def test_the_running_app_refuses_other_hosts(repo_dir):
    pytest.importorskip("dash")
    from workbench.app.main import create_app

    app = create_app([repo_dir / "sample_traces" / "cpu-gloo-4rank"])
    client = app.server.test_client()
    assert client.get("/", headers={"Host": "127.0.0.1:8050"}).status_code == 200
    bad = client.get("/", headers={"Host": "rebind.evil.example:8050"})
    assert bad.status_code == 403 and b"rebind.evil.example" in bad.data and bad.data.count(b"\n") == 1
    post = client.post("/_dash-update-component", json={}, headers={"Host": "127.0.0.1:8050",
                                                                    "Origin": "http://rebind.evil.example"})
    assert post.status_code == 403
    app2 = create_app([repo_dir / "sample_traces" / "cpu-gloo-4rank"], bind="0.0.0.0", allow_hosts=["box.lan"])
    assert app2.server.test_client().get("/", headers={"Host": "box.lan:8050"}).status_code == 200
