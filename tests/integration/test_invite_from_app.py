"""Add another node to a cadre from the app: the host asks a node it runs for an invitation.

Real headless host, real reference nodes, real Secret Service. The host uses its
own per-start credential over loopback (no owner token from the phone), and a
node started by an earlier run of the host is restarted first to get one.
"""

from __future__ import annotations

from tests.support.headless import fast_settings
from tests.support.host_calls import claim, running
from tests.support.polling import wait_until


def joined(host, node_id: str) -> dict:
    return wait_until(lambda: (n := host.node(node_id))["status"] == "joined" and n, timeout=30,
                      what=f"{node_id} joined")


def test_a_joined_node_invites_another_into_its_cadre_with_no_token_to_copy(host_factory):
    host = host_factory(fast_settings()).start()
    status, first = host.api("POST", "/api/nodes", {"name": "Kitchen"})
    assert status == 201, first
    first = running(host, first["id"])
    wait_until(lambda: host.node(first["id"])["ready"], timeout=20, what="kitchen answers")
    assert claim(host.node(first["id"]), "Family")[0] == 200
    joined(host, first["id"])

    status, second = host.api("POST", f"/api/nodes/{first['id']}/invite", {"name": "Garage"})
    assert status == 201, second
    assert second["name"] == "Garage" and second["mode"] == "invitation"
    assert joined(host, second["id"])["cadre"] == "Family"

    # A node still in its claim state cannot invite.
    status, third = host.api("POST", "/api/nodes", {"name": "Attic"})
    status, body = host.api("POST", f"/api/nodes/{third['id']}/invite", {})
    assert status == 409 and "has not joined" in body["error"]["message"]

    # After the host restarts, the inviting node is re-attached with a credential this
    # run never made: it is restarted once (no attempt spent) and the invitation still works.
    host.kill()
    again = host_factory(home=host.home).start()
    before = again.node(first["id"])
    status, fourth = again.api("POST", f"/api/nodes/{first['id']}/invite", {"name": "Shed"})
    assert status == 201, fourth
    assert joined(again, fourth["id"])["cadre"] == "Family"
    after = again.node(first["id"])
    assert after["pid"] != before["pid"] and after["attempts"] == before["attempts"]
    again.stop()
