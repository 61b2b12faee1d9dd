"""`node logs` and `donation logs`: a node's log from a terminal, with no host needed.

The file is read directly (`Paths.node_log`), its end through `logtail`, the
one reader of a log's end. A node with no log on this computer (another computer's
node of the fleet) is asked of the running host (`GET /api/nodes/{id}/logs`, which
forwards it to the computer that hosts it): its last lines, not followed.
"""

from __future__ import annotations

import signal
import sys
import threading

from cadre_desktop import text
from cadre_desktop.cli.client import NoHost
from cadre_desktop.cli.terminal import EXIT_OK, client
from cadre_desktop.errors import NoSuchThing, StorageError
from cadre_desktop.logs import logtail
from cadre_desktop.paths import Paths


def write_text(data: bytes) -> None:
    """Log bytes for a terminal: control characters (but line breaks and tabs) as escapes."""
    sys.stdout.write(text.escape_lines(data.decode("utf-8", "replace")))
    sys.stdout.flush()


def cmd_logs(args, paths: Paths) -> int:
    path = paths.node_log(args.id)
    try:
        data, end = logtail.tail_lines(path, args.lines)
    except FileNotFoundError:
        from cadre_desktop.host.core.records.records import is_node_id

        if getattr(args, "ask_host", False) and is_node_id(args.id):
            return _from_host(args, paths)
        raise NoSuchThing(f"no log for node {args.id} at {path}") from None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror or exc}") from None
    write_text(data)
    if args.follow:
        # "Until Ctrl-C" holds also when a script started us with SIGINT ignored (a POSIX shell
        # does that to a background job), which Python would otherwise keep.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            logtail.follow(path, end, write_text)
        except KeyboardInterrupt:
            pass
    return EXIT_OK


def _from_host(args, paths: Paths) -> int:
    """Not a node of this computer: the running host asks the fleet (no host: there is no log here)."""
    try:
        api = client(paths)
    except NoHost:
        raise NoSuchThing(f"no log for node {args.id} at {paths.node_log(args.id)} "
                          "(another computer's node? start the host to read it over the fleet)") from None
    doc = api.request("GET", f"/api/nodes/{args.id}/logs")
    lines = text.log_lines(doc.get("lines") if isinstance(doc, dict) else None, max(1, min(args.lines, text.LOG_LINES)))
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()
    if args.follow:
        computer = doc.get("computer") if isinstance(doc, dict) else None
        where = text.one_line(computer.get("name"), 64) if isinstance(computer, dict) else "another computer"
        sys.stderr.write(f"(a node of {where}: its log is shown, not followed)\n")
    return EXIT_OK
