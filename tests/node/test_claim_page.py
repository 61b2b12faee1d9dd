"""GET /claim: the page a phone opens from the QR code, checked as HTML and in a
real headless Chromium that fills it in and submits it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.cdp import CHROMIUM, Browser, Page
from tests.support.node_process import NodeLauncher, poll


async def test_claim_page_is_self_contained_and_mobile_ready(nodes: NodeLauncher) -> None:
    node = await nodes.start("page-1")
    reply = await node.get("/claim?node=page-1")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/html")
    page = reply.body
    assert '<meta name="viewport" content="width=device-width' in page
    assert "page-1" in page
    assert "location.hash" in page and 'fetch("/claim"' in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page
    csp = reply.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert node.claim_secret not in page


async def test_claim_page_escapes_the_node_query(nodes: NodeLauncher) -> None:
    node = await nodes.start("page-2")
    reply = await node.get("/claim?node=%3Cscript%3Ealert(1)%3C/script%3E")
    assert reply.status == 200
    assert "<script>alert(1)" not in reply.body
    assert "&lt;script&gt;" in reply.body


@pytest.fixture
async def page(tmp_path: Path, http: aiohttp.ClientSession) -> AsyncIterator[Page]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium absent)")
    browser = Browser(tmp_path / "chromium-profile")
    try:
        await browser.start()
        opened = await browser.open_page(http)
        try:
            yield opened
        finally:
            await opened.close()
    finally:
        browser.stop()


async def text_of(page: Page, element_id: str) -> str:
    return await page.evaluate(
        f"(document.getElementById({element_id!r}) || {{}}).textContent || ''"
    )


async def wait_for_form(page: Page) -> None:
    async def ready() -> bool:
        return await page.evaluate(
            "document.readyState === 'complete' && !!document.getElementById('cadre')"
        )

    await poll(ready, deadline_s=10, what="the claim page to load")


@pytest.mark.slow
async def test_phone_claims_the_node_from_the_page(nodes: NodeLauncher, page: Page) -> None:
    node = await nodes.start("page-3")
    await page.navigate(f"{node.url}/claim?node=page-3#{node.claim_secret}")
    await wait_for_form(page)
    assert "page-3" in await text_of(page, "app")

    await page.evaluate(
        "document.getElementById('cadre').value = 'family';"
        "document.getElementById('submit').click(); true"
    )

    async def claimed() -> str | None:
        text = await text_of(page, "result")
        return text if "Claimed" in text else None

    message = await poll(claimed, deadline_s=10, what="the page to say Claimed")
    assert "Claimed into family" in message
    status = await node.status()
    assert status["state"] == "joined" and status["cadre"] == "family"

    # A rival with the same QR code is told so in words; the last cadre name is
    # remembered by the browser.
    await page.navigate("about:blank")
    await page.navigate(f"{node.url}/claim?node=page-3#{node.claim_secret}")
    await wait_for_form(page)
    assert await page.evaluate("document.getElementById('cadre').value") == "family"
    await page.evaluate(
        "document.getElementById('cadre').value = 'rivals';"
        "document.getElementById('submit').click(); true"
    )

    async def refused() -> str | None:
        text = await text_of(page, "result")
        return text if "already claimed" in text else None

    assert "another cadre" in await poll(refused, deadline_s=10, what="the refusal")


@pytest.mark.slow
async def test_page_without_a_secret_asks_to_scan_again(nodes: NodeLauncher, page: Page) -> None:
    node = await nodes.start("page-4")
    await page.navigate(f"{node.url}/claim?node=page-4")
    await wait_for_form(page)

    async def explained() -> str | None:
        text = await text_of(page, "result")
        return text if "Scan the QR code" in text else None

    await poll(explained, deadline_s=10, what="the missing-code message")
    assert await page.evaluate("document.getElementById('submit').disabled") is True
