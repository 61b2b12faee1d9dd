"""A headless Chromium driven over the Chrome DevTools Protocol, for page tests.

Only what the claim page test needs: start the browser with a throwaway profile,
open a page, navigate, and evaluate JavaScript. Uses aiohttp's websocket client,
so the tests need no browser-automation package.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = Path("/usr/bin/chromium")
START_DEADLINE_S = 30.0


class Browser:
    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    async def start(self) -> None:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = open(self.profile.parent / "chromium.log", "wb")
        with log:
            self.proc = subprocess.Popen(
                [
                    str(CHROMIUM),
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    f"--user-data-dir={self.profile}",
                    "--remote-debugging-port=0",
                    "about:blank",
                ],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop it whole
            )
        port_file = self.profile / "DevToolsActivePort"
        end = time.monotonic() + START_DEADLINE_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            text = port_file.read_text() if port_file.exists() else ""
            if text.strip():
                self.port = int(text.splitlines()[0])
                return
            if time.monotonic() > end:
                raise RuntimeError("chromium did not write DevToolsActivePort")
            await asyncio.sleep(0.05)

    async def open_page(self, session: aiohttp.ClientSession) -> Page:
        base = f"http://127.0.0.1:{self.port}"
        async with session.get(f"{base}/json/list") as resp:
            targets = await resp.json()
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            async with session.put(f"{base}/json/new?about:blank") as resp:
                pages = [await resp.json()]
        ws = await session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        page = Page(ws)
        page.start()
        return page

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = message.json()
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionError("devtools connection closed"))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[ident] = future
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 10)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def close(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            await self._reader
