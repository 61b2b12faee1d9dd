"""The reference borrower: ask a host for a lent node, and seed it.

    python -m cadre_desktop.node.cadre.borrow --party friends < grant-link.txt
    python -m cadre_desktop.node.cadre.borrow 'http://192.168.1.20:28090/grants/gr_…#…' --party friends

It does what any borrower's software does through a host's lend API
(docs/lending.md): make (or load) an owner key, ask for a node under the grant,
wait for the node to answer (`awaiting_seed`, with its peer id), sign a seed for
that very node and send it, and wait for `seeded`. Then it prints the node's
view. The grant link holds a secret token: give it on stdin (or at the hidden
prompt) rather than as an argument, which every user of the machine can read
in the process list.

Exit codes: 0 seeded (or asked for, with --request-only), 1 refused or timed
out (the reason on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from cadre_desktop.errors import NodeFault
from cadre_desktop.files.atomicfile import write_bytes_atomic
from cadre_desktop.text import one_line
from cadre_desktop.wire.keys import b64url, b64url_decode
from cadre_desktop.wire.seed import DEFAULT_PROFILE, PROFILES, is_id, sign_seed

PROG = "python -m cadre_desktop.node.cadre.borrow"
REQUEST_TIMEOUT_S = 30.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Refused(NodeFault):
    """The lending host said no, or did not answer in time (exit 1)."""

    code = "borrow_failed"


class GrantLink:
    def __init__(self, text: str) -> None:
        text = text.strip()
        url = urllib.parse.urlsplit(text)
        parts = url.path.strip("/").split("/")
        if url.scheme != "http" or not url.hostname or len(parts) != 2 or parts[0] != "grants" or not url.fragment:
            raise ValueError("a grant link looks like http://<host>:<port>/grants/<id>#<token>")
        self.base = f"http://{url.netloc}"
        self.grant_id = parts[1]
        self.token = url.fragment

    def __repr__(self) -> str:  # never the token
        return f"GrantLink({self.base}/grants/{self.grant_id})"


class LendClient:
    def __init__(self, link: GrantLink, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.link, self.timeout_s = link, timeout_s

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any], dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.link.base}/grants/{self.link.grant_id}{path}", data=data,
                                         method=method)
        request.add_header("Authorization", f"Bearer {self.link.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(request, timeout=self.timeout_s) as resp:
                return resp.status, _json(resp.read()), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, _json(exc.read()), dict(exc.headers)
        except (urllib.error.URLError, OSError) as exc:
            raise Refused(dead_link_words(self.link, getattr(exc, "reason", exc))) from None


#: What a person needs to hear when a grant link leads nowhere (nothing answers, or the host says it ended).
DEAD_LINK = "this link no longer works: the grant may be revoked or expired, or the lender's computer is off"
#: The lend API's codes for a grant that ended, and what each means to the person holding its link.
_ENDED = {"grant-revoked": "the lender revoked this grant", "grant-expired": "this grant has expired"}


def dead_link_words(link: GrantLink, reason: object) -> str:
    """A connection that failed, in words: the lend API listens only while a grant is active,
    so "connection refused" most often means the grant ended; a timeout, a computer that is off."""
    where = link.base.removeprefix("http://")
    if isinstance(reason, socket.gaierror):
        detail = f"{where} cannot be found on this network"
    elif isinstance(reason, TimeoutError):
        detail = f"no answer from {where}"
    elif isinstance(reason, ConnectionRefusedError):
        detail = f"nothing answers at {where}"
    else:
        detail = f"{where} cannot be reached: {one_line(reason)}"
    return f"{DEAD_LINK} ({detail})"


def _json(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _refusal(status: int, body: dict[str, Any]) -> Refused:
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code, message = one_line(error.get("code", "")), one_line(error.get("message", "no reason given"))
    if status == 410 and code in _ENDED:
        return Refused(f"this link no longer works: {_ENDED[code]} (the host answered {status} {code}: {message})")
    return Refused(f"the host answered {status} {code}: {message}")


def load_or_create_key(path: Path | None) -> bytes:
    """The owner's raw Ed25519 private key: from `path`, else new (and saved there, 0600)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if path is not None and path.exists():
        doc = json.loads(path.read_text())
        return b64url_decode(doc["private_key"])
    key = Ed25519PrivateKey.generate().private_bytes_raw()
    if path is not None:
        public = Ed25519PrivateKey.from_private_bytes(key).public_key().public_bytes_raw()
        doc = {"version": 1, "kind": "ed25519", "private_key": b64url(key), "public_key": b64url(public)}
        write_bytes_atomic(path, json.dumps(doc, indent=2).encode() + b"\n")
    return key


def public_of(private_key: bytes) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return b64url(Ed25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw())


def _retry_after(headers: dict[str, str], default: float = 1.0) -> float:
    value = headers.get("Retry-After", "")
    return min(float(value), 10.0) if value.isdigit() else default


def request_node(client: LendClient, party: str, profile: str, bootstrap: list[str], owner_key: str) -> dict:
    status, body, _ = client.call("POST", "/donations", {
        "party_id": party, "profile": profile, "bootstrap_nodes": bootstrap, "owner_keys": [owner_key],
    })
    if status != 201:
        raise _refusal(status, body)
    return body


def wait_for(client: LendClient, donation_id: str, states: set[str], deadline: float) -> dict:
    while True:
        status, body, headers = client.call("GET", f"/donations/{donation_id}")
        if status == 200 and body.get("status") in states and body.get("peer_id"):
            return body
        if status == 200 and body.get("status") == "error":
            raise Refused(f"the host gave up on the node: {body.get('error')}")
        if status not in (200, 503):
            raise _refusal(status, body)
        if time.monotonic() > deadline:
            raise Refused(f"the node did not reach {' or '.join(sorted(states))} in time "
                          f"(last status: {body.get('status')})")
        time.sleep(_retry_after(headers, 0.2) if status == 503 else 0.2)


def seed_node(client: LendClient, view: dict, party: str, private_key: bytes, deadline: float) -> dict:
    seed = sign_seed(private_key, view["id"], party, view["peer_id"]).to_json()
    while True:
        status, body, headers = client.call("POST", f"/donations/{view['id']}/seed", {"seed": seed})
        if status == 200:
            return body
        found = body.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        again = status == 503 or (status == 409 and error.get("code") == "not-ready")
        if not again or time.monotonic() > deadline:
            raise _refusal(status, body)
        time.sleep(_retry_after(headers))


def read_link(argument: str | None) -> GrantLink:
    if argument and argument != "-":
        print(f"{PROG}: note: a grant link on the command line is visible to every user of this machine; "
              "give it on stdin next time", file=sys.stderr)
        text = argument
    elif sys.stdin is not None and sys.stdin.isatty():
        text = getpass.getpass("Grant link (input hidden): ")
    else:
        text = sys.stdin.read(8192) if sys.stdin is not None else ""
    return GrantLink(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Borrow a node from a cadre-desktop host and seed it.")
    parser.add_argument("link", nargs="?", help="the grant link (better: on stdin, or '-')")
    parser.add_argument("--party", required=True, help="your party (cadre) id: 1-64 of A-Z a-z 0-9 . _ -")
    parser.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE)
    parser.add_argument("--bootstrap", action="append", default=[], metavar="ADDR",
                        help="an address of one of your party's nodes (repeat for more)")
    parser.add_argument("--key", type=Path, help="your owner key file (made if missing); else a new key for this run")
    parser.add_argument("--donation", metavar="ID", help="seed this node you already asked for, instead of a new one")
    parser.add_argument("--request-only", action="store_true", help="ask for a node, do not seed it")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait in all (60)")
    parser.add_argument("--json", action="store_true", help="print the node's view as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not is_id(args.party):
        print(f"{PROG}: error: --party must be 1 to 64 of A-Z a-z 0-9 . _ -", file=sys.stderr)
        return 2
    try:
        link = read_link(args.link)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    deadline = time.monotonic() + args.timeout
    client = LendClient(link)
    try:
        private_key = load_or_create_key(args.key)
        if args.donation:
            view = {"id": args.donation}
        else:
            view = request_node(client, args.party, args.profile, args.bootstrap, public_of(private_key))
            print(f"asked for node {view['id']} ({view['status']})", file=sys.stderr)
        if not args.request_only:
            view = wait_for(client, view["id"], {"awaiting_seed", "seeded"}, deadline)
            if view["status"] != "seeded":
                view = seed_node(client, view, args.party, private_key, deadline)
            print(f"node {view['id']} is {view['status']} for party {args.party} as {view['peer_id']}",
                  file=sys.stderr)
    except Refused as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as exc:
        print(f"{PROG}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(view, indent=2, sort_keys=True) if args.json else view["id"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
