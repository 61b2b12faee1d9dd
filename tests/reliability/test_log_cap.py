"""A node that logs far too much never fills the disk: its log is capped as it is written.

The cap used to be applied at spawn and once per sweep, so a node writing
10 MB/s grew its log to 600 MB in a minute. The node here writes the same
600 MB (CHATTY_BYTES; at CHATTY_RATE bytes/s, by default as fast as it can,
so the test takes seconds rather than a minute) while the test samples the
log and its rotation on disk: together they never exceed twice the cap (1 MiB
each), both are 0600, the node keeps running and its last line arrives.
"""

from __future__ import annotations

import os
import sys
import time

from cadre_desktop.host.local.nodelogs import LOG_CAP_BYTES
from tests.support.headless import REPO, host_settings
from tests.support.host_calls import answered, running
from tests.support.polling import wait_until

CHATTY = [sys.executable, str(REPO / "tests" / "support" / "chatty_node.py")]


def on_disk(path) -> tuple[int, bytes]:
    """Bytes the log and its rotation take, and the log's last bytes (a rotation may be mid-way)."""
    total, tail = 0, b""
    for each in (path, path.with_name(path.name + ".1")):
        try:
            total += each.stat().st_size
        except FileNotFoundError:
            continue
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - 64))
            tail = fh.read()
    except FileNotFoundError:
        pass
    return total, tail


def test_a_node_writing_600_mb_never_has_more_than_twice_the_cap_on_disk(hosts, rng, monkeypatch):
    monkeypatch.setenv("CHATTY_BYTES", os.environ.get("CHATTY_BYTES", "600000000"))
    monkeypatch.setenv("CHATTY_RATE", os.environ.get("CHATTY_RATE", "0"))
    host = hosts(host_settings(rng, node_command=CHATTY))
    host.env.update(CHATTY_BYTES=os.environ["CHATTY_BYTES"], CHATTY_RATE=os.environ["CHATTY_RATE"])
    host.start()
    node_id = answered(host, "POST", "/api/nodes", {"name": "chatty"})[1]["id"]
    view = running(host, node_id, timeout=30)
    log = host.home / "logs" / f"node-{node_id}.log"
    peak = samples = 0
    started = time.monotonic()

    def done() -> bool:
        nonlocal peak, samples
        total, tail = on_disk(log)
        peak, samples = max(peak, total), samples + 1
        return b"chatty: done" in tail
    wait_until(done, timeout=300, interval=0.005, what="the node's last line")
    print(f"{int(os.environ['CHATTY_BYTES']) / 1e6:.0f} MB in {time.monotonic() - started:.1f} s, "
          f"{samples} samples, peak {peak} bytes on disk")
    assert peak <= 2 * LOG_CAP_BYTES, f"the logs took {peak} bytes on disk"
    for each in (log, log.with_name(log.name + ".1")):
        assert each.stat().st_mode & 0o777 == 0o600
    after = answered(host, "GET", f"/api/nodes/{node_id}")[1]
    assert after["running"] and after["pid"] == view["pid"], "the chatty node was restarted"
