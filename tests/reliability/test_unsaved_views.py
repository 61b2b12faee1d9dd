"""On a full disk, a view shows what runs, and why the records do not say so yet.

A node respawned while the records could not be saved used to show as not
running, with no error: its record still named the dead child. The view now
shows the live child (running, its pid and ports) and the save error; once
there is room again the records catch up and the error goes. The same holds
for a lent node, in its owner's view and in its borrower's.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.support.borrower import create_grant, free_lend_port, lend_call
from tests.support.headless import host_settings
from tests.support.host_calls import answered, running
from tests.support.instrumented_host import FULL_ENV, InstrumentedHost
from tests.support.lend_rig import OWNER_KEY
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


def test_a_lent_node_respawned_on_a_full_disk_shows_running_to_owner_and_borrower(tmp_path, hosts, rng):
    host = hosts(host_settings(rng, lend_port=free_lend_port()), kind=InstrumentedHost)
    flag = tmp_path / "disk-full"
    host.env[FULL_ENV] = str(flag)
    host.start()
    link = create_grant(host, label="unsaved")["link"]
    status, asked = lend_call(link, "POST", "/donations", {"party_id": "friends", "owner_keys": [OWNER_KEY]})
    assert status == 201, asked

    def owner() -> dict:
        return answered(host, "GET", f"/api/donations/{asked['id']}")[1]
    before = wait_until(lambda: (v := owner())["status"] == "awaiting_seed" and v["running"] and v,
                        timeout=30, what="the lent node awaiting its seed")
    named = json.loads((host.home / "donations.json").read_text())["donations"][asked["id"]]["handle"]
    flag.touch()
    os.kill(before["pid"], signal.SIGKILL)
    view = wait_until(lambda: (v := owner())["running"] and v["pid"] not in (None, before["pid"]) and v,
                      timeout=20, interval=0.05, what="the respawned lent node shown running")
    assert "not saved" in view["last_error"] and "No space left on device" in view["last_error"], view
    # The respawn's write of the lent node's row ran on the host's writer thread, off its event loop.
    writers = {line.split()[1] for line in Path(f"{flag}.writes").read_text().splitlines()
               if line.startswith(".donations.json")}
    assert writers == {"cadre-writer"}, writers
    status, seen = lend_call(link, "GET", f"/donations/{asked['id']}")
    assert status == 200 and seen["running"] and "not saved" in seen["error"], seen
    assert str(host.home) not in seen["error"], "the borrower was shown the owner's paths"

    flag.unlink()
    wait_until(lambda: "not saved" not in (owner()["last_error"] or ""), timeout=20, interval=0.1,
               what="the rows to catch up")
    assert owner()["pid"] == view["pid"], "catching up must not restart the lent node"
    assert json.loads((host.home / "donations.json").read_text())["donations"][asked["id"]]["handle"] != named
    assert host.stop() == 0
