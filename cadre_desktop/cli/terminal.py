"""What every command shares: exit codes, failures, output safe for a terminal, questions.

The node commands (`commands.py`) and the lending commands (`lending.py`) both
build on this; neither imports the other's commands, except that `commands`
adds the lending parsers to its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cadre_desktop import text
from cadre_desktop.cli.client import ControlClient
from cadre_desktop.errors import InputError, StorageError
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


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, two spaces apart; the last one is not padded."""
    rows = [header, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)


def details(doc: dict, order: tuple[str, ...], *, skip: tuple[str, ...] = (),
            words: dict[str, Callable[[Any], str]] | None = None) -> str:
    """`key: value` lines, the keys of `order` first, then the rest sorted; `words` says some values."""
    keys = [k for k in order if k in doc] + sorted(k for k in doc if k not in order and k not in skip)
    width = max(len(k) for k in keys)
    return "\n".join(f"{k + ':':<{width + 1}} {(words or {}).get(k, shown)(doc[k])}" for k in keys)


def show(args, doc: Any, words: Callable[[Any], str]) -> int:
    """The `--json` contract: the document as the host gave it, else its words for a person."""
    if args.json:
        print_json(doc)
    else:
        out(words(doc))
    return EXIT_OK


# claim_qr (segno) is imported by the two QR helpers only, so that other commands start quickly.

def write_qr_file(data: str, args) -> str | None:
    """`--png FILE` / `--svg FILE`: the QR code of `data` written there (0600); the file's name, or None
    when neither was given."""
    from cadre_desktop import claim_qr

    target, kind = (args.png, "png") if args.png else (args.svg, "svg") if args.svg else (None, None)
    if target is None:
        return None
    try:
        claim_qr.write_image(data, Path(target), kind or "png")
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def print_qr(data: str) -> None:
    from cadre_desktop import claim_qr

    sys.stdout.write(claim_qr.terminal_text(data))


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


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """`-n` and `-f` of `node logs` and `donation logs`."""
    parser.add_argument("-n", "--lines", type=count_arg, default=50, metavar="N", help="how many last lines (50)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
