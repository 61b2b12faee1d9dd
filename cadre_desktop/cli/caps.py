"""`cadre-desktop node set ID [--cpu N] [--memory MB] [--always-run|--no-always-run] [--failover on|off]`,
and a node's caps in words for `node show`.

`--failover on|off` is a client of `POST /api/nodes/{id}/failover` (`{"on": true|false}`): with it on,
another computer of the fleet takes the node over when this one loses its lease (asleep,
unplugged, cut off). The host refuses it in words outside a fleet of three computers or more.

A client of `PATCH /api/nodes/{id}`: the host checks the values (one clear error,
nothing changed) and answers the node's view. `default` for `--cpu` or `--memory`
gives the node back the host's setting (`node_cpu_percent`, `node_memory_mb`).
A running node takes its new caps when it starts again; the command says so.
"""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from cadre_desktop.cli.terminal import EXIT_OK, Usage, client, out, print_json, shown
from cadre_desktop.paths import Paths

#: Turning failover on writes the fleet's store and restarts the node under its lease.
FAILOVER_TIMEOUT_S = 60.0


def _amount(text: str) -> int | None:
    if text == "default":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (or 'default')") from None


def add_parser(nodes: Any, as_json: argparse.ArgumentParser, node_id: argparse.ArgumentParser) -> None:
    cmd = nodes.add_parser("set", parents=[as_json, node_id],
                           help="a node's own caps and whether it always runs (taken at its next start)")
    cmd.add_argument("--cpu", type=_amount, metavar="N", default=argparse.SUPPRESS,
                     help="CPU cap in percent of one core (1 to 100 × cores), or 'default' for the host's")
    cmd.add_argument("--memory", type=_amount, metavar="MB", default=argparse.SUPPRESS,
                     help="memory cap in MB (at least 32), or 'default' for the host's")
    cmd.add_argument("--always-run", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                     help="run whatever the run conditions say (a person's pause still stops it)")
    cmd.add_argument("--failover", choices=("on", "off"), default=argparse.SUPPRESS,
                     help="keep it running on another computer of the fleet when this one is lost")
    cmd.set_defaults(func=cmd_set)


def cmd_set(args: argparse.Namespace, paths: Paths) -> int:
    names = {"cpu": "cpu_percent", "memory": "memory_mb", "always_run": "always_run"}
    change = {field: getattr(args, flag) for flag, field in names.items() if hasattr(args, flag)}
    failover = getattr(args, "failover", None)
    if not change and failover is None:
        raise Usage("node set: give --cpu, --memory, --always-run/--no-always-run or --failover on|off")
    if failover is not None:
        done = client(paths).request("POST", f"/api/nodes/{quote(args.id, safe='')}/failover",
                                     {"on": failover == "on"}, timeout=FAILOVER_TIMEOUT_S)
        if args.json and not change:
            print_json(done)
            return EXIT_OK
        out(f"Failover is {failover} for {shown(args.id)} (generation {shown(done.get('generation'))})")
        if not change:
            return EXIT_OK
    node = client(paths).set_node_caps(args.id, change)
    if args.json:
        print_json(node)
        return EXIT_OK
    out(f"Set {shown(node.get('name'))} ({shown(node.get('id'))}): {caps_words(node.get('caps'))}")
    if node.get("running"):
        out(f"It takes them at its next start; to apply them now: cadre-desktop node restart {node.get('id')}")
    return EXIT_OK


def caps_words(caps: Any) -> str:
    """`cpu 50 % of a core, memory 256 MB, low priority (cgroup v1 memory and cpu controllers)`."""
    if not isinstance(caps, dict):
        return shown(caps)
    cpu, memory = caps.get("cpu_percent"), caps.get("memory_mb")
    parts = [f"cpu {cpu} % of a core" if cpu else "cpu not capped",
             f"memory {memory} MB" if memory else "memory not capped"]
    if caps.get("low_priority"):
        parts.append("low priority")
    how = shown(caps.get("how"))
    return ", ".join(parts) + (f" ({how})" if caps.get("enforced", True) else f" (NOT ENFORCED: {how})")
