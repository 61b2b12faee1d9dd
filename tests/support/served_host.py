"""A FakeHost behind a real ControlServer, served from a thread, for the synchronous CLI (unit tests only)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from cadre_desktop.host.edges.control import ControlServer
from tests.support.fake_host import FakeHost


class ServedHost:
    """A FakeHost behind a real control API on a loop in another thread."""

    def __init__(self, home: Path) -> None:
        self.host = FakeHost(home)
        self.server = ControlServer(self.host, home / "control.json")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.server.start())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def call(self, fn, *args):
        async def on_loop():
            return fn(*args)
        return self.run(on_loop())

    def put(self, view):
        return self.call(self.host.put, view)

    def close(self) -> None:
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
