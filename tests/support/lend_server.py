"""A lend API served from a thread of this process, on the lending rig (fake clock and driver).

For synchronous tests (hypothesis): the server runs its own event loop in a
thread, and tests talk to it with raw HTTP (tests.support.node_server.raw_request).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from cadre_desktop.host.edges.lend_api import LendServer


class ThreadedLendServer:
    def __init__(self, root: Path, *, max_failures: int = 1000, lockout_s: float = 0.1,
                 body_timeout_s: float = 0.5) -> None:
        from tests.support.lend_rig import LendRig

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="lend-api", daemon=True)
        self._thread.start()

        async def setup():
            rig = LendRig(root, lend_max_nodes=100)
            server = LendServer(rig.lending, rig.views, bind_host="127.0.0.1", port=0, max_failures=max_failures,
                                lockout_s=lockout_s, body_timeout_s=body_timeout_s)
            rig.lending.on_grants_changed = server.sync
            return rig, server

        self.rig, self.server = self.run(setup())

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def port(self) -> int:
        return self.server.bound_port

    def close(self) -> None:
        async def teardown():
            await self.server.close()
            await self.rig.close()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:  # connections the fuzzer left half-open
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            self.run(teardown())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
