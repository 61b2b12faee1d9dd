"""Port allocation from a bounded range.

A node needs two ports (API and P2P). The allocator hands out the lowest ports
of the range that no live handle holds and that nothing else on the machine is
listening on; a released port goes back. After a host restart the allocator is
rebuilt from the handles the orchestrator re-attached to.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable, Iterable

from cadre_desktop.errors import OutOfDescriptors, PortsExhausted
from cadre_desktop.net.fdlimit import call_with_reserve, is_shortage, shortage_words


def port_is_free(host: str, port: int) -> bool:
    """Whether a TCP listener could bind `host:port` right now.

    OSError for anything but a port in use: a descriptor shortage (EMFILE) is
    not a busy port, and the allocator says so (`OutOfDescriptors`).

    SO_REUSEADDR on POSIX matches what the node's server does, so a port left in
    TIME_WAIT by a previous child counts as free. Windows' SO_REUSEADDR would let
    us bind over a live listener, so it uses SO_EXCLUSIVEADDRUSE instead.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        if hasattr(socket, "SO_EXCLUSIVEADDRUSE"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES, getattr(errno, "WSAEADDRINUSE", -1)):
                return False
            raise
    return True


class PortAllocator:
    def __init__(
        self,
        low: int,
        high: int,
        *,
        bind_host: str = "127.0.0.1",
        is_free: Callable[[str, int], bool] = port_is_free,
    ) -> None:
        if not (0 < low <= high <= 65535):
            raise ValueError(f"bad port range {low}-{high}")
        self.low, self.high = low, high
        self.bind_host = bind_host
        self._is_free = is_free
        self._held: set[int] = set()

    def _free(self, port: int) -> bool:
        """Whether `port` is free: an error that is no answer is False, but a descriptor
        shortage (after one try with the reserve) is OutOfDescriptors, never "taken"."""
        try:
            return call_with_reserve(self._is_free, self.bind_host, port)
        except OSError as exc:
            if is_shortage(exc):
                raise OutOfDescriptors(shortage_words("Choosing a node's ports")) from None
            return False

    def allocate(self, count: int = 2, avoid: Iterable[int] = ()) -> list[int]:
        """Reserve `count` ports, or raise PortsExhausted reserving none.

        Ports in `avoid` (those other nodes remember, and want back when they
        respawn) are taken only when nothing else is free, so one node moving
        does not push the next one off its ports, and its claim URL with it.
        """
        avoid = frozenset(avoid)
        preferred = [p for p in range(self.low, self.high + 1) if p not in avoid]
        fallback = [p for p in range(self.low, self.high + 1) if p in avoid]
        chosen: list[int] = []
        for port in preferred + fallback:
            if port in self._held:
                continue
            if self._free(port):
                chosen.append(port)
                if len(chosen) == count:
                    self._held.update(chosen)
                    return chosen
        raise PortsExhausted(
            f"No free ports left in the range {self.low}-{self.high} "
            f"({len(self._held)} held by nodes, the rest used by other programs). "
            "Remove a node, or widen 'port_range' in settings.json."
        )

    def try_reserve(self, ports: Iterable[int]) -> bool:
        """Hold exactly these ports if all are in range, unheld and free; else hold none."""
        wanted = list(ports)
        if any(p is None or not (self.low <= p <= self.high) or p in self._held for p in wanted):
            return False
        if not all(self._free(p) for p in wanted):
            return False
        self._held.update(wanted)
        return True

    def reserve(self, ports: Iterable[int]) -> None:
        """Hold ports a live handle already uses (re-attach, or undoing a drop)."""
        self._held.update(p for p in ports if p is not None)

    def try_hold(self, ports: Iterable[int]) -> bool:
        """Hold again the ports a handle had (undoing a drop), unless a start took one meanwhile."""
        wanted = [p for p in ports if p is not None]
        if any(p in self._held for p in wanted):
            return False
        self._held.update(wanted)
        return True

    def release(self, ports: Iterable[int]) -> None:
        for port in ports:
            self._held.discard(port)
