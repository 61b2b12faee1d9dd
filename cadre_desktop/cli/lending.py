"""`cadre-desktop grant …` and `cadre-desktop donation …`: lending from a terminal.

Clients of the control API like the node commands, with the same exit codes
and `--json`. A grant link holds the grant's token: it is printed only by
`grant create` and `grant link` (asked for by name), never in a list.
"""

from __future__ import annotations

import argparse
import re

from cadre_desktop.cli import terminal as cli
from cadre_desktop.cli.logs import cmd_logs
from cadre_desktop.cli.terminal import EXIT_FAILED, EXIT_OK, PROG, clip, details, one_line, out, print_json, show, shown, table
from cadre_desktop.paths import Paths

_DURATION = re.compile(r"(\d{1,9})([smhdw]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DONATION_ORDER = (
    "id", "party_id", "status", "grant_id", "grant_label", "profile", "running", "pid", "peer_id", "address",
    "api_port", "p2p_port", "attempts", "next_retry_at", "wake_at", "held_by", "hold_reason", "last_error",
    "respawnable", "created_at",
    "updated_at", "seeded_at", "started_at", "log_path",
)


def duration_arg(text: str) -> int:
    """`90`, `30m`, `12h`, `7d`, `2w` -> seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (like 30m, 12h, 7d)")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def positive_arg(text: str) -> int:
    value = cli.count_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def grant_line(grant: dict) -> str:
    return f"{grant.get('label')} ({grant.get('id')}): {grant_status(grant)}, {grant.get('nodes', 0)} of " \
           f"{grant.get('max_nodes')} node(s) lent"


def unreachable_note(grants: list[dict]) -> str | None:
    """The one warning for active grants nobody can reach (the lend API not listening), else None."""
    words = next((g.get("unreachable") for g in grants if g.get("unreachable")), None)
    return f"Warning: {one_line(words)}" if words else None


# -- grants ---------------------------------------------------------------------------------------

def cmd_grant_create(args, paths: Paths) -> int:
    grant = cli.client(paths).create_grant(args.label, args.max_nodes, args.expires_in)
    if args.json:
        print_json(grant)
        return EXIT_OK
    out(f"Created {grant_line(grant)}" + (f", expires {grant['expires_at']}" if grant.get("expires_at") else ""))
    out(grant["link"])
    out("Give this link only to the cadre you lend to: it lets them ask for nodes. "
        f"As a QR code: {PROG} grant link {grant['id']} --qr")
    note = unreachable_note([grant])
    if note:
        out(note)
    return EXIT_OK


def cmd_grant_list(args, paths: Paths) -> int:
    grants = cli.client(paths).list_grants()
    if args.json:
        print_json({"grants": grants})
    elif not grants:
        out(f"No grants. Lend nodes to another cadre with: {PROG} grant create --label NAME")
    else:
        rows = [(clip(g.get("label"), 24), shown(g.get("id")), grant_status(g),
                 f"{g.get('nodes', 0)}/{g.get('max_nodes')}", shown(g.get("expires_at"))) for g in grants]
        out(table(("LABEL", "ID", "STATUS", "NODES", "EXPIRES"), rows))
        note = unreachable_note(grants)
        if note:
            out(note)
    return EXIT_OK


def grant_status(grant: dict) -> str:
    """A grant's status, and for an active one nobody can reach, that it is unreachable."""
    return shown(grant.get("status")) + (" (unreachable)" if grant.get("unreachable") else "")


def cmd_grant_link(args, paths: Paths) -> int:
    link = cli.client(paths).grant_link(args.id)
    target = cli.write_qr_file(link, args)
    if target is not None:
        out(f"Wrote the QR code of grant {args.id} to {target}. It holds the grant's token: share it only "
            "with the cadre you lend to.")
        return EXIT_OK
    if args.qr:
        cli.print_qr(link)
    out(link)
    return EXIT_OK


def cmd_grant_revoke(args, paths: Paths) -> int:
    api = cli.client(paths)
    if cli.needs_terminal(args, "revoke"):
        grant = api.get_grant(args.id)
        if not cli.confirm(f"Revoke {grant_line(grant)}? Every node lent under it stops and is deleted."):
            out("Not revoked.")
            return EXIT_FAILED
    return show(args, api.revoke_grant(args.id),
                lambda grant: f"Revoked {grant.get('label')} ({grant.get('id')}); its loans are ended.")


# -- donations ------------------------------------------------------------------------------------

def cmd_donation_list(args, paths: Paths) -> int:
    donations = cli.client(paths).list_donations()
    if args.json:
        print_json({"donations": donations})
    elif not donations:
        out("No nodes are lent.")
    else:
        rows = [(shown(d.get("id")), clip(d.get("party_id"), 24), clip(d.get("grant_label"), 20),
                 shown(d.get("status")), "yes" if d.get("running") else "no", shown(d.get("attempts")),
                 clip(d.get("last_error"), 60)) for d in donations]
        out(table(("ID", "PARTY", "GRANT", "STATUS", "RUNNING", "ATTEMPTS", "LAST ERROR"), rows))
    return EXIT_OK


def cmd_donation_show(args, paths: Paths) -> int:
    return show(args, cli.client(paths).get_donation(args.id),
                lambda donation: details(donation, DONATION_ORDER, skip=("donations",)))


def cmd_donation_retry(args, paths: Paths) -> int:
    return show(args, cli.client(paths).retry_donation(args.id),
                lambda d: f"Retrying lent node {d.get('id')} ({d.get('party_id')}): {d.get('status')}")


def cmd_donation_hold(action: str, verb: str):
    def run(args, paths: Paths) -> int:
        return show(args, cli.client(paths).donation_action(args.id, action),
                    lambda d: f"{verb} lent node {d.get('id')} ({d.get('party_id')}): {d.get('status')}")
    return run


def cmd_donation_end(args, paths: Paths) -> int:
    api = cli.client(paths)
    if cli.needs_terminal(args, "end of the loan"):
        donation = api.get_donation(args.id)
        if not cli.confirm(f"End the loan of {donation.get('id')} to {donation.get('party_id')}? Its process, "
                           "work folder and seed token are deleted."):
            out("Not ended.")
            return EXIT_FAILED
    result = api.end_donation(args.id)
    out(f"Ended the loan of {args.id}." if result.get("existed") else f"No lent node {args.id}; nothing to end.")
    return EXIT_OK


# -- parsing ----------------------------------------------------------------------------------------

def add_parsers(commands, as_json: argparse.ArgumentParser) -> None:
    """`grant` and `donation`, with their actions, under the top-level commands."""
    row_id = argparse.ArgumentParser(add_help=False)
    row_id.add_argument("id", help="its id (see the list)")
    yes = argparse.ArgumentParser(add_help=False)
    yes.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    grant = commands.add_parser("grant", help="lend nodes to another cadre: create, list, share, revoke grants")
    grants = grant.add_subparsers(dest="grant_command", metavar="ACTION", required=True)
    create = grants.add_parser("create", parents=[as_json], help="a new grant, and its link to share")
    create.add_argument("--label", help="who it is for, e.g. \"Alice's cadre\"")
    create.add_argument("--max-nodes", type=positive_arg, metavar="N", help="nodes it may borrow (2)")
    create.add_argument("--expires-in", type=duration_arg, metavar="TIME", help="e.g. 12h, 7d (never)")
    create.set_defaults(func=cmd_grant_create)
    grants.add_parser("list", parents=[as_json], help="every grant").set_defaults(func=cmd_grant_list)
    link = grants.add_parser("link", parents=[row_id], help="the grant link to share (text or QR code)")
    shape = link.add_mutually_exclusive_group()
    shape.add_argument("--qr", action="store_true", help="also print it as a QR code")
    shape.add_argument("--png", metavar="FILE", help="write the QR code as a PNG")
    shape.add_argument("--svg", metavar="FILE", help="write the QR code as an SVG")
    link.set_defaults(func=cmd_grant_link)
    grants.add_parser("revoke", parents=[as_json, row_id, yes],
                      help="refuse the grant from now on and end its loans").set_defaults(func=cmd_grant_revoke)

    donation = commands.add_parser("donation", help="the nodes lent to other cadres")
    donations = donation.add_subparsers(dest="donation_command", metavar="ACTION", required=True)
    donations.add_parser("list", parents=[as_json], help="every lent node").set_defaults(func=cmd_donation_list)
    donations.add_parser("show", parents=[as_json, row_id], help="everything about one lent node"
                         ).set_defaults(func=cmd_donation_show)
    donations.add_parser("retry", parents=[as_json, row_id], help="try again a lent node the host gave up on"
                         ).set_defaults(func=cmd_donation_retry)
    donations.add_parser("pause", parents=[as_json, row_id], help="stop a lent node and keep it stopped (no end)"
                         ).set_defaults(func=cmd_donation_hold("pause", "Paused"))
    donations.add_parser("resume", parents=[as_json, row_id], help="start a paused, sleeping or done lent node now"
                         ).set_defaults(func=cmd_donation_hold("resume", "Resumed"))
    donations.add_parser("end", parents=[row_id, yes], help="end the loan: stop the node, delete its folder"
                         ).set_defaults(func=cmd_donation_end)
    logs = donations.add_parser("logs", parents=[row_id], help="a lent node's log (works without a running host)")
    cli.add_log_options(logs)
    logs.set_defaults(func=cmd_logs)
