"""On a full disk, a view shows what runs, and why the records do not say so yet.

A node respawned while the records could not be saved used to show as not
running, with no error: its record still named the dead child. The view now
shows the live child (running, its pid and ports) and the save error; once
there is room again the records catch up and the error goes.
"""

from __future__ import annotations

import json
import os
import signal

from tests.support.headless import host_settings
from tests.support.host_calls import answered, running
from tests.support.instrumented_host import FULL_ENV, InstrumentedHost
from tests.support.polling import wait_until


def test_a_node_respawned_on_a_full_disk_shows_running_with_the_save_error(tmp_path, hosts, rng):
    host = hosts(host_settings(rng), kind=InstrumentedHost)
    flag = tmp_path / "disk-full"
    host.env[FULL_ENV] = str(flag)
    host.start()
    node_id = answered(host, "POST", "/api/nodes", {"name": "unsaved"})[1]["id"]
    before = running(host, node_id)
    named = records_of(host)["nodes"][node_id]["handle"]
    flag.touch()
    os.kill(before["pid"], signal.SIGKILL)

    def shown_live() -> dict | None:
        view = answered(host, "GET", f"/api/nodes/{node_id}")[1]
        return view if view["running"] and view["pid"] not in (None, before["pid"]) else None
    view = wait_until(shown_live, timeout=20, interval=0.05, what="the respawned node shown running")
    assert "not saved" in view["last_error"] and "No space left on device" in view["last_error"], view
    listed = answered(host, "GET", "/api/nodes")[1]["nodes"]
    assert [n["pid"] for n in listed if n["id"] == node_id] == [view["pid"]]
    assert records_of(host)["nodes"][node_id]["handle"] == named, "the full disk let a write through"

    flag.unlink()
    wait_until(lambda: not (answered(host, "GET", f"/api/nodes/{node_id}")[1]["last_error"] or "").count("not saved"),
               timeout=20, interval=0.1, what="the records to catch up")
    after = answered(host, "GET", f"/api/nodes/{node_id}")[1]
    assert after["running"] and after["pid"] == view["pid"], "catching up must not restart the node"
    assert records_of(host)["nodes"][node_id]["handle"] != named, "the records never caught up"
    assert host.stop() == 0


def records_of(host) -> dict:
    return json.loads((host.home / "hosted-nodes.json").read_text())
