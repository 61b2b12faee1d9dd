"""Starting one node child: its Job object (Windows), its log pump, the process, its handle.

The orchestrator decides what to start (ports, environment, which handle it
replaces); this is how: the output pipe and its pump first, so the child's
first line has a reader, then the child in a session (or job) of its own, then
the handle that names all three. Nothing here keeps state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from cadre_desktop.host import nodelogs, procs, winjob
from cadre_desktop.host.handles import Handle

log = logging.getLogger(__name__)


@dataclass
class Launched:
    popen: subprocess.Popen
    output: nodelogs.Output
    #: The child's Job object on Windows (None elsewhere, or when Windows refused one).
    job: Any = None


def launch(command: list[str], env: dict[str, str], work: Path, *, log_path: Path, node_id: str,
           log_cap: int, handle_id: str, platform: str, job_ops: Callable[[], winjob.JobOps]) -> Launched:
    """Start the child with its output going to a fresh log pump (and, on Windows, into a job)."""
    job = name = None
    if platform == "win32":
        name = winjob.job_name(handle_id)
        job = winjob.prepare(job_ops(), name)
    output = nodelogs.open_output(log_path, node_id, log_cap, platform=platform, job=name if job else None)
    try:
        popen = subprocess.Popen(
            command,
            env=env,
            cwd=work,
            stdin=subprocess.DEVNULL,
            stdout=output.fd,
            stderr=output.fd,
            close_fds=True,
            **procs.popen_options(platform),
        )
    except BaseException:
        watch_pump(output.pump)  # it reads end-of-file and ends; reap it then
        if job is not None:
            job_ops().close(job)
        raise
    finally:
        os.close(output.fd)
    job = winjob.assign(job_ops(), job, getattr(popen, "_handle", None)) if job else None
    return Launched(popen, output, job)


def new_handle(node_id: str, handle_id: str, launched: Launched, ports: tuple[int, int], env: dict[str, str],
               attempt: int, platform: str) -> Handle:
    popen, pump = launched.popen, launched.output.pump
    handle = Handle(
        id=handle_id,
        node_id=node_id,
        pid=popen.pid,
        identity=procs.read_identity(popen.pid, platform) or procs.Identity("unknown"),
        api_port=ports[0],
        p2p_port=ports[1],
        started_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        advertise_host=env["CADRE_ADVERTISE_HOST"],
        attempt=attempt,
        pgid=None if platform == "win32" else popen.pid,
        job=winjob.job_name(handle_id) if launched.job is not None else None,
        pump_pid=pump.pid if pump else None,
        pump_identity=procs.read_identity(pump.pid, platform) if pump else None,
        popen=popen,
    )
    handle._job_handle = launched.job
    return handle


def watch_pump(pump: subprocess.Popen | None, handle: Handle | None = None) -> None:
    """Reap the pump when it ends (it is our child), and tell the handle."""
    if pump is None:
        return
    done = handle._pump_exited.set if handle is not None else (lambda: None)
    try:
        cancel = procs.watch_exit(asyncio.get_running_loop(), pump.pid, pump, lambda _code: done())
    except Exception as exc:
        log.error("cannot watch the log pump %s: %s", pump.pid, exc)
        return
    if handle is not None:
        handle._cancel_pump_watch = cancel
