"""What every side of a keyring call shares, with no keyring library loaded.

The names of entries (`SERVICE`, `SecretKind`, `user_name`, `Where`), the errors a
person sees (their codes and sentences) and `KeyringCalls`, the one shape of the
synchronous calls: in this process against a backend (`keyring_calls.BackendCalls`,
which imports `keyring`) or through the helper process (`keyring_helper.HelperCalls`,
which does not). The tray imports this module and `keyring_helper` only, so on Linux
`keyring`, `secretstorage`, `jeepney` and `cryptography` load in the helper, never in
the tray (see docs/keyring.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from cadre_desktop import APP_NAME
from cadre_desktop.errors import SecretsError

SERVICE = APP_NAME

HELP_UNAVAILABLE = (
    "No usable keyring (secret store) was found, so cadre-desktop cannot keep claim "
    "secrets safely. On Linux install and unlock a Secret Service provider (GNOME "
    "Keyring or KWallet); on Windows and macOS the system keyring is used. "
    "PYTHON_KEYRING_BACKEND selects a backend by hand."
)
HELP_LOCKED = (
    "The keyring is locked. Unlock it (log in to the desktop, or open your keyring "
    "app and unlock it) and try again."
)


class KeyringUnavailable(SecretsError):
    code = "keyring_unavailable"


class KeyringLocked(SecretsError):
    code = "keyring_locked"


class KeyringTimeout(SecretsError):
    code = "keyring_timeout"


#: An error's code on the helper's pipe -> its class here (any other code: a SecretsError).
ERRORS: dict[str, type[SecretsError]] = {
    cls.code: cls for cls in (KeyringUnavailable, KeyringLocked, KeyringTimeout)}


class SecretKind(str, Enum):
    CLAIM = "claim-secret"
    INVITATION = "invitation"
    #: Lending: a grant's token (`<grant id>/grant-token`), a donated node's seed token
    #: (`<donation id>/seed-token`).
    GRANT_TOKEN = "grant-token"
    SEED_TOKEN = "seed-token"
    #: The fleet: this computer's private key (`<home id>/<computer id>/fleet-key`), PEM.
    FLEET_KEY = "fleet-key"
    #: Failover: the key this computer's replicas of other computers' nodes are encrypted with
    #: (`<home id>/replicas/replica-key`), Fernet.
    REPLICA_KEY = "replica-key"


def user_name(node_id: str, kind: SecretKind, home_id: str | None = None) -> str:
    """The keyring user name of a node's secret; without a home id, the old form."""
    return f"{home_id}/{node_id}/{kind.value}" if home_id else f"{node_id}/{kind.value}"


@dataclass(frozen=True)
class Where:
    """Whose entries a call names: the home's id (None: the old names only), and whether
    entries of this home may still be under the old names (not migrated yet)."""

    home_id: str | None = None
    legacy: bool = False


class KeyringCalls(Protocol):
    """The keyring's calls, synchronous and blocking (the store runs them on its worker
    thread). Each raises a SecretsError in words, never carrying a secret."""

    def get(self, where: Where, node_id: str, kind: SecretKind) -> str | None: ...

    def set(self, where: Where, node_id: str, kind: SecretKind, value: str) -> None: ...

    def delete(self, where: Where, node_id: str, kind: SecretKind) -> bool: ...

    def migrate(self, where: Where, node_id: str) -> int: ...

    def check(self) -> str:
        """A round trip with a throwaway entry; the backend's name."""
        ...

    def close(self) -> None:
        """Let go of what the calls hold (the helper process); the next call starts again."""
        ...
