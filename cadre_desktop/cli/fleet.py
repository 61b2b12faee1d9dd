"""`cadre-desktop fleet …` and `node list --all`: the computers of this one's fleet, from a terminal.

Clients of the control API like the node commands (same exit codes, `--json`). `fleet join CODE`
takes the code on its command line (the contract: a person types what the other computer shows);
it goes to the host in a request's body and is never printed or logged. Node commands need nothing
new: the host forwards a call for another computer's node over the fleet link.
"""

from __future__ import annotations

import argparse
import urllib.parse

from cadre_desktop.cli.terminal import EXIT_OK, PROG, Usage, client, clip, out, print_json, shown, table
from cadre_desktop.paths import Paths


def _path(computer_id: str) -> str:
    return "/api/fleet/computers/" + urllib.parse.quote(computer_id, safe="")


def load_words(load: object) -> str:
    """"CPU 12 %, memory 40 %" as the computer said it (`host/fleet/load.py`), "-" when it did not."""
    figures = load if isinstance(load, dict) else {}
    parts = [f"{label} {value:.0f} %" for key, label in (("cpu_percent", "CPU"), ("memory_percent", "memory"))
             if isinstance(value := figures.get(key), (int, float)) and not isinstance(value, bool) and 0 <= value <= 1000]
    return ", ".join(parts) or "-"


def computers_table(computers: list[dict]) -> str:
    rows = [(clip(c.get("name"), 24) + (" (this one)" if c.get("self") else ""), shown(c.get("id")),
             shown(c.get("state")) + (f" since {c['unreachable_since']}" if c.get("unreachable_since") else ""),
             shown(c.get("address")), shown(c.get("last_seen")), load_words(c.get("load"))) for c in computers]
    return table(("NAME", "ID", "STATE", "ADDRESS", "LAST SEEN", "LOAD"), rows)


def cmd_invite(args, paths: Paths) -> int:
    doc = client(paths).request("POST", "/api/fleet/invite", {})
    if args.json:
        print_json(doc)
    else:
        out(f"On the other computer, run:\n\n    {PROG} fleet join {doc['code']} {doc['address']}\n\n"
            f"The code works once, until {doc['expires_at']}.")
    return EXIT_OK


#: The code carries no address (a slot and a secret only): the joiner is told where to find it.
NO_ADDRESS = (f"Give the inviting computer's address too: '{PROG} fleet invite' shows it with the code "
              f"({PROG} fleet join CODE ADDRESS).")


def cmd_join(args, paths: Paths) -> int:
    if not args.address:
        raise Usage(NO_ADDRESS)
    body = {"code": args.code, "address": args.address}
    doc = client(paths).request("POST", "/api/fleet/join", body, timeout=60.0)
    if args.json:
        print_json(doc)
    else:
        paired = doc.get("paired", {})
        out(f"Paired with {shown(paired.get('name'))} ({shown(paired.get('id'))}).")
        out(computers_table(doc.get("computers", [])))
    return EXIT_OK


def cmd_list(args, paths: Paths) -> int:
    doc = client(paths).request("GET", "/api/fleet")
    if args.json:
        print_json(doc)
    else:
        out(computers_table(doc.get("computers", [])))
    return EXIT_OK


def cmd_rename(args, paths: Paths) -> int:
    doc = client(paths).request("PATCH", _path(args.computer), {"name": args.name})
    out(f"Renamed {shown(doc.get('id'))} to {shown(doc.get('name'))}.")
    return EXIT_OK


def cmd_remove(args, paths: Paths) -> int:
    doc = client(paths).request("DELETE", _path(args.computer))
    removed = doc.get("removed", {})
    there = "; it unpinned this computer too" if doc.get("unpaired_there") else \
        "; it could not be reached, so it still lists this computer (its link is refused here)"
    out(f"Removed {shown(removed.get('name'))} ({shown(removed.get('id'))}): its key is unpinned{there}.")
    return EXIT_OK


def fleet_nodes_table(doc: dict) -> str:
    rows = [(clip((n.get("computer") or {}).get("name"), 20), clip(n.get("name"), 24), shown(n.get("id")),
             shown(n.get("status")), "yes" if n.get("running") else "no", clip(n.get("last_error"), 50))
            for n in doc.get("nodes", [])]
    text = table(("COMPUTER", "NAME", "ID", "STATUS", "RUNNING", "LAST ERROR"), rows)
    for c in doc.get("unreachable", []):
        text += f"\n{shown(c.get('name'))} ({shown(c.get('id'))}) could not be reached: {clip(c.get('error'), 120)}"
    return text


def cmd_list_all(args, paths: Paths) -> int:
    """`node list --all`: every computer's nodes."""
    doc = client(paths).request("GET", "/api/nodes?scope=fleet", timeout=30.0)
    if args.json:
        print_json(doc)
    else:
        out(fleet_nodes_table(doc))
    return EXIT_OK


def add_parsers(commands, as_json: argparse.ArgumentParser) -> None:
    fleet = commands.add_parser("fleet", help="pair this computer with your others and see them")
    actions = fleet.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    actions.add_parser("invite", parents=[as_json], help="a code (10 minutes, single use) for another computer to join"
                       ).set_defaults(func=cmd_invite)
    join = actions.add_parser("join", parents=[as_json], help="pair with the computer that showed CODE")
    join.add_argument("code", help="the code the other computer shows (like 7-ab3k-9qzp)")
    join.add_argument("address", nargs="?", help="the other computer's address (host or host:port), shown with its code")
    join.set_defaults(func=cmd_join)
    actions.add_parser("list", parents=[as_json], help="the computers of the fleet and their state").set_defaults(func=cmd_list)
    rename = actions.add_parser("rename", help="give a paired computer another name (here)")
    rename.add_argument("computer", help="its id (see `fleet list`)")
    rename.add_argument("name")
    rename.set_defaults(func=cmd_rename)
    remove = actions.add_parser("remove", help="unpair a computer (both sides when it can be reached)")
    remove.add_argument("computer", help="its id (see `fleet list`)")
    remove.set_defaults(func=cmd_remove)
