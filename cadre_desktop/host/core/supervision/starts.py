"""The one start of a supervised node: re-read, start through the driver, record it, or let it go.

`Supervisor.start_node` is this (a pass, Retry, Restart, Resume, a wake); it runs
on the supervisor's serial queue, so two starts of one node never overlap. The
driver's start is awaited: the child comes up on a thread while the loop goes on
(`host/local/spawner.py`), so the record may change meanwhile. Not on the queue,
a Remove (and a loan's end) lands whenever it lands, and a hold or a give-up
written by someone else would too. So the record is read again after the
await, and written in the same turn: the STARTED (or ADOPT) transition is
applied only to the record the start began from (still supervised, still
naming the same previous child). Otherwise the start is *let go*: the new child
is stopped, nothing is written and no attempt is counted, since it was the
host, not the node, that cancelled it; no record ever names a child it did not
mean, and no child is left that no record names.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from cadre_desktop.errors import CadreError, OutOfDescriptors, SecretsError
from cadre_desktop.host.core.clock import iso
from cadre_desktop.host.core.driver import InstanceInfo
from cadre_desktop.host.core.records.lifecycle import Change, Lifecycle
from cadre_desktop.host.core.records.records import NodeRecord, RespawnInfo, StartMark, next_mark

if TYPE_CHECKING:
    from cadre_desktop.host.core.supervision.supervisor import Supervisor

log = logging.getLogger(__name__)


async def start_node(supervisor: Supervisor, node_id: str, *, counted: bool, expect_handle: str | None,
                     lc: Lifecycle[Any], soon: bool) -> bool:
    """See `Supervisor.start_node`."""
    record = lc.get(node_id)
    if record is None or record.status not in lc.kind.supervised or record.handle != expect_handle:
        return False
    live = [h for h in supervisor.driver.handles_for(node_id) if h.alive and h.id != record.handle]
    if live:
        child = live[-1]
        lc.apply(node_id, Change.ADOPT, lambda r: r.replace(
            handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port), soon=soon)
        log.info("node %s: its record takes the running child pid %s", node_id, child.pid)
        return False
    value = supervisor.gate.cached(node_id, lc.kind.secret_kind(record))
    if value is None:
        raise SecretsError(f"the secret of node {node_id} has not been read from the keyring yet")
    attempt = record.next_start
    now = iso(supervisor.clock.now())
    words = supervisor.exits.take_for_start(node_id, record.handle)
    mark = next_mark(record.start, attempt, now, supervisor.supervisor_id, counted=counted, words=words)
    respawn = RespawnInfo(record.attempts + 1, now) if counted else record.respawn
    want = (record.api_port, record.p2p_port) if record.api_port and record.p2p_port else None
    try:
        child = await supervisor.launch(record, value, attempt, want_ports=want, lc=lc)
    except Exception as exc:
        if not supervisor.passes.stopped:  # a host stopping cancelled it: the record stays as it was
            _start_failed(supervisor, lc, record, exc, counted=counted, mark=mark, words=words, now=now)
        raise
    fresh = lc.get(node_id)
    change = Change.ADOPT if getattr(child, "adopted", False) else Change.STARTED
    written = None
    if fresh is not None and fresh.handle == record.handle:
        written = lc.apply(node_id, change, lambda r: r.replace(
            handle=child.id, api_port=child.api_port, p2p_port=child.p2p_port, respawn=respawn, start=mark,
            problem=None), soon=soon)
    if written is None:
        await let_go(supervisor, node_id, child)
        return False
    supervisor.timeline.started(child.id)
    # An adopted child is past its boot, a forked one has almost none (see `gate`); a new one holds a slot.
    if change is Change.STARTED and not getattr(child, "forked", False):
        supervisor.start_gate.started(child.id)
    supervisor.timeline.mark(("start", node_id), now)
    if counted:
        supervisor.timeline.mark(("attempt", node_id), now)
    log.info("node %s started (attempt %d%s), pid %s", node_id, attempt, "" if counted else ", uncounted", child.pid)
    return True


def _start_failed(supervisor: Supervisor, lc: Lifecycle[Any], record: NodeRecord, exc: Exception, *, counted: bool,
                  mark: StartMark, words: str | None, now: str) -> None:
    """A start that raised: its failure in the record's mark, counted unless the machine is to blame."""
    message = exc.message if isinstance(exc, CadreError) else f"the node could not be started: {exc}"
    respawn = RespawnInfo(record.attempts + 1, now) if counted else record.respawn
    if isinstance(exc, OutOfDescriptors):  # the machine's trouble: never spends the node's attempts
        counted, respawn = False, record.respawn
        mark = next_mark(record.start, mark.attempt, now, supervisor.supervisor_id, counted=False, words=words)
    failed_mark = dataclasses.replace(mark, last_exit=f"could not be started: {message}")
    written = lc.apply(record.id, Change.START_FAILED, lambda r: r.replace(
        error=message, respawn=respawn, start=failed_mark))
    if counted and written is not None:
        supervisor.timeline.mark(("attempt", record.id), now)


async def let_go(supervisor: Supervisor, node_id: str, child: InstanceInfo) -> None:
    """A start whose record went or changed while its child came up: the child is stopped, uncounted."""
    supervisor.host_tokens.pop(child.id, None)
    log.info("node %s was removed or changed while it started; its new child (pid %s) is stopped", node_id,
             child.pid)
    try:
        await supervisor.driver.stop(child.id)
    except Exception as exc:  # the record names no such child; the next start's drop ends it anyway
        log.error("could not stop the child of node %s that is no longer wanted: %s", node_id, exc)
