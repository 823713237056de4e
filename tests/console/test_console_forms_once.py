"""Forms as a new user meets them: a secret shown once survives no reload and is made
once; a form's address opened with GET is a page; a too-large form keeps its text."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
from playwright.async_api import expect

from app.console.routes import console_routes
from app.platform.settings import Settings
from tests.console.helpers import PASSWORD, create_agent, register

MIB = 1024 * 1024


async def key_count(gateway: str, username: str, agent_id: str) -> int:
    """The agent's keys as the API lists them to its owner."""
    async with httpx.AsyncClient(base_url=gateway) as http:
        token = (await http.post("/v1/auth/login", json={"username": username,
                                                          "password": PASSWORD})).json()["access_token"]
        resp = await http.get(f"/v1/agents/{agent_id}/keys",
                              headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    return len(body["keys"] if isinstance(body, dict) else body)


async def test_new_key_page_reloaded_makes_no_second_key(open_page, gateway, uniq):
    w = await open_page()
    page = w.page
    me = f"once{uniq}"
    await register(page, me)
    agent_id = await create_agent(page, "keyed")
    await page.get_by_role("button", name="Create API key").click()
    key = await page.get_by_role("textbox", name="API key").input_value()
    assert key.startswith("mk_")
    url = page.url
    assert "/keys" not in url and key not in url  # redirected: the URL names a flash, not the key

    for _ in range(3):
        resp = await page.reload()
        assert resp is not None and resp.status == 200
        await expect(page.locator("[data-key-gone]")).to_contain_text("shown once")
        assert key not in await page.content()

    assert await key_count(gateway, me, agent_id) == 1

    # Another session of the same owner cannot take a flash it did not make.
    await page.goto(f"/console/agents/{agent_id}")
    await page.get_by_role("button", name="Create API key").click()
    second = await page.get_by_role("textbox", name="API key").input_value()
    other = (await open_page()).page
    await other.goto("/console/signin")
    await other.get_by_label("Username").fill(me)
    await other.get_by_label("Password").fill(PASSWORD)
    await other.get_by_role("button", name="Sign in").click()
    await other.goto(url)
    assert second not in await other.content()

    assert w.errors == [], w.errors
    # The form's own address, opened again (history, a copied link): a page, not JSON.
    resp = await page.goto(f"/console/agents/{agent_id}/keys")
    assert resp is not None and resp.status == 405
    assert resp.headers["content-type"].startswith("text/html")
    await expect(page.get_by_role("heading", name="Nothing to show here")).to_be_visible()
    await page.get_by_role("link", name="Go to the page with the form").click()
    await expect(page).to_have_url(re.compile(re.escape(f"/console/agents/{agent_id}") + "$"))
    assert await key_count(gateway, me, agent_id) == 2


async def test_webhook_secret_is_shown_once_and_reload_saves_nothing(open_page, uniq, db):
    page = (await open_page(javascript=False)).page
    await register(page, f"hk{uniq}")
    agent_id = await create_agent(page, "hooked")
    await page.get_by_label("Webhook URL").fill("https://93.184.215.14/hooks/once")
    await page.get_by_role("button", name="Register webhook").click()
    secret = await page.get_by_role("textbox", name="Webhook secret").input_value()
    stored = await db.fetchval("SELECT updated_at FROM agent_webhooks WHERE agent_id = $1", agent_id)
    await page.reload()
    await expect(page.locator("[data-secret-gone]")).to_be_visible()
    assert secret not in await page.content()
    assert await db.fetchval("SELECT updated_at FROM agent_webhooks WHERE agent_id = $1",
                             agent_id) == stored


async def test_every_form_address_opened_with_get_is_a_page(open_page, uniq):
    page = (await open_page(javascript=False)).page
    await register(page, f"get{uniq}")
    posts = _post_only_paths()
    assert len(posts) >= 15
    for path in posts:
        resp = await page.goto(path)
        assert resp is not None and resp.status == 405, path
        assert resp.headers["content-type"].startswith("text/html"), path
        await expect(page.get_by_role("heading", name="Nothing to show here")).to_be_visible()


# Sample path values; any other parameter a route names gets a plain id.
SAMPLE = {"agent_id": "x@y", "key_id": "k1", "task_id": "t-1", "request_id": "r1",
          "friend_id": "f@y", "group_id": "g1", "verb": "accept", "row_id": "1"}


def _paths(keep: Callable[[Any], bool]) -> list[str]:
    mount = console_routes()[0]
    return sorted({"/console" + re.sub(r"\{(\w+)(:\w+)?\}",
                                       lambda m: SAMPLE.get(m.group(1), "p1"), r.path)
                   for r in mount.routes if keep(r)})


def _post_only_paths() -> list[str]:
    """Every console address that takes only POST, with sample path values."""
    return _paths(lambda r: getattr(getattr(r, "endpoint", None), "post_only", False))


def _post_paths() -> list[str]:
    return _paths(lambda r: bool(getattr(r, "methods", None)) and "POST" in r.methods)


async def test_too_large_message_keeps_the_text_next_to_the_form(open_page, uniq, migrated: Settings):
    w = await open_page()
    page = w.page
    me = f"big{uniq}"
    await register(page, me)
    worker = await create_agent(page, "worker")
    await page.goto("/console/tasks")
    await page.get_by_label("To agent").fill(worker)
    size = migrated.max_body_bytes + MIB // 4  # over the limit, under the console's own
    await page.evaluate("n => { document.getElementById('text').value = 'x'.repeat(n); }", size)
    async with page.expect_response(lambda r: r.request.method == "POST") as answered:
        await page.get_by_role("button", name="Send task").click()
    resp = await answered.value
    assert resp.status == 413 and resp.headers["content-type"].startswith("text/html")
    # next to the form: the alert is the form's previous sibling
    alert = page.locator("form:has(#text)").locator("xpath=preceding-sibling::*[1]")
    await expect(alert).to_have_attribute("role", "alert")
    await expect(alert).to_contain_text("too large to send")
    await expect(alert).to_contain_text("MiB")
    assert await page.evaluate("document.getElementById('text').value.length") == size
    assert await page.get_by_label("To agent").input_value() == worker

    # Past the console's own limit the server cannot echo the text: the page stops the send.
    huge = migrated.console_form_max_bytes + 1
    await page.evaluate("n => { document.getElementById('text').value = 'y'.repeat(n); }", huge)
    await page.get_by_role("button", name="Send task").click()
    await expect(page.locator("[data-size-problem]")).to_contain_text("Too large to send")
    assert await page.evaluate("document.getElementById('text').value.length") == huge
    assert [e for e in w.errors if "status of 413" not in e] == [], w.errors


async def test_every_console_form_answers_a_page_for_an_oversized_body(open_page, gateway, uniq,
                                                                       migrated: Settings):
    """Posted as a browser posts (the session cookie and a form body), over the body
    limit and over the console's own: always HTML, never JSON."""
    page = (await open_page()).page
    await register(page, f"ovr{uniq}")
    cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
    token = await page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token']")
    # signing out last: it ends the session the others need
    paths = sorted(_post_paths(), key=lambda p: p.endswith("/signout"))
    assert len(paths) >= 25
    bodies = {"over the limit": migrated.max_body_bytes + 1,
              "over the console's": migrated.console_form_max_bytes + 1}
    seen = 0
    async with httpx.AsyncClient(base_url=gateway, cookies=cookies) as http:
        for path in paths:
            for label, n in bodies.items():
                resp = await http.post(path, content=b"csrf=" + token.encode() + b"&text=" + b"z" * n,
                                       headers={"Content-Type": "application/x-www-form-urlencoded"})
                ctype = resp.headers.get("content-type", "")
                assert resp.status_code < 500, (path, label, resp.status_code)
                assert "json" not in ctype, (path, label, resp.status_code, resp.text[:200])
                assert ctype.startswith("text/html") or resp.status_code == 303, (path, label, ctype)
                seen += 1
    assert seen == 2 * len(paths)
