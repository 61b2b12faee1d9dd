"""The desktop's session bus as a person's panel and notification daemon see it.

`dunst` is the notification daemon (its context menu's "dmenu" is a `grep` that
picks Retry, so invoking an action goes through dunst itself), `dbus-monitor`
records what crosses the bus, and jeepney reads what a tray host would: the
StatusNotifierWatcher's items and an item's exported com.canonical.dbusmenu layout.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from contextlib import closing
from pathlib import Path

from tests.support.polling import wait_until

NOTIFICATIONS = "org.freedesktop.Notifications"
WATCHER = "org.kde.StatusNotifierWatcher"
DUNSTRC = """[global]
    dmenu = /usr/bin/grep -m1 {pick}
    browser = /bin/true
    show_indicators = no
"""


def _conn(address: str):
    from jeepney.io.blocking import open_dbus_connection

    return closing(open_dbus_connection(bus=address))


def call(address: str, dest: str, path: str, interface: str, member: str, signature: str = "", body=()):
    from jeepney import DBusAddress, new_method_call

    with _conn(address) as conn:
        msg = new_method_call(DBusAddress(path, bus_name=dest, interface=interface), member, signature, tuple(body))
        return conn.send_and_get_reply(msg, timeout=10).body


def has_owner(address: str, name: str) -> bool:
    return call(address, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                "NameHasOwner", "s", (name,))[0]


def wait_for_owner(address: str, name: str, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    """Until `name` has an owner on the bus, told by the bus's NameOwnerChanged signal (no
    polling), or fail at once, with what it wrote, when `proc` (the program to own it) ended."""
    from jeepney.bus_messages import MatchRule, message_bus

    rule = MatchRule(type="signal", sender="org.freedesktop.DBus", interface="org.freedesktop.DBus",
                     member="NameOwnerChanged", path="/org/freedesktop/DBus")
    rule.add_arg_condition(0, name)
    deadline = time.monotonic() + timeout
    with _conn(address) as conn, conn.filter(rule) as queue:
        conn.send_and_get_reply(message_bus.AddMatch(rule), timeout=10)
        if conn.send_and_get_reply(message_bus.NameHasOwner(name), timeout=10).body[0]:
            return  # owned before the match was in place
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} ended (exit {proc.returncode}) before it owned {name}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: no owner of {name} in {timeout} s")
            try:
                if conn.recv_until_filtered(queue, timeout=min(0.5, left)).body[2]:
                    return
            except TimeoutError:
                pass


def prop(address: str, dest: str, path: str, interface: str, name: str):
    return call(address, dest, path, "org.freedesktop.DBus.Properties", "Get", "ss", (interface, name))[0][1]


def registered_items(address: str) -> list[str]:
    return list(prop(address, WATCHER, "/StatusNotifierWatcher", WATCHER, "RegisteredStatusNotifierItems"))


def menu_layout(address: str, item: str) -> tuple[int, list[dict]]:
    """The revision and the top-level entries (their properties) of an item's exported menu."""
    service, _, path = item.partition("/")
    path = "/" + path if path else "/StatusNotifierItem"
    menu = prop(address, service, path, "org.kde.StatusNotifierItem", "Menu")
    revision, (_, _, children) = call(address, service, menu, "com.canonical.dbusmenu", "GetLayout",
                                      "iias", (0, -1, []))
    entries = []
    for _sig, (_id, props, _kids) in children:
        entries.append({key: value for key, (_s, value) in props.items()})
    return revision, entries


class Monitor:
    """`dbus-monitor` on the bus, filtered, writing to a file the test reads."""

    def __init__(self, address: str, out: Path, *rules: str) -> None:
        self.out = out
        self._fh = open(out, "wb")
        self.proc = subprocess.Popen(["dbus-monitor", "--address", address, *rules],
                                     stdout=self._fh, stderr=subprocess.STDOUT)
        wait_until(lambda: out.stat().st_size > 0, timeout=10, interval=0.05, what="dbus-monitor to start")

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def count(self, member: str) -> int:
        return len(re.findall(rf"member={member}\b", self.text()))

    def calls(self, member: str) -> list[str]:
        """The text of each recorded message whose member is `member` (header and arguments)."""
        blocks = re.split(r"\n(?=(?:method call|signal|method return|error) )", self.text())
        return [b for b in blocks if f"member={member}" in b.splitlines()[0]]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._fh.close()


class Dunst:
    def __init__(self, root: Path, env: dict[str, str], pick: str = "Retry") -> None:
        self.env = env
        config = root / "dunstrc"
        config.write_text(DUNSTRC.format(pick=pick))
        self._log = open(root / "dunst.log", "wb")
        self.proc = subprocess.Popen(["dunst", "-config", str(config)], env=env, stdout=self._log,
                                     stderr=self._log)
        wait_for_owner(env["DBUS_SESSION_BUS_ADDRESS"], NOTIFICATIONS, self.proc, "dunst")

    def ctl(self, *args: str) -> str:
        return subprocess.run(["dunstctl", *args], env=self.env, capture_output=True, text=True,
                              timeout=20).stdout

    def displayed(self) -> int:
        return int(self.ctl("count", "displayed").strip() or 0)

    def history(self) -> list[dict]:
        doc = json.loads(self.ctl("history") or "{}")
        return [{k: v.get("data") for k, v in n.items()} for n in (doc.get("data") or [[]])[0]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
