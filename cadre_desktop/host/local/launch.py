"""Starting one node child: its Job object (Windows), the process, who writes its log, its handle.

The orchestrator decides what to start (ports, environment, which handle it
replaces); this is how. The node is started first, writing into a pipe that
holds its first lines until they are read, so a respawn's child starts as
soon as it can; then the pipe's read end goes to the home's log keeper
(`keeper.LogKeeper`, POSIX: no process of its own per node) or, on Windows, to
a log pump of the node's own (which also holds its Job object); then the
handle. Out of descriptors, each system call is tried once more with the
reserve (see `fdlimit`), never the whole launch: a retry must not start a
second node.

`launch` runs on a worker thread (`spawner`): it touches nothing of the loop's.
With the keeper, it leaves the pipe's read end in `Launched.out_read`, and `keep`
hands it over on the loop; `discard` ends a child nobody will track.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cadre_desktop.errors import CadreError, OutOfDescriptors, SpawnError
from cadre_desktop.host.local import forks, nodelogs, standby
from cadre_desktop.host.local.handles import Handle
from cadre_desktop.host.local.keeper import LogKeeper
from cadre_desktop.host.local.nodelogs import NodeLogs
from cadre_desktop.host.local.parked import Parked
from cadre_desktop.host.local.standby import Standby
from cadre_desktop.host.local.system import procs
from cadre_desktop.host.local.system.procs import Job
from cadre_desktop.host.local.system.seam import ProcessOS
from cadre_desktop.net.fdlimit import call_with_reserve, is_shortage, shortage_words

log = logging.getLogger(__name__)

def node_env(base: Mapping[str, str], *, node_id: str, work: Path, bind_host: str, ports: tuple[int, int],
             advertise_host: str, attempt: int, secret_env: Mapping[str, str]) -> dict[str, str]:
    """The environment a node child is started with (node contract §1): `base` without any
    `CADRE_` variable it inherited, then the node's own. The one builder of it: the
    orchestrator and doctor's trial start both use it. It holds the node's secret:
    never log it, never persist it."""
    env = procs.without_node_vars(base)
    env.update(
        CADRE_NODE_ID=node_id,
        CADRE_NODE_DIR=str(work),
        CADRE_API_HOST=bind_host,
        CADRE_API_PORT=str(ports[0]),
        CADRE_P2P_PORT=str(ports[1]),
        CADRE_ADVERTISE_HOST=advertise_host,
        CADRE_START_ATTEMPT=str(attempt),
        PYTHONUNBUFFERED="1",
    )
    env.update(secret_env)
    return env


@dataclass
class Launched:
    popen: subprocess.Popen[bytes]
    #: The node's own log pump (Windows), or None when the keeper writes its log.
    pump: subprocess.Popen[bytes] | None
    #: The child's Job object on Windows (None elsewhere, or when Windows refused one).
    job: Job | None = None
    #: Set once the keeper wrote the child's last output (None: a pump writes it).
    log_done: asyncio.Event | None = None
    #: The read end of the child's output, still to be handed to the keeper (`keep`); -1: none.
    out_read: int = -1


def launch(command: list[str], env: dict[str, str], work: Path, *, log_path: Path, node_id: str,
           log_cap: int, handle_id: str, system: ProcessOS, kept: bool = False, join: list[Path] | None = None,
           started: Callable[[int], None] | None = None) -> Launched:
    """Start the child (in a session or job of its own) in the cgroups of `join` from its first
    instruction, its output kept for the keeper (`kept`: `keep` hands it over, on the loop) or
    going to a fresh log pump; `started(pid)` right after its exec (its priority lowered at
    once: `caps.CapsKeeper.lower_soon`). Blocking, and safe on any thread.

    OSError: the node program could not be started. SpawnError: its output
    could not be given to a pump, and the node, already running, was ended again.
    """
    job = system.new_job(handle_id)
    read_end, write_end = call_with_reserve(os.pipe)
    try:
        try:
            os.write(write_end, nodelogs.header(node_id))
            popen = call_with_reserve(system.spawn, command, env=env, cwd=work, stdin=subprocess.DEVNULL,
                                      stdout=write_end, stderr=write_end, join=join or ())
        except BaseException:
            if job is not None:
                system.close_job(job.native)
            raise
        finally:
            os.close(write_end)  # the child holds it now; its reader sees end-of-file when the node ends
        if started is not None:
            started(popen.pid)
        job = system.assign_job(job, popen)
        if kept:
            launched = Launched(popen, None, job, out_read=read_end)
            read_end = -1  # the keeper's, once `keep` hands it over
            return launched
        try:
            pump = call_with_reserve(nodelogs.start_pump, read_end, log_path, log_cap, system=system,
                                     job=job.name if job else None)
        except OSError as exc:
            _undo(popen, job, system)
            if is_shortage(exc):
                raise OutOfDescriptors(shortage_words(f"Starting the log pump of node {node_id}")) from None
            raise SpawnError(f"could not start the log pump of node {node_id}: {exc.strerror or exc}; "
                             "the node was stopped again") from None
    finally:
        if read_end >= 0:
            os.close(read_end)
    return Launched(popen, pump, job)


def keep(launched: Launched, keeper: LogKeeper, *, handle_id: str, node_id: str, log_path: Path, log_cap: int,
         system: ProcessOS) -> None:
    """On the loop: the keeper takes the output of a child `launch` started (SpawnError: it could
    not, and the child was ended again)."""
    try:
        launched.log_done = _keep(keeper, launched.popen, handle_id, node_id, log_path, log_cap,
                                  launched.out_read, system)
    finally:
        _close_out(launched)


def discard(launched: Launched, system: ProcessOS) -> None:
    """End a child nobody will track (its start was let go while it came up); any thread."""
    _close_out(launched)
    _undo(launched.popen, launched.job, system)
    if launched.pump is not None:
        system.kill_and_reap(launched.pump, what="log pump")


def _close_out(launched: Launched) -> None:
    if launched.out_read >= 0:
        os.close(launched.out_read)
        launched.out_read = -1


def _keep(keeper: LogKeeper, popen: subprocess.Popen[bytes], handle_id: str, node_id: str, log_path: Path,
          log_cap: int, read_end: int, system: ProcessOS) -> asyncio.Event:
    try:
        return keeper.watch(handle_id, node_id, log_path, log_cap, read_end)
    except OSError as exc:
        _undo(popen, None, system)
        raise SpawnError(f"could not start the log keeper for node {node_id}: {exc.strerror or exc}; "
                         "the node was stopped again") from None


def warm(claimed: Standby, env: dict[str, str], header: bytes, join: list[Path], *, log_path: Path, node_id: str,
         log_cap: int, system: ProcessOS, kept: bool, started: Callable[[int], None],
         held: frozenset[int] = frozenset()) -> Launched | None:
    """A start from a claimed standby, on the start's thread: a fork of it (a fork server, its
    output kept for the keeper), or the standby itself told who it is; `started(pid)` then.
    None: no node came of it, and the start goes on cold. `held`: the pids of this host's
    nodes, which no fork server may name as its new one."""
    if claimed.forking:
        forked = forks.fork(claimed, env, header, join, system, held=held) if kept else None
        if forked is None:
            return None
        started(forked[0].pid)
        return Launched(forked[0], None, out_read=forked[1])
    if not standby.hand_over(claimed, env, header, system):
        return None
    started(claimed.popen.pid)
    return hand_over(claimed, log_path=log_path, node_id=node_id, log_cap=log_cap, system=system, kept=kept)


async def take(claimed: Parked, env: dict[str, str], header: bytes, join: list[Path], *, system: ProcessOS,
               started: Callable[[int], None], held: frozenset[int], kept: bool) -> Launched | None:
    """A start that takes a fork server's parked child, on the loop (`forks.take`), its output kept
    for the keeper; `started(pid)` then. None: it was not taken, and was ended (the start goes on
    cold). A child whose pid is one of this host's nodes already (`held`), or one whose output no
    keeper would take (`kept` false), is never taken."""
    try:
        if claimed.popen.pid in held or not kept:
            system.kill_and_reap(claimed.popen, what="parked child")
            return None
        taken = await forks.take(claimed, env, header, join, system)
    finally:
        claimed.close()
    if taken is None:
        return None
    started(taken[0].pid)
    return Launched(taken[0], None, out_read=taken[1])


def hand_over(standby: Standby, *, log_path: Path, node_id: str, log_cap: int, system: ProcessOS,
              kept: bool = False) -> Launched:
    """A standby that was just told who it is (`standby.hand_over`) as a launched child: its output
    kept for the keeper (`kept`: `keep` hands it over, on the loop) or going to a fresh log pump.
    Safe on any thread."""
    if kept:
        launched = Launched(standby.popen, None, out_read=standby.out_read)
        standby.out_read = -1  # the keeper's, once `keep` hands it over
        standby.close_fds()
        return launched
    try:
        pump = call_with_reserve(nodelogs.start_pump, standby.out_read, log_path, log_cap, system=system)
    except OSError as exc:
        _undo(standby.popen, None, system)
        if is_shortage(exc):
            raise OutOfDescriptors(shortage_words(f"Starting the log pump of node {node_id}")) from None
        raise SpawnError(f"could not start the log pump of node {node_id}: {exc.strerror or exc}; "
                         "the node was stopped again") from None
    finally:
        standby.close_fds()
    return Launched(standby.popen, pump)


def _undo(popen: subprocess.Popen[bytes], job: Job | None, system: ProcessOS) -> None:
    """End a child that cannot be given a log pump (it has only just started): its job, else its group."""
    if not system.end_job(job.native if job else None):
        system.kill_and_reap(popen, what="node child")


def new_handle(node_id: str, handle_id: str, launched: Launched, ports: tuple[int, int], env: dict[str, str],
               attempt: int, system: ProcessOS) -> Handle:
    popen, pump = launched.popen, launched.pump
    handle = Handle(
        id=handle_id,
        node_id=node_id,
        pid=popen.pid,
        identity=system.read_identity(popen.pid) or procs.Identity("unknown"),
        api_port=ports[0],
        p2p_port=ports[1],
        started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        advertise_host=env["CADRE_ADVERTISE_HOST"],
        attempt=attempt,
        pgid=popen.pid if system.groups else None,
        job=launched.job.name if launched.job is not None else None,
        pump_pid=pump.pid if pump else None,
        pump_identity=system.read_identity(pump.pid) if pump else None,
        popen=popen,
        log_kept=launched.log_done is not None,
    )
    handle._job_handle = launched.job.native if launched.job is not None else None
    if launched.log_done is not None:
        handle._log_done = launched.log_done
    return handle


def watch_pump(pump: subprocess.Popen[bytes], handle: Handle, system: ProcessOS) -> None:
    """Reap the pump when it ends (it is our child), and tell the handle."""
    try:
        handle._cancel_pump_watch = system.watch_exit(
            asyncio.get_running_loop(), pump.pid, pump, lambda _code: handle._log_done.set())
    except Exception as exc:  # the node runs without its pump watch; only its log's end goes unseen
        log.error("cannot watch the log pump %s: %s", pump.pid, exc)


def attach_log(handle: Handle, keeper: LogKeeper | None, logs: NodeLogs, system: ProcessOS) -> None:
    """A re-attached child: find who writes its log (the keeper, an older build's pump, or nobody)."""
    kept = keeper.stream_for(handle.id, handle.node_id) if keeper is not None else None
    if kept is not None:
        handle.log_kept, handle._log_done = True, kept.done
    elif handle.pump_pid and handle.pump_identity:
        if handle.pump_identity.matches(system.read_identity(handle.pump_pid)):
            handle._cancel_pump_watch = system.watch_exit(
                asyncio.get_running_loop(), handle.pump_pid, None, lambda _code: handle._log_done.set())
        else:
            handle._log_done.set()
    else:
        handle._log_done.set()
        if keeper is not None:  # the keeper ended while no host ran: the child's pipe has no reader left
            logs.note(handle.node_id, "its output is no longer captured: the log keeper ended while no host "
                      "was running; it is captured again from its next start")


def start_error(node_id: str, command: list[str], exc: OSError) -> CadreError:
    """What a failed start of the node program is, in words: the machine out of descriptors
    (never the node's fault, never an attempt), or a program that cannot be started."""
    if is_shortage(exc):
        return OutOfDescriptors(shortage_words(f"Starting node {node_id}"))
    return SpawnError(f"could not start the node program {command[0]!r}: {exc.strerror or exc}. "
                      "Check 'node_command' in settings.json.")
