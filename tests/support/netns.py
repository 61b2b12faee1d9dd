"""A home network of network namespaces, made by the test itself, to cut one computer off.

`HomeNetwork(count)` makes a *switch* namespace with a bridge and one namespace per computer,
each joined to the bridge by a veth pair, the computer's end at `127.1.N.1` (a loopback-range
address: Linux routes 127.0.0.0/8 between interfaces where `route_localnet` is on, and no
private-range or public address is used). The switch's own leg is `127.1.N.254`: what the
test process reaches the computers' nodes and fleet ports through (`call_in`), as a device
on the same home network would. `cut(i)` takes computer i's cable out (its veth end in the
switch down: it reaches nothing and nothing reaches it, while its own loopback, its control
API among it, goes on); `mend(i)` puts it back.

A program runs in a computer's namespace with `command_in(i, argv)` (`ip netns exec`, which
execs the program: the pid is the program's); a call of this process runs there in a thread
of its own that has entered the namespace (`call_in`: a thread's sockets are made in the
namespace it is in). Linux and root only (`available()` says why not).
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000


def available() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) to make network namespaces with"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, text=True, timeout=20, check=False)
    if probe.returncode != 0:
        return f"this machine refuses a network namespace: {probe.stderr.strip()[:200]}"
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()[:300]}")


def _sysctl(ns: str, name: str, value: str) -> None:
    done = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{name}={value}"],
                          capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sysctl {name} in {ns}: {done.stderr.strip()[:300]}")


class HomeNetwork:
    """`count` computers on one switch, each in its namespace (see the module's words)."""

    def __init__(self, count: int, rng: random.Random | None = None) -> None:
        tag = f"{(rng or random.Random()).getrandbits(24):06x}"
        self.net = 1 + int(tag, 16) % 250  # 127.1.<net>.x: suites side by side use other nets
        self.switch = f"cadre-sw-{tag}"
        self.names = [f"cadre-{tag}-{i}" for i in range(count)]
        self._legs = [f"cs{tag}{i}" for i in range(count)]  # the switch's ends (15 characters at most)
        self._made: list[str] = []
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def address(self, index: int) -> str:
        return f"127.1.{self.net}.{index + 1}"

    @property
    def switch_address(self) -> str:
        return f"127.1.{self.net}.254"

    def _make(self) -> None:
        for ns in (self.switch, *self.names):
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "set", "lo", "up", ns=ns)
            for conf in ("all", "default"):
                _sysctl(ns, f"net.ipv4.conf.{conf}.route_localnet", "1")
        _ip("link", "add", "br0", "type", "bridge", ns=self.switch)
        _ip("addr", "add", f"{self.switch_address}/24", "dev", "br0", ns=self.switch)
        _ip("link", "set", "br0", "up", ns=self.switch)
        for i, (ns, leg) in enumerate(zip(self.names, self._legs, strict=True)):
            _ip("link", "add", leg, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=self.switch)
            _ip("link", "set", leg, "master", "br0", ns=self.switch)
            _ip("link", "set", leg, "up", ns=self.switch)
            _ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _sysctl(ns, "net.ipv4.conf.eth0.route_localnet", "1")

    def cut(self, index: int) -> None:
        """Computer `index`'s cable out: nothing of the network reaches it, nor it anything."""
        _ip("link", "set", self._legs[index], "down", ns=self.switch)

    def mend(self, index: int) -> None:
        _ip("link", "set", self._legs[index], "up", ns=self.switch)

    def command_in(self, index: int | None, argv: Sequence[str]) -> list[str]:
        """`argv` run in computer `index`'s namespace (None: the switch's)."""
        return ["ip", "netns", "exec", self.switch if index is None else self.names[index], *argv]

    def enter(self, index: int | None) -> None:
        """The calling thread enters computer `index`'s namespace (None: the switch's): its
        sockets are made there from now on (a thread of its own: the others stay where they are)."""
        ns = self.switch if index is None else self.names[index]
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        try:
            if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {ns}")
        finally:
            os.close(fd)

    def call_in(self, index: int | None, fn: Callable[[], T], timeout: float = 60.0) -> T:
        """`fn()` in a thread that has entered computer `index`'s namespace (None: the switch's)."""
        ns = self.switch if index is None else self.names[index]
        result: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.enter(index)
                result.append(fn())
            except BaseException as exc:  # handed to the caller
                failure.append(exc)
        thread = threading.Thread(target=run, name=f"in-{ns}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError(f"a call in {ns} did not end within {timeout:g} s")
        if failure:
            raise failure[0]
        return result[0]

    def close(self) -> None:
        """Every namespace deleted (their interfaces go with them); the processes in them are the caller's."""
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20, check=False)
        self._made.clear()
