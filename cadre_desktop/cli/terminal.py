"""What every command shares: exit codes, failures, output safe for a terminal, questions.

The node commands (`commands.py`) and the lending commands (`lending.py`) both
build on this; neither imports the other's commands, except that `commands`
adds the lending parsers to its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cadre_desktop import text
from cadre_desktop.cli.client import ControlClient
from cadre_desktop.errors import InputError
from cadre_desktop.paths import Paths

PROG = "cadre-desktop"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_HOST = 0, 1, 2, 3


class Usage(InputError):
    """The command line cannot be acted on as given (exit 2; every other error of the tree is exit 1)."""

    code = "usage"


# -- output -----------------------------------------------------------------------------
# Everything printed for a person goes through `out` or `one_line`: a node's name,
# cadre or log line can come from anyone on the network, and an ESC or BEL in it must
# never reach the terminal as a control sequence (cadre_desktop/text.py). JSON output
# is escaped by json.dumps itself.

def out(line: str = "") -> None:
    print(text.escape_lines(line), flush=True)


def print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2, sort_keys=True), flush=True)


def one_line(value: Any) -> str:
    return text.escape(" ".join(str(value).split()))


def shown(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return one_line(value)


def clip(text: str | None, width: int) -> str:
    text = one_line(text or "-")
    return text if len(text) <= width else text[: width - 1] + "…"


# -- asking and connecting --------------------------------------------------------------

def client(paths: Paths) -> ControlClient:
    return ControlClient.from_file(paths.control_file)


def confirm(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def needs_terminal(args, what: str) -> bool:
    """True when the person must be asked (no --yes); a Usage error when nobody can answer."""
    if args.yes:
        return False
    if sys.stdin is None or not sys.stdin.isatty():
        raise Usage(f"stdin is not a terminal, so nothing can confirm the {what}; add --yes")
    return True


def count_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value
