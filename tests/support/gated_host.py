"""A real Host whose start waits for the test: what the tray app shows while its engine starts.

`GatedHost.start` takes the home, then waits for `release` (an asyncio.Event the test
sets) before starting as a Host does; `waiting` says it is held there. Stops are
counted, so a test can tell the host was stopped once. `GatedHosts` makes one per
`Host(paths, settings)` the app calls, with the session's Secret Service keyring and
no control API, and keeps them in `made`.
"""

from __future__ import annotations

import asyncio

from cadre_desktop.host.host import Host


class GatedHost(Host):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.waiting = False
        self.stops = 0

    async def start(self) -> None:
        self.take_home()
        self.waiting = True
        try:
            await self.release.wait()
        except BaseException:
            self._lock.release()  # never started: the home is let go, as a failed start does
            raise
        finally:
            self.waiting = False
        await super().start()

    async def stop(self, stop_nodes: bool | None = None) -> None:
        self.stops += 1
        await super().stop(stop_nodes)


class GatedHosts:
    """A stand-in for the `Host` class the tray app builds its host with."""

    def __init__(self) -> None:
        self.made: list[GatedHost] = []

    def __call__(self, paths, settings) -> GatedHost:
        import keyring.backends.SecretService

        from cadre_desktop.host.core.vault.secrets import SecretStore

        host = GatedHost(paths, settings, secrets=SecretStore(keyring.backends.SecretService.Keyring()),
                         serve_control_api=False)
        self.made.append(host)
        return host
