"""The tests' own keyring (tests/support/session_bus.py): a fresh one per module, and a daemon
that died is said, with its exit, not found out by every later test."""

from __future__ import annotations

import contextlib
import signal
import sys

import pytest

from tests.support.polling import wait_until
from tests.support.session_bus import running_session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gnome-keyring is Linux's")


def labels(env: dict[str, str]) -> set[str]:
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with contextlib.closing(open_dbus_connection(bus=env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        return {item.get_label() for item in secretstorage.get_default_collection(conn).get_all_items()}


def store(env: dict[str, str], label: str) -> None:
    import secretstorage
    from jeepney.io.blocking import open_dbus_connection

    with contextlib.closing(open_dbus_connection(bus=env["DBUS_SESSION_BUS_ADDRESS"])) as conn:
        secretstorage.get_default_collection(conn).create_item(label, {"test": label}, b"secret")


def test_each_session_is_a_keyring_of_its_own():
    with running_session() as first:
        store(first.env, "kept by the first")
        assert "kept by the first" in labels(first.env)
        first.check_alive()
    with running_session() as second:
        assert "kept by the first" not in labels(second.env)


def test_a_daemon_that_died_is_replaced_unlocked_with_the_same_keyring_on_the_next_call():
    """gnome-keyring aborts when a client goes away mid-call (a crash test's SIGKILLed host): the
    next call gets a new daemon from the bus, unlocked, holding what the first one stored."""
    with running_session() as session:
        store(session.env, "stored before the abort")
        keyring = session._keyring
        assert keyring is not None
        keyring.send_signal(signal.SIGABRT)
        wait_until(lambda: keyring.poll() is not None, timeout=10, what="the daemon's end")
        assert "stored before the abort" in labels(session.env)  # the bus started another
        store(session.env, "stored after")
        session.check_alive()


def test_a_keyring_that_no_longer_answers_is_said_with_its_exit():
    """Without the session's own service file the bus starts the machine's, which comes up locked
    and cannot answer: said, with the first daemon's exit."""
    with running_session() as session:
        keyring = session._keyring
        assert keyring is not None
        (session.root / "data" / "dbus-1" / "services" / "org.freedesktop.secrets.service").unlink()
        keyring.send_signal(signal.SIGABRT)
        wait_until(lambda: keyring.poll() is not None, timeout=10, what="the daemon's end")
        with pytest.raises(AssertionError, match=r"gnome-keyring-daemon exited \(-6\) and none answers"):
            session.check_alive()




def test_a_replacement_started_as_the_session_stopped_goes_with_it():
    """The bus starts a replacement keyring detached (init is its parent, not the bus's). One it
    started as the session stopped came up after the bus was gone, found no bus to end with, and
    ran on: one was found after a side-by-side round. Here the service's own command, started
    detached with no bus, stands for it."""
    import os
    import subprocess

    import psutil

    with running_session() as session:
        service = session.root / "data" / "dbus-1" / "services" / "org.freedesktop.secrets.service"
        command = next(line for line in service.read_text().splitlines() if line.startswith("Exec="))[5:]
        env = {**os.environ, **session.env, "HOME": str(session.root), "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent"}
        subprocess.run(["sh", "-c", f"{command} </dev/null >/dev/null 2>&1 &"], env=env, check=True)
        mark = str(session.root)
        started = wait_until(lambda: [p for p in psutil.process_iter(["cmdline"])
                                      if any(mark in part for part in p.info["cmdline"] or ())
                                      and p.pid not in (session._procs[0].pid,)], timeout=10,
                             what="the detached replacement")
        daemons = [c for p in started for c in p.children(recursive=True)] + started
    gone, alive = psutil.wait_procs(daemons, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
