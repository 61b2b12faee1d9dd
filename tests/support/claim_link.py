"""A claim link from the outside, as a person's device uses it: claim through it, read it off a QR picture."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ZBARIMG = "/usr/bin/zbarimg"


def claim(claim_url: str, cadre: str) -> tuple[int, dict]:
    """POST /claim to the node the URL names, with the secret from its fragment."""
    parts = urllib.parse.urlsplit(claim_url)
    req = urllib.request.Request(
        f"http://{parts.netloc}/claim", data=json.dumps({"secret": parts.fragment, "cadre": cadre}).encode(),
        method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def claim_when_up(claim_url: str, cadre: str, timeout: float = 15.0) -> tuple[int, dict]:
    """`claim`, retried while nothing listens yet (a node just (re)started)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return claim(claim_url, cadre)
        except urllib.error.URLError as err:
            if time.monotonic() > deadline or not isinstance(err.reason, ConnectionRefusedError):
                raise
        time.sleep(0.05)


def read_qr(png: Path) -> list[str]:
    """Every QR code zbarimg finds in the picture (empty if none)."""
    out = subprocess.run([ZBARIMG, "--raw", "-q", "-Sdisable", "-Sqrcode.enable", str(png)],
                         capture_output=True, text=True, timeout=30)
    return [line for line in out.stdout.splitlines() if line]
