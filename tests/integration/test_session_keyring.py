"""The test session's own keyring (tests/support/session_bus.py): emptied between modules, and
a daemon that died is said, with its exit, not found out by every later test."""

from __future__ import annotations

import contextlib
import signal
import sys

import pytest

from tests.support.polling import wait_until
from tests.support.session_bus import running_session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gnome-keyring is Linux's")


def items(env: dict[str, str]) -> list[str]:
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with contextlib.closing(open_dbus_connection(bus=env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        return [item.get_label() for item in secretstorage.get_default_collection(conn).get_all_items()]


def store(env: dict[str, str], labels: list[str]) -> None:
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with contextlib.closing(open_dbus_connection(bus=env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        collection = secretstorage.get_default_collection(conn)
        for label in labels:
            collection.create_item(label, {"test": label}, b"secret")


def test_emptied_it_holds_nothing_and_still_answers():
    with running_session() as session:
        store(session.env, ["a", "b", "c"])
        assert {"a", "b", "c"} <= set(items(session.env))  # beside the start's own probe
        session.empty()
        assert items(session.env) == []
        store(session.env, ["d"])
        assert items(session.env) == ["d"]


def test_a_daemon_that_died_is_said_with_its_exit():
    with running_session() as session:
        keyring = session._keyring
        assert keyring is not None
        keyring.send_signal(signal.SIGABRT)  # as it aborted under concurrent writes to a big keyring
        wait_until(lambda: keyring.poll() is not None, timeout=10, what="the daemon's end")
        with pytest.raises(AssertionError, match=r"gnome-keyring-daemon exited \(-6\)"):
            session.empty()
