"""Run the node: bind its ports, answer, redeem an invitation, stop on a signal.

Start-up order is chosen for the host's probe: the P2P port is bound first, then
the API port, and only then does slow work (redeeming an invitation) begin, in a
background task. So ``/status`` answers from the first moment the API listens, and
a node that answers has both its ports.

A node started with a lease (a fleet's failover node, `lease.py`) checks it on every request
and stops by itself at its deadline; one already past it never listens.

Stopping (SIGTERM or SIGINT) cancels the background task, closes the listeners and
idle keep-alive connections, and gives requests in flight half a second. State is
only ever written whole (see :mod:`state`), so stopping at any point leaves nothing
half-done.

The HTTP server is :mod:`http1` (h11 on asyncio streams, `wire/http1.py`), not aiohttp: see there why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable

from cadre_desktop.logs import logfilter
from cadre_desktop.net.netguard import ConnectionGuard
from cadre_desktop.node.api import Api
from cadre_desktop.node.cadre.joiner import redeem_invitation
from cadre_desktop.node.errors import BindError
from cadre_desktop.node.http1 import node_server
from cadre_desktop.node.lease import Handler, LeaseWatch
from cadre_desktop.node.node import Node, Phase
from cadre_desktop.node.p2p import start_p2p_listener
from cadre_desktop.wire.api import MAX_BODY

log = logging.getLogger("cadre.node")

SHUTDOWN_GRACE_S = 0.5
#: Connections from one address and in all; idle or half-sent ones close after IDLE_S.
#: Anyone on the LAN can connect, so none of this may grow without bound (guard).
MAX_PER_SOURCE = 32
MAX_CONNECTIONS = 128
IDLE_S = 5.0


async def serve(node: Node, started_at: float) -> None:
    """Serve until SIGTERM or SIGINT. Raises :class:`BindError` if a port is taken."""
    config = node.config
    stop = asyncio.Event()
    _on_stop_signals(stop.set)
    node.on_stop = stop.set
    logfilter.quiet_loop_errors(asyncio.get_running_loop(), log)

    guard = ConnectionGuard(per_source=MAX_PER_SOURCE, total=MAX_CONNECTIONS, idle_s=IDLE_S, name="node API")
    lease, handler = _leased(node, Api(node).answer, stop.set)
    http = node_server(handler, guard, max_body=MAX_BODY, body_timeout_s=config.tuning.body_timeout_s)
    p2p = None
    join_task: asyncio.Task[None] | None = None
    lease_task: asyncio.Task[None] | None = None
    if lease is not None and not lease.may_serve():
        node.lease_expired = True
        log.warning("started past its lease deadline: not serving")
        return
    try:
        p2p = await start_p2p_listener(config.api_host, config.p2p_port, node.peer_id)
        try:
            await http.start(config.api_host, config.api_port)
        except OSError as err:
            raise BindError(
                f"cannot listen on API port {config.api_host}:{config.api_port}: "
                f"{err.strerror}"
            ) from None
        log.info(
            "listening on http://%s:%s (p2p port %s) as %s, state %s, ready in %.0f ms",
            config.api_host,
            config.api_port,
            config.p2p_port,
            node.peer_id,
            node.phase.value,
            (time.monotonic() - started_at) * 1000,
        )
        if lease is not None:
            lease_task = asyncio.create_task(lease.watch(), name="lease-watch")
        if config.invitation is not None and node.phase is Phase.JOINING:
            join_task = asyncio.create_task(
                redeem_invitation(node, config.invitation, config.tuning.join_timeout_s),
                name="redeem-invitation",
            )
        elif config.invitation is not None:
            log.info("already joined cadre %r; the invitation is not redeemed again", node.cadre)
        await stop.wait()
        node.lease_expired = lease is not None and lease.expired
        log.info("stopping")
        node.stopping = True
        node.release_waiters()  # a long-poll of /status answers now, not at the end of the stop's grace
    finally:
        for task in (join_task, lease_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if p2p is not None:
            p2p.close()
        await http.stop(SHUTDOWN_GRACE_S)
    log.info("stopped")


def _leased(node: Node, handler: Handler, stop: Callable[[], None]) -> tuple[LeaseWatch | None, Handler]:
    """The node's lease watch (a fleet's failover node only) and the handler it guards."""
    lease = node.config.lease
    if lease is None:
        return None, handler
    watch = LeaseWatch(lease, node.config.node_dir, stop)
    return watch, watch.guard(handler)


def _on_stop_signals(callback) -> None:
    """SIGTERM and SIGINT call `callback` on the loop: Python's own handlers, each a thread-safe call
    (a signal in the loop's wait interrupts it, the handler runs, the call wakes the loop). Not the
    loop's `add_signal_handler`: it checks each signal against `signal.valid_signals()`, 63 enum
    members made per call, 0.5-1.2 ms of every node's start, on the path of every respawn."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: loop.call_soon_threadsafe(callback))

