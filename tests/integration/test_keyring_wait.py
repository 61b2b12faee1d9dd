"""A host that starts while the Secret Service is locked: its nodes wait, then start.

At login the keyring is often still locked when the tray app starts. The host
must not count that as a node failure: the nodes show "waiting for the
keyring", spend no attempt and are never given up on, and the moment the
keyring is unlocked they start. A real gnome-keyring on a private D-Bus session.
"""

from __future__ import annotations

from tests.support.headless import HeadlessHost, fast_settings
from tests.support.polling import wait_until
from tests.support.session_bus import lock_default_collection, unlock_default_collection


def test_locked_secret_service_keeps_nodes_waiting_not_in_error_and_unlocking_starts_them(
        tmp_path, private_secret_service):
    settings = fast_settings()
    host = HeadlessHost(tmp_path / "home", private_secret_service, settings).start()
    status, node = host.api("POST", "/api/nodes", {"name": "kitchen"})
    assert status == 201, node
    wait_until(lambda: host.node(node["id"])["ready"], timeout=20, what="the node answers")
    host.stop()
    lock_default_collection(private_secret_service)
    # No clean-quit note: the nodes are down, as after a crash, and the start-up pass must start them.
    (host.home / "state.json").unlink()

    host = HeadlessHost(host.home, private_secret_service).start()
    try:
        waiting = wait_until(lambda: (n := host.node(node["id"]))["waiting_for"] == "keyring" and n,
                             timeout=20, what="waiting for the keyring")
        assert waiting["status"] == "unclaimed" and waiting["attempts"] == 0 and not waiting["running"]
        first = waiting["last_decision"]["at"]
        # Several passes later (a sweep a second), it still waits and has spent nothing.
        wait_until(lambda: host.node(node["id"])["last_decision"]["at"] > first, timeout=10, what="another pass")
        again = host.node(node["id"])
        assert again["status"] == "unclaimed" and again["attempts"] == 0
        assert again["last_decision"]["decision"] == "waiting-for-keyring"
        doctor = host.cli("doctor")
        assert "locked" in doctor.stdout.lower(), doctor.stdout

        unlock_default_collection(private_secret_service)
        started = wait_until(lambda: (n := host.node(node["id"]))["running"] and n, timeout=40,
                             what="started once unlocked")
        assert started["status"] == "unclaimed" and started["waiting_for"] is None
        assert started["claim_url"]
    finally:
        host.stop()
