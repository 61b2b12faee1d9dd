"""GET /status, the ports a node holds, its files, and how it stops."""

from __future__ import annotations

import asyncio
import signal
import stat
import time
from pathlib import Path

import pytest

from tests.support.node_process import NodeLauncher, poll

STATUS_KEYS = {"node_id", "peer_id", "state", "cadre", "error", "version", "generation"}


async def test_status_has_the_contract_fields(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-1")
    reply = await node.get("/status")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.body
    assert set(body) == STATUS_KEYS
    assert body["node_id"] == "status-1"
    assert body["state"] == "unclaimed"
    assert body["cadre"] is None and body["error"] is None
    assert body["peer_id"].startswith("cn1") and len(body["peer_id"]) == 35
    assert body["version"]
    assert body["generation"] is None  # a node outside a fleet's failover has none


async def test_peer_id_is_kept_across_restarts(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-2")
    first = (await node.status())["peer_id"]
    assert await node.stop() == 0
    assert (await node.restart())["peer_id"] == first


async def test_identity_and_state_files_are_private(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-3")
    assert (await node.claim("perms")).status == 200
    for name in ("identity.json", "node-state.json"):
        mode = stat.S_IMODE((node.node_dir / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"


async def test_p2p_port_is_held_and_greets(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-4")
    reader, writer = await asyncio.open_connection("127.0.0.1", node.p2p_port)
    line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    peer_id = (await node.status())["peer_id"]
    assert line.decode().strip() == f"cadre-node p2p v1 {peer_id}"


async def test_sigterm_stops_within_a_second_with_exit_0(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-5")
    started = time.monotonic()
    node.send(signal.SIGTERM)
    assert await node.wait_exit(deadline_s=1.0) == 0
    assert time.monotonic() - started < 1.0


async def test_sigint_stops_with_exit_0(nodes: NodeLauncher) -> None:
    node = await nodes.start("status-6")
    node.send(signal.SIGINT)
    assert await node.wait_exit(deadline_s=1.0) == 0


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
async def test_sigterm_during_start_up_still_exits_0(nodes: NodeLauncher) -> None:
    node = nodes.launch("status-8")
    assert node.proc is not None
    status_file = Path(f"/proc/{node.proc.pid}/status")

    def catches_sigterm() -> bool:
        # SigCgt is the mask of caught signals: our handler is in, the loop not yet up.
        for line in status_file.read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
        return False

    await poll(catches_sigterm, deadline_s=10, what="the SIGTERM handler")
    node.send(signal.SIGTERM)
    assert await node.wait_exit() == 0


async def test_status_answers_while_an_invitation_is_still_being_redeemed(
    nodes: NodeLauncher,
) -> None:
    from cadre_desktop.node.cadre.invitation_code import InvitationCode
    from tests.support.node_process import free_port

    # Nobody listens at the inviting address: the node keeps retrying, and says so.
    code = InvitationCode("127.0.0.1", free_port(), "abcdefgh12", "s" * 32, "cn1x").encode()
    node = await nodes.start(
        "status-7", invitation=code, extra={"CADRE_JOIN_TIMEOUT_MS": "600"}
    )
    status = await node.status()
    assert status["state"] == "joining" and status["error"] is None
    failed = await node.wait_state("failed")
    assert "could not redeem the invitation" in failed["error"]
    assert node.running
