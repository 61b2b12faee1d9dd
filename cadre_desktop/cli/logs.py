"""`node logs` and `donation logs`: a node's log from a terminal, with no host needed.

The file is read directly (`Paths.node_log`), its end through `logtail`, the
one reader of a log's end.
"""

from __future__ import annotations

import signal
import sys
import threading

from cadre_desktop import text
from cadre_desktop.cli.terminal import EXIT_OK
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
