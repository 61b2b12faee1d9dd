"""The control API of a real headless host refuses every request it must, and nothing happens.

Every endpoint is tried with no token, a wrong token, another scheme, the right
token in the URL, and the right token from a web page (an Origin, a cross-site
fetch, a rebound DNS name in Host). Each must be refused with a JSON error and
no CORS grant, and must change nothing: the records, the node's process and its
claim code stay as they were. The API must listen on loopback only.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.support.headless import HeadlessHost, host_settings
from tests.support.host_calls import answered, running
from tests.support.node_scan import kill_node_processes, node_processes

ENDPOINTS = [("GET", "/api/nodes"), ("POST", "/api/nodes"), ("POST", "/api/nodes/join"),
             ("GET", "/api/nodes/{id}"), ("POST", "/api/nodes/{id}/restart"),
             ("POST", "/api/nodes/{id}/regenerate"), ("POST", "/api/nodes/{id}/retry"),
             ("DELETE", "/api/nodes/{id}"), ("GET", "/api/events"), ("GET", "/api/host")]
ATTACKS = {
    "no token": (401, lambda t, port: ({}, "")),
    "wrong token": (401, lambda t, port: ({"Authorization": "Bearer " + "x" * len(t)}, "")),
    "token with another scheme": (401, lambda t, port: ({"Authorization": f"Basic {t}"}, "")),
    "token in the URL": (400, lambda t, port: ({}, f"?token={t}")),
    "token in the URL and the header": (400, lambda t, port: ({"Authorization": f"Bearer {t}"},
                                                               f"?access_token={t}")),
    "a web page's Origin": (403, lambda t, port: ({"Authorization": f"Bearer {t}",
                                                   "Origin": "http://evil.example"}, "")),
    "a sandboxed page's null Origin": (403, lambda t, port: ({"Authorization": f"Bearer {t}", "Origin": "null"}, "")),
    "a cross-site fetch": (403, lambda t, port: ({"Authorization": f"Bearer {t}", "Sec-Fetch-Site": "cross-site"}, "")),
    "a rebound DNS name": (403, lambda t, port: ({"Authorization": f"Bearer {t}",
                                                  "Host": f"evil.example:{port}"}, "")),
}


class GuardedHost(HeadlessHost):
    node_view: dict  # its one node's view, running


@pytest.fixture(scope="module")
def served(tmp_path_factory, secret_service):
    import random

    home = tmp_path_factory.mktemp("guard") / "home"
    host = GuardedHost(home, secret_service, host_settings(random.Random()))
    host.start()
    status, view = answered(host, "POST", "/api/nodes", {"name": "guarded"})
    assert status == 201, view
    host.node_view = running(host, view["id"])
    yield host
    host.stop()
    kill_node_processes(home)


def send(port: int, method: str, path: str, headers: dict, body: bytes | None) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
        for key, value in headers.items():
            conn.putheader(key, value)
        if body is not None:
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_endpoint_refuses_the_attack_and_nothing_changes(served, attack):
    ctl = served.control
    port = int(ctl["url"].rsplit(":", 1)[1])
    records = (served.home / "hosted-nodes.json").read_bytes()
    node = served.node_view
    expected, make = ATTACKS[attack]
    for method, template in ENDPOINTS:
        path = template.format(id=node["id"])
        headers, query = make(ctl["token"], port)
        body = json.dumps({"invitation": "cadre-inv1.x"} if path.endswith("join") else {}).encode() \
            if method == "POST" else None
        status, data, got = send(port, method, path + query, headers, body)
        assert status == expected, (method, path, status, data)
        assert set(json.loads(data)) == {"error"}, data
        assert "access-control-allow-origin" not in got
    assert (served.home / "hosted-nodes.json").read_bytes() == records, "a refused request changed the records"
    after = served.node(node["id"])
    assert after["pid"] == node["pid"] and after["claim_url"] == node["claim_url"]
    assert list(node_processes(served.home)) == [node["id"]]


def test_a_browser_preflight_and_a_simple_cross_site_post_get_nothing(served):
    ctl = served.control
    port = int(ctl["url"].rsplit(":", 1)[1])
    status, _, got = send(port, "OPTIONS", "/api/nodes", {
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization"}, None)
    assert status in (401, 403, 405) and "access-control-allow-origin" not in got
    # A form post needs no preflight: text/plain, from a page, even if the page knew the token.
    status, _, got = send(port, "POST", "/api/nodes", {"Origin": "http://evil.example",
                                                       "Authorization": f"Bearer {ctl['token']}",
                                                       "Sec-Fetch-Site": "cross-site"}, b"{}")
    assert status == 403 and "access-control-allow-origin" not in got
    assert len(served.api("GET", "/api/nodes")[1]["nodes"]) == 1


def test_it_listens_on_loopback_only_and_keeps_its_token_private(served):
    ctl = served.control
    assert ctl["url"].startswith("http://127.0.0.1:")
    port = int(ctl["url"].rsplit(":", 1)[1])
    listening = [c.laddr for c in psutil.Process(served.proc.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(addr.ip in ("127.0.0.1", "::1") for addr in listening), listening
    others = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    for address in others:
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=2).close()
    assert (served.home / "control.json").stat().st_mode & 0o777 == 0o600


def test_cli_refuses_to_send_the_token_to_a_control_file_that_is_not_loopback(tmp_path):
    """A control.json planted to point elsewhere must not make the CLI hand the token over."""
    home = tmp_path / "home"
    home.mkdir()
    catcher = socket.socket()
    catcher.bind(("0.0.0.0", 0))
    catcher.listen(1)
    catcher.settimeout(0.5)
    port = catcher.getsockname()[1]
    (home / "control.json").write_text(json.dumps({"version": 1, "url": f"http://localhost.evil:{port}",
                                                   "token": "secret-token", "pid": os.getpid()}))
    env = {**os.environ, "CADRE_DESKTOP_HOME": str(home),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run([sys.executable, "-m", "cadre_desktop", "node", "list"], env=env,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 3 and "non-loopback" in result.stderr, result.stderr
    with pytest.raises(OSError):
        catcher.accept()
    catcher.close()
