"""Fixtures for the console's browser tests: one Chromium for the session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from playwright.async_api import Browser, async_playwright

from tests.console.browser import FLAGS, Watched, chromium_path, new_page


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    path = chromium_path()
    if path is None:
        pytest.fail("Debian's chromium is not installed (apt-get install chromium; .ci/run does)")
    # Playwright gives every launch a fresh temporary profile (--user-data-dir) itself.
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=path, args=FLAGS)
        yield b
        await b.close()


@pytest.fixture
async def open_page(browser: Browser, gateway: str
                    ) -> AsyncIterator[Callable[..., Awaitable[Watched]]]:
    """A fresh browser context (own cookies) on the gateway, or on ``base_url``."""
    contexts = []

    async def make(base_url: str | None = None, *, javascript: bool = True) -> Watched:
        context, watched = await new_page(browser, base_url or gateway, javascript=javascript)
        contexts.append(context)
        return watched

    yield make
    for c in contexts:
        await c.close()
