"""Entry point: ``cadre-node`` or ``python -m cadre_desktop.node``.

Configured only by environment variables (see docs/node-contract.md); a start-up
failure prints one line on stderr and exits with a code from :class:`ExitCode`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket

#: When this node's start began: the process's start, or for a standby the moment it is told
#: who it is (it may have waited loaded for minutes; "ready in" measures this start only).
_STARTED_AT = time.monotonic()

import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from cadre_desktop.errors import CadreError  # noqa: E402
from cadre_desktop.net.plainasync import import_without_openssl  # noqa: E402
from cadre_desktop.node.errors import ExitCode, exit_code_of  # noqa: E402

USAGE = """\
usage: cadre-node   (no arguments; configured by environment variables)

  CADRE_NODE_ID, CADRE_NODE_DIR, CADRE_API_HOST, CADRE_API_PORT, CADRE_P2P_PORT,
  CADRE_ADVERTISE_HOST, and one of CADRE_CLAIM_SECRET, CADRE_INVITATION or
  CADRE_DONATION_ID (a lent node: with CADRE_PARTY_ID, CADRE_OWNER_KEYS,
  CADRE_SEED_TOKEN, and optionally CADRE_BOOTSTRAP_NODES, CADRE_PROFILE).
  Optional: CADRE_JOIN_TIMEOUT_MS, CADRE_CLAIM_MAX_FAILURES, CADRE_CLAIM_LOCKOUT_MS,
  CADRE_BODY_TIMEOUT_MS, CADRE_LOG_LEVEL. See docs/node-contract.md.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:
        from cadre_desktop import __version__

        if args == ["--version"]:
            print(f"cadre-node {__version__}")
            return ExitCode.OK
        if args in (["--help"], ["-h"]):
            print(USAGE, end="")
            return ExitCode.OK
        print(f"cadre-node: error: unexpected arguments\n{USAGE}", end="", file=sys.stderr)
        return ExitCode.CONFIG
    # Until the event loop takes SIGTERM over, a stop request during start-up ends
    # the process at once, still with exit code 0 (the host asked for it).
    signal.signal(signal.SIGTERM, _stop_during_start_up)
    try:
        if os.environ.get(STANDBY_VAR) == "1":
            if not _stand_by():
                return ExitCode.OK  # the host went away before it needed this standby
        return _run()
    except CadreError as err:
        print(f"cadre-node: error: {err.message}", file=sys.stderr)
        return exit_code_of(err)
    except KeyboardInterrupt:  # Ctrl-C before the loop's own handler was installed
        return ExitCode.OK


STANDBY_VAR = "CADRE_STANDBY"


def _stand_by() -> bool:
    """Load everything a node needs, say `ready`, then wait on stdin to be told who it is
    (docs/node-contract.md), and say `taken` once told; or, asked to, fork or park nodes.

    Until that line comes the process has no identity, opens no port and touches no work
    folder. The line carries the node's CADRE_ variables, secrets included: a pipe, never the
    command line. False: stdin closed without a line (the host no longer wants it).

    On a socket, on Linux, the standby says `ready fork clone` (or `ready fork`, where it must
    fork twice): the host may then send it fork requests (`forking.serve_fork`), each returning
    True in a new process that is that node, and park requests (`forking.serve_park`): a child
    forked ahead, True once the host takes it. The standby serves on until its host goes.
    """
    import_without_openssl()  # loaded now (the node speaks plain HTTP only), so it is ready the moment it is told
    import logging  # noqa: F401

    from cadre_desktop.net import fdlimit
    from cadre_desktop.node import clock, config, identity, logs, node, node_dir, server, state  # noqa: F401
    from cadre_desktop.node.warm import forking

    fdlimit.raise_soft_limit()  # process-wide and no node's: done before the node is needed
    channel = forking.channel()
    if channel is not None:
        import gc

        gc.freeze()  # what is loaded now is never collected: its pages stay shared with every fork
    clone = forking.clone_parent() if channel is not None else None
    forking.set_clone(clone)
    _tell_host(b"ready\n" if channel is None else b"ready fork clone\n" if clone else b"ready fork\n")
    while True:
        line, fds = forking.read_request(channel)
        if not line:
            return False
        doc = forking.request(line)
        if "fork" not in doc and "park" not in doc:
            for fd in fds:
                os.close(fd)
            env = forking.standby_env(doc)
            _tell_host(b"taken\n")
            break
        if channel is None:
            from cadre_desktop.node.errors import ConfigError

            raise ConfigError("a fork or park request needs stdin to be a socket")
        if "park" in doc:
            own = forking.serve_park(channel, fds)
            if own is None:
                continue  # the standby: it answered, and reads on
            taken = forking.wait_parked(own)  # the parked child, until the host takes it
            if taken is None:
                return False
            env, channel = taken, own
            break
        forked = forking.serve_fork(channel, doc["fork"], fds)
        if forked is not None:
            env = forked
            break
    _become(env, channel)
    return True


def _become(env: dict[str, str], channel: socket.socket | None) -> None:
    """The standby (or its fork) is this node from here on: its variables, its folder, no stdin."""
    global _STARTED_AT
    _STARTED_AT = time.monotonic()
    os.environ.pop(STANDBY_VAR, None)
    os.environ.update(env)
    try:
        # The host finds its node processes by their environment, which for a standby names
        # no node: the work folder as the current directory does (and a cold start has it too).
        os.chdir(env.get("CADRE_NODE_DIR") or ".")
    except OSError:
        pass  # load_config reports a missing or bad folder in words
    if channel is not None:
        channel.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # nothing more is read; the host's end may close
    os.close(devnull)


def _tell_host(word: bytes) -> None:
    """Answer the host on stdin, which it made a socket: `ready` once loaded, `taken` once told
    who this is. On a plain pipe or a file (run by hand) there is nobody to tell."""
    try:
        os.write(0, word)
    except OSError:
        pass



def _stop_during_start_up(signum: int, frame: object) -> None:
    raise SystemExit(ExitCode.OK)


def _run() -> int:
    import_without_openssl()  # the node speaks plain HTTP only
    from cadre_desktop.node.config import load_config

    config = load_config(os.environ)

    import asyncio
    import logging

    from cadre_desktop import __version__
    from cadre_desktop.net import fdlimit
    from cadre_desktop.node.clock import SystemClock
    from cadre_desktop.node.identity import load_or_create_identity
    from cadre_desktop.node.logs import redact, setup_logging
    from cadre_desktop.node.node import Node
    from cadre_desktop.node.node_dir import prepare_node_dir
    from cadre_desktop.node.state import StateStore

    setup_logging(config.node_id, config.tuning.log_level)
    fdlimit.raise_soft_limit()
    redact(config.claim_secret, config.invitation, config.host_token,
           config.donated.seed_token if config.donated else None)
    lock_fd = prepare_node_dir(config.node_dir)
    try:
        identity = load_or_create_identity(config.node_dir)
        store = StateStore(config.node_dir, config.node_id)
        node = Node(config, identity, store, SystemClock(), __version__)
        from cadre_desktop.node.server import serve

        try:
            loop = getattr(sys.modules.get("cadre_desktop.node.warm.forking"), "LOOP", None)  # a parked child's own
            with asyncio.Runner(loop_factory=None if loop is None else lambda: loop) as runner:
                runner.run(serve(node, _STARTED_AT))
        except CadreError:
            raise
        except Exception:  # our bug: logged with its traceback, and the host reads exit code 1
            logging.getLogger("cadre.node").exception("the node stopped on an unexpected error")
            return ExitCode.INTERNAL
    finally:
        os.close(lock_fd)
    _exit_at_once(ExitCode.LEASE_EXPIRED if node.lease_expired else ExitCode.OK)
    return ExitCode.OK  # not reached


def _exit_at_once(code: int) -> None:
    """End a node that stopped cleanly without the interpreter's own teardown.

    Its state is written whole as it changes and its listeners are closed by
    now, so tearing down every module and object (tens of ms of CPU per node,
    which a Quit of many nodes pays all at once on few cores) saves nothing
    worth keeping; the log lines are flushed first.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
