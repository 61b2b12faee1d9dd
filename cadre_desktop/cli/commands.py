"""`cadre-desktop`: the tray app, the headless host, and the commands that drive a running host.

Node commands are clients of the control API (found through control.json);
only `node logs` reads files directly, so it works with no host running.
Heavy modules (Qt, the engine) are imported only by the commands that
need them, so a `node list` starts quickly.

Exit codes: 0 ok, 1 the action failed, 2 usage, 3 no host is running for this home.
Secrets never travel on a command line: `node join` reads the invitation from
stdin or a hidden prompt.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cadre_desktop import __version__, build_commit
from cadre_desktop.cli import caps, fleet, lending, moves, when
from cadre_desktop.cli.client import NoHost
from cadre_desktop.cli.history import cmd_history
from cadre_desktop.cli.logs import cmd_logs
from cadre_desktop.cli.start import run_gui, run_headless
from cadre_desktop.cli.terminal import (
    EXIT_FAILED,
    EXIT_NO_HOST,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Usage,
    add_log_options,
    client,
    clip,
    confirm,
    details,
    needs_terminal,
    one_line,
    out,
    print_json,
    print_qr,
    show,
    shown,
    table,
    write_qr_file,
)
from cadre_desktop.errors import ApiError, CadreError, Invalid, InvalidState, MachineError
from cadre_desktop.paths import Paths, resolve_paths
from cadre_desktop.times import parse_time

NODE_FLAG = "--node"  # the node program inside a bundle; see run_node()
MAX_INVITATION_INPUT = 64 * 1024
SHOW_ORDER = (
    "id", "name", "status", "mode", "running", "pid", "api_port", "p2p_port", "peer_id", "cadre",
    "attempts", "next_retry_at", "wake_at", "held_by", "hold_reason", "starting", "last_error", "last_exit", "exit_code",
    "waiting_for", "problem", "last_decision", "claim_url", "advertise_host", "created_at",
    "updated_at", "started_at", "log_path",
)


def local_time(stamp: str | None) -> str:
    if not stamp:
        return "-"
    when = parse_time(stamp, zone="utc")
    return one_line(stamp) if when is None else when.astimezone().strftime("%H:%M:%S")


def node_table(nodes: list[dict]) -> str:
    """Never shows claim URLs: a list is for glancing at, maybe on a shared screen."""
    rows = [
        (
            clip(n.get("name"), 24), shown(n.get("id")), shown(n.get("status")),
            f"yes ({n['pid']})" if n.get("running") and n.get("pid") else ("yes" if n.get("running") else "no"),
            shown(n.get("attempts")), local_time(n.get("next_retry_at")), clip(n.get("last_error"), 60),
        )
        for n in nodes
    ]
    return table(("NAME", "ID", "STATUS", "RUNNING", "ATTEMPTS", "NEXT RETRY", "LAST ERROR"), rows)


def decision_words(decision: Any) -> str:
    """The supervisor's last verdict on a node, for a person: what, when, how long, why."""
    if not isinstance(decision, dict):
        return shown(decision)
    words = f"{decision.get('decision')} at {local_time(decision.get('at'))} ({decision.get('ms')} ms)"
    if decision.get("error"):
        words += f": {decision['error']}"
    return words


def node_details(node: dict) -> str:
    return details(node, SHOW_ORDER, words={"last_decision": decision_words, "caps": caps.caps_words})


def node_summary(node: dict) -> str:
    return f"{shown(node.get('name'))} ({shown(node.get('id'))}): {shown(node.get('status'))}"


# -- helpers ---------------------------------------------------------------------------------

def read_invitation() -> str:
    """From a hidden prompt on a terminal, else all of stdin; never from argv."""
    if sys.stdin is not None and sys.stdin.isatty():
        text = getpass.getpass("Invitation (the text a cadre member sent you; input hidden): ")
    else:
        text = (sys.stdin.read(MAX_INVITATION_INPUT + 1) if sys.stdin is not None else "")
        if len(text) > MAX_INVITATION_INPUT:
            raise Invalid("the invitation on stdin is far too long; is it the right text?")
    text = text.strip()
    if not text:
        raise Invalid("no invitation given: paste it at the prompt, or pipe it in on stdin")
    return text


# -- node commands ------------------------------------------------------------------------

def cmd_list(args, paths: Paths) -> int:
    if args.all:
        return fleet.cmd_list_all(args, paths)
    nodes = client(paths).list_nodes()
    if args.json:
        print_json({"nodes": nodes})
    elif not nodes:
        out(f"No nodes yet. Add one with: {PROG} node add")
    else:
        out(node_table(nodes))
    return EXIT_OK


def show_view(args, node: dict, verb: str) -> int:
    return show(args, node, lambda n: f"{verb} {node_summary(n)}")


def cmd_add(args, paths: Paths) -> int:
    node = client(paths).add_node(args.name)
    show_view(args, node, "Added")
    if not args.json and node.get("claim_url"):
        out(f"Claim it from your phone: {PROG} node qr {node['id']}")
    return EXIT_OK


def cmd_join(args, paths: Paths) -> int:
    api = client(paths)  # find the host before asking for the invitation
    return show_view(args, api.join_node(read_invitation(), args.name), "Joining with")


def cmd_show(args, paths: Paths) -> int:
    return show(args, client(paths).get_node(args.id), node_details)


def action_command(action: str, verb: str) -> Callable[[Any, Paths], int]:
    def run(args, paths: Paths) -> int:
        return show_view(args, client(paths).node_action(args.id, action), verb)
    return run


#: How `node pause --until` reads a time (cli/when.py, shared with `pause`).
until_arg = when.until_arg


def cmd_pause(args, paths: Paths) -> int:
    node = client(paths).pause_node(args.id, when.pause_body(args))
    return show(args, node, lambda n: f"{'Sleeping' if n.get('wake_at') else 'Paused'}: {node_summary(n)}"
                + (f" until {local_time(n.get('wake_at'))}" if n.get("wake_at") else ""))


def add_hold_parsers(nodes, parents: list[argparse.ArgumentParser]) -> None:
    """`node pause ID [--for 30m | --until 07:00]` and `node resume ID`."""
    pause = nodes.add_parser("pause", parents=parents,
                             help="stop a node and keep it stopped (for a while, or until a time); spends nothing")
    when.add_when(pause)
    pause.set_defaults(func=cmd_pause)
    nodes.add_parser("resume", parents=parents, help="start a paused, sleeping or done node now (its budget untouched)"
                     ).set_defaults(func=action_command("resume", "Resumed"))


def cmd_qr(args, paths: Paths) -> int:
    node = client(paths).get_node(args.id)
    url = node.get("claim_url")
    if not url:
        raise InvalidState(f"node {node.get('id')} is {node.get('status')}: only an unclaimed node has a claim code")
    target = write_qr_file(url, args)
    if target is not None:
        out(f"Wrote the claim QR code of {node_summary(node)} to {target}. "
            "It holds the claim secret: share it only with who should claim the node.")
        return EXIT_OK
    print_qr(url)
    out(url)
    out(f"Scan it with a phone camera to claim {node.get('name')}.")
    return EXIT_OK


def cmd_remove(args, paths: Paths) -> int:
    api = client(paths)
    if needs_terminal(args, "removal"):
        try:
            node = api.get_node(args.id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = None
        if node is None:  # no record: an orphaned process of it may still run (seed 000)
            if not confirm(f"No record names {args.id}. Stop any orphaned process of it and delete its work folder, "
                           "log and secrets?"):
                out("Not removed.")
                return EXIT_FAILED
        elif not confirm(f"Remove {node_summary(node)}? Its process, work folder and claim secret are deleted."):
            out("Not removed.")
            return EXIT_FAILED
    result = api.remove_node(args.id)
    pids = [p for p in result.get("orphan_pids") or [] if isinstance(p, int)]
    if result.get("existed"):
        out(f"Removed {args.id}.")
    elif pids:
        out(f"No node {args.id}, but an orphaned process of it ran (pid {', '.join(map(str, pids))}): "
            "it was stopped, and its work folder, log and secrets deleted.")
    else:
        out(f"No node {args.id}; nothing to remove.")
    return EXIT_OK


def cmd_watch(args, paths: Paths) -> int:
    api = client(paths)
    events = api.events()
    print(f"Watching the events of the host (pid {api.info.pid}); Ctrl-C stops.", file=sys.stderr, flush=True)
    try:
        for kind, data in events:
            node = data.get("node") or {}
            if args.json:
                print(json.dumps({"event": kind, **data}, sort_keys=True), flush=True)
                continue
            what = f"{one_line(node.get('name'))} ({one_line(data.get('id'))})" if node else one_line(data.get("id"))
            status = f" {one_line(node.get('status'))}" if node else ""
            detail = f": {one_line(data['detail'])}" if data.get("detail") else ""
            out(f"{datetime.now().strftime('%H:%M:%S')} {one_line(kind):<8} {what}{status}{detail}")
    except KeyboardInterrupt:
        return EXIT_OK
    except TimeoutError:
        raise MachineError("the host stopped sending events (no heartbeat)", code="host_silent") from None
    except (ConnectionError, OSError) as exc:
        raise NoHost(f"the connection to the host ended ({type(exc).__name__})") from None
    raise NoHost("the host closed the event stream; it has stopped")


# -- other commands ----------------------------------------------------------------------------

def cmd_paths(args, paths: Paths) -> int:
    doc = paths.as_dict()
    if args.json:
        print_json(doc)
    else:
        width = max(len(k) for k in doc)
        for key, value in doc.items():
            out(f"{key + ':':<{width + 1}} {value}")
    return EXIT_OK


def cmd_doctor(args, paths: Paths) -> int:
    from cadre_desktop.cli import doctor

    return doctor.main(paths)


def cmd_autostart(args, paths: Paths) -> int:
    from cadre_desktop import autostart  # no Qt at import: the CLI stays light

    if args.state == "status":
        state = autostart.status()
        out(f"autostart is {'on' if state is True else 'off' if state is False else state}")
    else:
        (autostart.enable if args.state == "on" else autostart.disable)()
        out(f"autostart is {args.state}")
    return EXIT_OK


# -- parsing ------------------------------------------------------------------------------------

class VersionAction(argparse.Action):
    """`--version`: the version, then the commit of the build (looked up only when asked: it may run git)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str = "print the version and the build's commit, then exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        out(version_line())
        parser.exit()


def version_line() -> str:
    return f"{PROG} {__version__} (commit {build_commit()})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Host cadre nodes on this computer. With no command, start the tray app.",
    )
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument("--headless", action="store_true", help="run the host without a UI until SIGINT/SIGTERM")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="machine-readable output")
    node_id = argparse.ArgumentParser(add_help=False)
    node_id.add_argument("id", help="the node's id (see `node list`)")

    node = commands.add_parser("node", help="list, add and manage the hosted nodes")
    nodes = node.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    listing = nodes.add_parser("list", parents=[as_json], help="every hosted node")
    listing.add_argument("--all", action="store_true", help="every computer's nodes (the fleet)")
    listing.set_defaults(func=cmd_list)
    add = nodes.add_parser("add", parents=[as_json], help="a new node, waiting to be claimed")
    add.add_argument("--name")
    add.set_defaults(func=cmd_add)
    join = nodes.add_parser("join", parents=[as_json],
                            help="a new node joining a cadre; the invitation is read from stdin or a prompt")
    join.add_argument("--name")
    join.set_defaults(func=cmd_join)
    nodes.add_parser("show", parents=[as_json, node_id], help="everything about one node").set_defaults(func=cmd_show)
    qr = nodes.add_parser("qr", parents=[node_id], help="the claim QR code of an unclaimed node")
    target = qr.add_mutually_exclusive_group()
    target.add_argument("--png", metavar="FILE", help="write a PNG instead of printing")
    target.add_argument("--svg", metavar="FILE", help="write an SVG instead of printing")
    qr.set_defaults(func=cmd_qr)
    for name, verb, help_ in (
        ("retry", "Retrying", "try again a node the host gave up on"),
        ("restart", "Restarted", "stop and start a node (does not spend its attempts)"),
        ("regenerate", "New claim code for", "a new claim secret; the old QR code stops working"),
    ):
        nodes.add_parser(name, parents=[as_json, node_id], help=help_).set_defaults(func=action_command(name, verb))
    add_hold_parsers(nodes, [as_json, node_id])
    remove = nodes.add_parser("remove", parents=[node_id], help="stop a node and delete its folder and secrets")
    remove.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    remove.set_defaults(func=cmd_remove)
    logs = nodes.add_parser("logs", parents=[node_id], help="a node's log (no host needed; another computer's: through the host)")
    add_log_options(logs)
    logs.set_defaults(func=cmd_logs, ask_host=True)
    nodes.add_parser("watch", parents=[as_json], help="print host events as they happen, until Ctrl-C"
                     ).set_defaults(func=cmd_watch)
    caps.add_parser(nodes, as_json, node_id)  # node set: a node's caps
    moves.add_parser(nodes, as_json, node_id)  # node move: to another computer of the fleet
    nodes.add_parser("history", parents=[as_json, node_id], help="a node's last 24 hours and 7 days as a strip"
                     ).set_defaults(func=cmd_history)

    lending.add_parsers(commands, as_json)  # grant and donation: lending
    fleet.add_parsers(commands, as_json)  # the computers of this one's fleet
    when.add_parsers(commands, as_json)  # pause, resume, conditions: when nodes run
    commands.add_parser("doctor", help="check that this computer can host nodes").set_defaults(func=cmd_doctor)
    commands.add_parser("paths", parents=[as_json], help="where files are kept").set_defaults(func=cmd_paths)
    auto = commands.add_parser("autostart", help="start the tray app at login")
    auto.add_argument("state", choices=("on", "off", "status"))
    auto.set_defaults(func=cmd_autostart)
    return parser


def fail_line(message: str) -> None:
    print(f"{PROG}: {one_line(message)}", file=sys.stderr, flush=True)


def run_node(argv: list[str]) -> int:
    """`cadre-desktop --node`: the reference node program, as `python -m cadre_desktop.node` runs it.

    A bundle has no Python to run `-m` with, so the host starts the bundle's own
    executable with `--node` (see `settings.default_node_command`). Honoured
    installed or bundled alike, so both run one code path; it is not in --help
    because people start nodes through the host, never by hand.
    """
    from cadre_desktop.node.__main__ import main as node_main

    return node_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [NODE_FLAG]:  # before argparse: the node takes its own (few) arguments
        return run_node(argv[1:])
    if argv[:1] == ["--log-pump"]:  # a node's log pump inside a bundle (logpump.FLAG; host/local/nodelogs.py)
        from cadre_desktop.logs import logpump

        logpump.run(argv[1:])
    if argv[:1] == ["--log-keeper"]:  # the home's log keeper inside a bundle (logkeeper.FLAG; host/local/keeper.py)
        from cadre_desktop.logs import logkeeper

        logkeeper.run(argv[1:])
    if argv == ["--keyring-helper"]:  # the keyring helper inside a bundle (keyring_helper.FLAG)
        from cadre_desktop.keyrings import keyring_helper

        keyring_helper.main()
        return 0
    if argv == ["--probe-display"]:  # doctor's desktop check, in a child of its own
        from cadre_desktop.ui.probe_display import main as probe_main

        return probe_main()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.headless and args.command:
        parser.print_usage(sys.stderr)
        fail_line("--headless takes no command")
        return EXIT_USAGE
    paths = resolve_paths()
    try:
        if args.headless:
            return run_headless(paths)
        if args.command is None:
            return run_gui(argv)
        return args.func(args, paths)
    except NoHost as exc:
        fail_line(f"{exc}. Start a host with `{PROG}` (tray) or `{PROG} --headless`.")
        return EXIT_NO_HOST
    except Usage as exc:
        fail_line(exc.message)
        return EXIT_USAGE
    except CadreError as exc:  # the host's refusals (ApiError) and ours alike
        fail_line(exc.message)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (`| head`) went away; stop writing to it without a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
