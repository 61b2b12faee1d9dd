"""Ending a node child and everything it started, even after its leader is gone.

The orchestrator asks here for each way a child ends: a stop (terminate the
group, a grace period, kill it), the leader's own death (what is left of its
group is killed at once: the node crashed, and its respawn needs the work
folder and the ports), a leader that died while no host watched (its group's
members, each checked to carry the node's environment), and a sweep of strays
at Remove and Quit (every process of the node that no live handle owns).

Every OS call is the seam's (`system.seam.ProcessOS`, one class per platform): POSIX
signals the process group, whose id is the leader's pid; Windows ends the node's Job
object, or its process tree where it has none. A stop is one call to it per step.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path

from cadre_desktop.errors import StorageError
from cadre_desktop.host.local import proctree
from cadre_desktop.host.local.handles import Handle
from cadre_desktop.host.local.nodelogs import NodeLogs
from cadre_desktop.host.local.system.procs import Identity
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.paths import Paths

log = logging.getLogger(__name__)

#: How often a wait looks whether a group or a pump has gone.
POLL_S = 0.02
#: How long a SIGKILLed stray or a pump whose node ended may take to disappear.
GONE_TIMEOUT_S = 3.0


class Ender:
    def __init__(self, nodes_dir: Path, system: ProcessOS) -> None:
        self.nodes_dir = nodes_dir
        self.system = system

    # -- the group of one handle -------------------------------------------------

    def group_gone(self, handle: Handle) -> bool:
        return not handle.pgid or not self.system.group_alive(handle.pgid)

    def signal(self, handle: Handle, *, kill: bool) -> None:
        """Terminate or kill the child's group; call only while it is known to be ours.

        That is: its leader is alive and the same process, or it exited just
        now and the group still exists (the OS keeps a live group's id from
        any new process).
        """
        self.system.signal_group(handle.pgid or handle.pid, handle._job_handle, kill=kill)

    def end_now(self, handle: Handle) -> None:
        """The leader died on its own: kill what it left in its group before anything respawns."""
        if self.system.end_group_now(handle.pgid, handle._job_handle):
            log.warning("node %s: its process %s ended but left processes in its group %s; ending them",
                        handle.node_id, handle.pid, handle.pgid)

    async def wait_gone(self, handle: Handle, deadline: float) -> bool:
        """Wait until the leader has exited and its group is empty, or the deadline passes."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):  # a quit's cancel is never dropped
                await handle._exited.wait()
        except TimeoutError:
            return False
        while not self.group_gone(handle):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def end_leftovers(self, handle: Handle) -> None:
        """The leader died while nobody watched: kill its group's members that are ours."""
        if self.system.end_job(handle._job_handle or self.system.reopen_job(handle.job)) or not handle.pgid:
            return
        pids = await asyncio.to_thread(proctree.group_leftovers, handle.pgid, handle.identity,
                                       handle.node_id, self.nodes_dir, self.system)
        if pids:
            log.warning("node %s: its process %s is gone, but %s of its group still run; ending them",
                        handle.node_id, handle.pid, pids)
            self.system.kill_pids(pids)
            await wait_pids_gone(pids, self.system)

    # -- strays --------------------------------------------------------------------

    async def end_strays(self, owned: dict[int, str], node_id: str | None = None) -> list[int]:
        """Kill every process of the home's nodes (or of `node_id`) that no live leader owns.

        `owned` maps each live leader's group id to its node (its pid on Windows).
        """
        census = await asyncio.to_thread(proctree.take_census, self.nodes_dir, owned, self.system)
        strays = [m for m in census.untracked + census.leftovers if node_id is None or m.node_id == node_id]
        if not strays:
            return []
        for member in strays:
            log.warning("node %s: a stray process %s of an earlier start still runs; ending it",
                        member.node_id, member.pid)
        pids = [m.pid for m in strays]
        self.system.kill_pids(pids)
        await wait_pids_gone(pids, self.system)
        return pids

    def end_lock_holder(self, node_id: str, work: Path) -> int | None:
        """A respawn is about to start: a stray holding the work folder's lock is ended first.

        Only the kill is sent here (a spawn never waits); the reference node
        waits a moment for the lock, and the kernel drops it as the stray dies.
        """
        holder = proctree.lock_holder(work, node_id, self.system)
        if holder is not None:
            log.warning("node %s: a stray process %s of an earlier start holds its work folder's lock; "
                        "ending it", node_id, holder)
            info = self.system.process_info(holder)
            if info is not None and info.pgid == holder:
                self.system.kill_group(holder)
            else:
                self.system.kill_pids([holder])
        return holder

    # -- the log pump ----------------------------------------------------------------

    async def wait_pump(self, handle: Handle, timeout: float = GONE_TIMEOUT_S) -> None:
        """Let the pump (or the keeper) write the node's last lines; kill a pump that does not end."""
        if handle.log_kept:
            try:
                async with asyncio.timeout(timeout):
                    await handle._log_done.wait()
            except TimeoutError:
                log.warning("node %s: its output did not end with the node", handle.node_id)
            return
        pid, identity = handle.pump_pid, handle.pump_identity
        if not pid or identity is None:
            return
        if handle._cancel_pump_watch is not None:
            try:
                async with asyncio.timeout(timeout):
                    await handle._log_done.wait()
                return
            except TimeoutError:
                pass
        elif await wait_pids_gone([pid], self.system, timeout, identity):
            return
        if identity.matches(self.system.read_identity(pid)):
            log.warning("node %s: its log pump %s did not end with the node; killing it", handle.node_id, pid)
            self.system.kill_pids([pid])


async def wait_pids_gone(pids: list[int], system: ProcessOS, timeout: float = GONE_TIMEOUT_S,
                         identity: Identity | None = None) -> bool:
    """Poll until none of `pids` runs (or, with `identity`, the one pid is no longer that process)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout

    def running(pid: int) -> bool:
        now = system.read_identity(pid)
        return now is not None and (identity is None or identity.matches(now))

    while any(running(pid) for pid in pids):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


def delete_node_files(paths: Paths, logs: NodeLogs, node_id: str) -> None:
    """Delete a removed node's work folder and logs (blocking: run it on a thread).

    A folder that survives is an error, never a success: the removal stays
    pending (its tombstone) and is tried again.
    """
    work = paths.node_dir(node_id)
    failures: list[str] = []
    shutil.rmtree(work, onerror=lambda _fn, path, exc: failures.append(f"{path}: {exc[1]}"))
    logs.delete(node_id)
    if os.path.lexists(work):
        detail = failures[0] if failures else "it is still there"
        raise StorageError(f"could not delete the work folder of node {node_id} ({detail}); "
                           "the removal is retried later")


async def reclaim_untracked(nodes_dir: Path, owned: dict[int, str], system: ProcessOS) -> list[Handle]:
    """One census of the process table at start: a handle for each session leader running for
    one of our nodes that no handle names (a host killed between a spawn and its state write),
    and an end for everything else of our nodes that no live child owns (what a leader that
    died while no host watched left behind)."""
    census = await asyncio.to_thread(proctree.take_census, nodes_dir, owned, system)
    found = []
    for member in census.untracked:
        handle = proctree.handle_for(member, system)
        if handle is not None:
            log.warning("node %s: found its child (pid %s) running untracked; tracking it again",
                        handle.node_id, handle.pid)
            found.append(handle)
    if census.leftovers:
        pids = [m.pid for m in census.leftovers]
        log.warning("ending %d process(es) that dead node children left behind: %s", len(pids), pids)
        system.kill_pids(pids)
        await wait_pids_gone(pids, system)
    return found
