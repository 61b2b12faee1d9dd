"""Replicas of failover nodes: what a taker needs to start the same node, kept on every paired computer.

The holder of a node with failover on pushes, over the fleet link (mutual TLS between pinned
keys), the node's portable state (`bundle.py`), its record's name, cadre and settings and its
claim secret (`POST /fleet/run/replica`) when failover is turned on and whenever the bundle
changes (a hash of it, looked at every `PUSH_S`); `POST /fleet/run/replica/drop` when failover
is turned off or the node is removed. A receiver keeps each replica as one file,
`<home>/replicas/<node>/replica.bin`, 0600, encrypted (Fernet) with a key kept in its keyring
(`SecretKind.REPLICA_KEY`, never in a file; the claim secret is inside the encrypted document),
beside `source` (the id of the computer that sent it, not secret): a replica whose source is
no longer paired is dropped.

Everything received is hostile: the document is checked as a move's is (`moves._record_of`,
`check_bundle`), its size bounded by the link's body limit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadre_desktop.errors import Invalid
from cadre_desktop.files.atomicfile import ensure_private_dir, write_bytes_atomic
from cadre_desktop.host.core.records.records import NodeRecord, NodeStatus
from cadre_desktop.host.core.vault.secrets import SecretKind, SecretStore
from cadre_desktop.host.fleetrun.bundle import check_bundle
from cadre_desktop.host.fleetrun.moves import _record_of
from cadre_desktop.text import clean

log = logging.getLogger(__name__)

#: How often a held failover node's bundle is looked at for a change.
PUSH_S = 10.0
#: The keyring entry (`<home>/replicas/replica-key`) of the key replicas are encrypted with.
KEY_OWNER = "replicas"
REPLICA_FILE, SOURCE_FILE = "replica.bin", "source"
MAX_REPLICA_BYTES = 256 * 1024
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Replica:
    record: NodeRecord
    status: NodeStatus
    secret: str
    files: dict[str, bytes]
    generation: int
    source: str


def check_replica(doc: object, source: str) -> Replica:
    """A replica as received (or read back): Invalid when it is not one."""
    if not isinstance(doc, dict) or not isinstance(doc.get("node"), dict) or not isinstance(doc.get("secret"), str):
        raise Invalid("A replica carries the node, its secret and its files.")
    record, status = _record_of(doc["node"])
    secret = clean(doc["secret"], 256)
    generation = doc.get("generation")
    if secret is None or not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise Invalid("A replica's secret is one printable line and its generation a whole number.")
    return Replica(record, status, secret, check_bundle(doc.get("files")), generation, source)


class Replicas:
    """The replicas this computer keeps for the others (under `root`), and their key."""

    def __init__(self, root: Path, secrets: SecretStore) -> None:
        self.root, self._secrets = root, secrets
        self._key: bytes | None = None

    def folder(self, node_id: str) -> Path:
        if not _ID.fullmatch(node_id):
            raise Invalid("A replica's node id is not one a folder can hold.")
        return self.root / node_id

    async def _fernet(self) -> Any:
        from cryptography.fernet import Fernet

        if self._key is None:
            key = await self._secrets.get(KEY_OWNER, SecretKind.REPLICA_KEY)
            if key is None:
                key = Fernet.generate_key().decode("ascii")
                await self._secrets.set(KEY_OWNER, SecretKind.REPLICA_KEY, key)
            self._key = key.encode("ascii")
        return Fernet(self._key)

    async def keep(self, source: str, doc: object) -> str:
        """A replica pushed by `source`: checked, encrypted, written 0600. Its node id."""
        replica = check_replica(doc, source)
        data = json.dumps(doc).encode()
        if len(data) > MAX_REPLICA_BYTES:
            raise Invalid("A replica is over the size a computer keeps.")
        sealed = (await self._fernet()).encrypt(data)
        folder = self.folder(replica.record.id)

        def write() -> None:
            ensure_private_dir(self.root)
            ensure_private_dir(folder)
            write_bytes_atomic(folder / REPLICA_FILE, sealed)
            write_bytes_atomic(folder / SOURCE_FILE, source.encode("ascii", "replace")[:128])
        await asyncio.to_thread(write)
        return replica.record.id

    def has(self, node_id: str) -> bool:
        try:
            return (self.folder(node_id) / REPLICA_FILE).is_file()
        except Invalid:
            return False

    async def read(self, node_id: str) -> Replica | None:
        """The replica of `node_id` kept here, decrypted and checked again; None when none (or unreadable)."""
        folder = self.folder(node_id)

        def load() -> tuple[bytes, str] | None:
            try:
                return (folder / REPLICA_FILE).read_bytes()[:MAX_REPLICA_BYTES * 2], \
                    (folder / SOURCE_FILE).read_text("ascii", "replace")[:128]
            except OSError:
                return None
        found = await asyncio.to_thread(load)
        if found is None:
            return None
        from cryptography.fernet import InvalidToken

        try:
            doc = json.loads((await self._fernet()).decrypt(found[0]))
            return check_replica(doc, found[1])
        except (InvalidToken, ValueError, Invalid) as exc:
            log.warning("the replica of %s kept here is unreadable (%s); it is dropped", node_id, type(exc).__name__)
            await self.drop(node_id)
            return None

    async def drop(self, node_id: str, *, source: str | None = None) -> bool:
        """Drop the replica of `node_id`; with `source`, only one that computer sent (a computer that
        held the node before does not drop the replica its new holder sent)."""
        try:
            folder = self.folder(node_id)
        except Invalid:
            return False
        if source is not None:
            def sent_by() -> str:
                try:
                    return (folder / SOURCE_FILE).read_text("ascii", "replace")[:128]
                except OSError:
                    return ""
            if await asyncio.to_thread(sent_by) != source:
                return False
        existed = folder.exists()
        await asyncio.to_thread(shutil.rmtree, folder, True)
        return existed

    async def drop_unpaired(self, paired: Callable[[str], bool]) -> None:
        """Replicas whose source is no longer paired with this computer go."""
        def sources() -> list[tuple[str, str]]:
            if not self.root.is_dir():
                return []
            out = []
            for folder in list(self.root.iterdir())[:1000]:
                try:
                    out.append((folder.name, (folder / SOURCE_FILE).read_text("ascii", "replace")[:128]))
                except OSError:
                    out.append((folder.name, ""))
            return out
        for node_id, source in await asyncio.to_thread(sources):
            if not paired(source):
                log.info("the replica of %s goes: its computer is no longer paired", node_id)
                await self.drop(node_id)
