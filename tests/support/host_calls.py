"""Control-API calls to a host that may be SIGKILLed mid-request, and node-side calls.

`call` tells "the host answered" apart from "the answer was lost" (None), which
is what a crash test needs to know which mutations were acknowledged.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from tests.support.headless import HeadlessHost
from tests.support.polling import wait_until

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(host: HeadlessHost, method: str, path: str, body: dict | None = None,
         timeout: float = 30) -> tuple[int, dict] | None:
    """(status, JSON body), or None when the host died before it answered."""
    try:
        ctl = host.control
    except (OSError, ValueError):
        return None
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(ctl["url"] + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {ctl['token']}",
                                          "Content-Type": "application/json"})
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
    except OSError:
        # Lost: fine only if the host is dead (or dying: the SIGKILL may be in flight).
        proc = host.proc
        assert proc is not None, "a call to a host that was never started"
        wait_until(lambda: proc.poll() is not None, timeout=5,
                   what="the host to be dead after a lost answer (else it hung)")
        return None


def answered(host: HeadlessHost, method: str, path: str, body: dict | None = None,
             timeout: float = 30) -> tuple[int, dict]:
    """`call` to a host the test expects to stay up: its (status, JSON body), never a lost answer."""
    answer = call(host, method, path, body, timeout)
    assert answer is not None, f"{method} {path}: the host died before it answered"
    return answer


def post_json(url: str, body: dict, token: str | None = None, timeout: float = 10) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def claim_secret_of(view: dict) -> str | None:
    url = view.get("claim_url")
    return urllib.parse.urlsplit(url).fragment if url else None


def claim(view: dict, cadre: str) -> tuple[int, dict]:
    """Claim a node the way a phone does with its QR code."""
    parts = urllib.parse.urlsplit(view["claim_url"])
    return post_json(f"http://{parts.netloc}/claim", {"secret": parts.fragment, "cadre": cadre})


def running(host: HeadlessHost, node_id: str, timeout: float = 20, not_pid: int | None = None) -> dict:
    """The node's view once it runs and answers (with a pid other than `not_pid`)."""
    def check():
        answer = call(host, "GET", f"/api/nodes/{node_id}")
        assert answer is not None, "the host died"
        view = answer[1]
        return view if answer[0] == 200 and view["ready"] and view["pid"] != not_pid else None
    return wait_until(check, timeout=timeout, interval=0.05, what=f"node {node_id} running and ready")
