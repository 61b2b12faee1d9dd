"""Read every cadre-desktop entry of a test Secret Service, straight over D-Bus.

The keyring API cannot list entries, and the crash and audit tests need to see
the ones nobody knows the id of (a node whose add was cut short by a SIGKILL).
"""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

SERVICE = "cadre-desktop"


def secret_items(keyring_env: dict[str, str]) -> dict[str, str]:
    """Every `user name -> secret` stored under the service `cadre-desktop`."""
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with closing(open_dbus_connection(bus=keyring_env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        found = {}
        for item in secretstorage.search_items(conn, {"service": SERVICE}):
            user = item.get_attributes().get("username", "")
            found[user] = item.get_secret().decode("utf-8")
        return found


def node_of(user_name: str) -> str:
    """`<home id>/n1234abcd/claim-secret` (or the old `n1234abcd/claim-secret`) -> `n1234abcd`."""
    return user_name.split("/")[-2]


def without_home(user_name: str) -> str:
    """`<home id>/n1234abcd/claim-secret` -> `n1234abcd/claim-secret`."""
    return "/".join(user_name.split("/")[-2:])


def home_id(home: Path) -> str:
    """The id a home keys its keyring entries by (kept in its records file)."""
    return json.loads((home / "hosted-nodes.json").read_text())["home_id"]


def entry_name(home: Path, node_id: str, kind: str = "claim-secret") -> str:
    """The keyring user name of a node's secret in `home`."""
    return f"{home_id(home)}/{node_id}/{kind}"


def store_secret(keyring_env: dict[str, str], user_name: str, secret: str) -> None:
    """Put an entry where keyring's Secret Service backend looks for it (for forged homes)."""
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with closing(open_dbus_connection(bus=keyring_env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        collection = secretstorage.get_default_collection(conn)
        collection.create_item(f"Password for '{user_name}' on '{SERVICE}'",
                               {"service": SERVICE, "username": user_name}, secret.encode(), replace=True)
