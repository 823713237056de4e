"""Real headless Chromium (Debian's ``/usr/bin/chromium``) through Playwright.

A console test gets a fresh browser context (its own cookies) per owner. Every
page records dialogs, console errors and uncaught exceptions, so a test can
prove that no script ran. ``shoot`` writes the page at 1280 px and 390 px: into
a temporary folder, or with ``MESH_CONSOLE_SHOTS=docs/console`` into the folder
docs/console.md shows (how its screenshots are made; a plain test run leaves the
committed ones alone).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page

CHROMIUM = "/usr/bin/chromium"
DOC_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
SHOTS = Path(os.environ.get("MESH_CONSOLE_SHOTS")
             or Path(tempfile.gettempdir()) / "mesh-console-shots")
WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}
FLAGS = ["--disable-background-networking", "--disable-component-update", "--no-first-run",
         "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


@dataclass
class Watched:
    page: Page
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def new_page(browser: Browser, base_url: str, *,
                   javascript: bool = True) -> tuple[BrowserContext, Watched]:
    context = await browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 800},
                                        java_script_enabled=javascript)
    page = await context.new_page()
    watched = Watched(page)

    async def on_dialog(dialog) -> None:  # type: ignore[no-untyped-def]
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        # The console's own confirm() questions are answered yes; tests check the list.
        await dialog.accept()

    page.on("dialog", on_dialog)
    page.on("console", lambda m: watched.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: watched.errors.append(f"pageerror: {exc}"))
    return context, watched


async def shoot(page: Page, name: str) -> None:
    """The current page at both widths (full page), then back to the desktop size."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for label, (width, height) in WIDTHS.items():
        await page.set_viewport_size({"width": width, "height": height})
        await page.screenshot(path=str(SHOTS / f"{name}-{label}.png"), full_page=True)
    await page.set_viewport_size({"width": 1280, "height": 800})
