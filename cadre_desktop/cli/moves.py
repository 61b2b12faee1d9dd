"""`cadre-desktop node move ID --to COMPUTER`: a planned move of a node to another computer of the fleet.

A client of `POST /api/nodes/{id}/move` (`{"to": "<computer id or name>"}`): the host that hosts
the node moves it (its identity, claim and settings go to the target; one etcd transaction
makes the target its holder at the next generation), and answers once the new copy serves, or
says why nothing moved.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from cadre_desktop.cli.terminal import EXIT_OK, client, out, print_json, shown
from cadre_desktop.paths import Paths

#: A move waits for the new copy to answer (the host bounds that at 30 s).
MOVE_TIMEOUT_S = 90.0


def add_parser(nodes: Any, as_json: argparse.ArgumentParser, node_id: argparse.ArgumentParser) -> None:
    cmd = nodes.add_parser("move", parents=[as_json, node_id],
                           help="move a node to another computer of the fleet (same identity and claim)")
    cmd.add_argument("--to", required=True, metavar="COMPUTER", help="the computer's id or name (fleet list)")
    cmd.set_defaults(func=cmd_move)


def cmd_move(args: argparse.Namespace, paths: Paths) -> int:
    done = client(paths).request("POST", f"/api/nodes/{quote(args.id, safe='')}/move", {"to": args.to},
                                 timeout=MOVE_TIMEOUT_S)
    if args.json:
        print_json(done)
        return EXIT_OK
    to = done.get("to") if isinstance(done, dict) else None
    out(f"Moved {shown(args.id)} to {shown((to or {}).get('name'))} (generation {shown(done.get('generation'))});"
        f" it answers there as {shown(done.get('peer_id'))}")
    return EXIT_OK
