"""`fleet.json`: this computer's id and public certificate, and the computers it is paired with.

Each paired computer is a row: its id, its name (the other computer's own, editable here), where its
fleet link listens (`address`, host:port), the fingerprint of the key pinned for it (SHA-256 of its
certificate) and that certificate, and when it was paired. The file is versioned, 0600 and written
atomically like every record; one that is not ours (bad JSON, a newer version, a bad row) stops the
host and is left as it is. No private key is ever in it: that is in the keyring (`identity.py`).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from cadre_desktop.errors import StorageError
from cadre_desktop.files.atomicfile import write_json_atomic
from cadre_desktop.host.core.records.jsondoc import read_versioned
from cadre_desktop.jsontypes import JSONObject
from cadre_desktop.text import clean, is_host

FLEET_VERSION = 1
MAX_COMPUTERS = 32
MAX_NAME = 64
MAX_CERT = 4096
_ID_CHARS = "abcdefghijkmnpqrstuvwxyz23456789"


def new_computer_id() -> str:
    return "pc_" + "".join(secrets.choice(_ID_CHARS) for _ in range(12))


def is_computer_id(value: object) -> bool:
    return (isinstance(value, str) and len(value) == 15 and value.startswith("pc_")
            and all(ch in _ID_CHARS for ch in value[3:]))


def cert_der(cert_pem: str) -> bytes:
    """The DER of a PEM certificate (no ssl module needed); ValueError when it is not one."""
    body = cert_pem.strip()
    head, tail = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    if not (body.startswith(head) and body.endswith(tail)) or len(body) > MAX_CERT:
        raise ValueError("not a PEM certificate")
    return base64.b64decode("".join(body[len(head):-len(tail)].split()), validate=True)


def fingerprint(cert_pem: str) -> str:
    """The pinned form of a computer's key: the SHA-256 of its certificate, `sha256:<hex>`."""
    return "sha256:" + hashlib.sha256(cert_der(cert_pem)).hexdigest()


def check_address(value: object) -> str | None:
    """`host:port` (an IPv6 host in brackets), else None."""
    if not isinstance(value, str) or len(value) > 300:
        return None
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not is_host(host):
        return None
    return value


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return (host[1:-1] if host.startswith("[") else host), int(port)


def check_name(value: object) -> str | None:
    return clean(value, MAX_NAME)


@dataclass(frozen=True)
class Computer:
    """A paired computer as this one pins it."""

    id: str
    name: str
    address: str
    fingerprint: str
    cert: str
    paired_at: str

    def ref(self) -> JSONObject:
        return {"id": self.id, "name": self.name}

    @classmethod
    def from_json(cls, row: object) -> Computer:
        """A row as read (from the file, or from another computer: hostile until checked); ValueError."""
        if not isinstance(row, dict):
            raise ValueError("a computer is not an object")
        cid, name, address = row.get("id"), check_name(row.get("name")), check_address(row.get("address"))
        cert, paired_at = row.get("cert"), clean(row.get("paired_at"), 40)
        if not is_computer_id(cid) or name is None or address is None or not isinstance(cert, str) or paired_at is None:
            raise ValueError("a computer's id, name, address, cert or paired_at is missing or bad")
        assert isinstance(cid, str)  # is_computer_id
        if fingerprint(cert) != row.get("fingerprint", fingerprint(cert)):
            raise ValueError(f"computer {cid}'s fingerprint is not its certificate's")
        return cls(id=cid, name=name, address=address, fingerprint=fingerprint(cert), cert=cert, paired_at=paired_at)


@dataclass(frozen=True)
class FleetDoc:
    """What fleet.json holds: this computer's id and certificate (None before its first use), its peers."""

    self_id: str | None = None
    self_cert: str | None = None
    computers: tuple[Computer, ...] = field(default_factory=tuple)

    def get(self, computer_id: str) -> Computer | None:
        return next((c for c in self.computers if c.id == computer_id), None)

    def by_fingerprint(self, print_: str) -> Computer | None:
        return next((c for c in self.computers if c.fingerprint == print_), None)

    def with_computer(self, computer: Computer) -> FleetDoc:
        others = tuple(c for c in self.computers if c.id != computer.id and c.fingerprint != computer.fingerprint)
        if len(others) >= MAX_COMPUTERS:
            raise StorageError(f"a fleet has {MAX_COMPUTERS} computers at most")
        return replace(self, computers=(*others, computer))

    def without(self, computer_id: str) -> FleetDoc:
        return replace(self, computers=tuple(c for c in self.computers if c.id != computer_id))


class FleetFile:
    """fleet.json: read whole, written whole (atomic, 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> FleetDoc:
        doc, _ = read_versioned(self.path, what="fleet", current=FLEET_VERSION, upgrades={})
        if doc is None:
            return FleetDoc()
        try:
            return self._parse(doc)
        except ValueError as exc:
            raise StorageError(f"the fleet file {self.path} is not valid ({exc}); it was left as it is") from None

    @staticmethod
    def _parse(doc: JSONObject) -> FleetDoc:
        self_id, self_cert, rows = doc.get("self_id"), doc.get("self_cert"), doc.get("computers", [])
        if self_id is not None and not is_computer_id(self_id):
            raise ValueError("its self_id is not a computer id")
        if self_cert is not None and not isinstance(self_cert, str):
            raise ValueError("its self_cert is not a certificate")
        if self_cert is not None:
            cert_der(self_cert)
        if not isinstance(rows, list) or len(rows) > MAX_COMPUTERS:
            raise ValueError("its computers are not a list")
        computers = tuple(Computer.from_json(row) for row in rows)
        if len({c.id for c in computers}) != len(computers):
            raise ValueError("a computer is in it twice")
        return FleetDoc(self_id=self_id if isinstance(self_id, str) else None,
                        self_cert=self_cert if isinstance(self_cert, str) else None, computers=computers)

    def save(self, doc: FleetDoc) -> None:
        write_json_atomic(self.path, {
            "version": FLEET_VERSION, "self_id": doc.self_id, "self_cert": doc.self_cert,
            "computers": [asdict(c) for c in doc.computers],
        })
