"""Lending from the borrower's side in tests: the reference borrower in a subprocess, and raw calls.

The grant link goes to the borrower on stdin, never on its command line (the
secrets audit looks at every command line).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support import port_blocks
from tests.support.headless import REPO, HeadlessHost

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_lend_port() -> int:
    """A port free now that no other test holds, of this suite or one beside it (outside every
    test's node port range; tests/support/port_blocks.py)."""
    return port_blocks.single()


def create_grant(host: HeadlessHost, **body) -> dict:
    status, grant = host.api("POST", "/api/grants", body or {"label": "friends"})
    assert status == 201, grant
    return grant


def borrow(link: str, party: str, key: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -m cadre_desktop.node.cadre.borrow` with the link on stdin; --json output."""
    return subprocess.run(
        [sys.executable, "-m", "cadre_desktop.node.cadre.borrow", "--party", party, "--key", str(key), "--json", *args],
        input=link, capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )


def lend_call(link: str, method: str, path: str = "", body=None, token: str | None = None) -> tuple[int, dict]:
    """One lend API call under the grant of `link` (its own token unless `token` is given)."""
    url = urllib.parse.urlsplit(link)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{url.netloc}{url.path}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {token if token is not None else url.fragment}",
                                          "Content-Type": "application/json"})
    try:
        with _NO_PROXY.open(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")
