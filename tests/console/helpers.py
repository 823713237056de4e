"""Driving the console the way a person does: labels, buttons, links."""

from __future__ import annotations

from playwright.async_api import Page, expect

PASSWORD = "correct horse battery"


async def register(page: Page, username: str, password: str = PASSWORD) -> None:
    await page.goto("/console/register")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Register").click()
    await expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


async def sign_in(page: Page, username: str, password: str = PASSWORD) -> None:
    await page.goto("/console/signin")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


async def create_agent(page: Page, name: str, display: str = "") -> str:
    await page.goto("/console/agents")
    form = page.locator("#create")
    await form.get_by_label("Name", exact=True).fill(name)
    if display:
        await form.get_by_label("Display name").fill(display)
    await form.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_role("heading", name="Profile")).to_be_visible()
    return page.url.rsplit("/", 1)[-1]


async def session_cookie(page: Page) -> str:
    cookies = await page.context.cookies()
    return next(c["value"] for c in cookies if c["name"] == "mesh_console")
