"""The console's security properties, in real Chromium: scoping, CSRF, escaping, cookies."""

from __future__ import annotations

import json
import re

import httpx
from playwright.async_api import expect

from tests.console.helpers import PASSWORD, create_agent, register, session_cookie

HOSTILE = '<script>alert("xss")</script><img src=x onerror="alert(1)"><b>bold</b>'


async def test_another_owners_agent_and_task_are_not_found(open_page, mesh, uniq):
    w = await open_page()
    page = w.page
    await register(page, f"sec{uniq}")
    other = await mesh.owner()
    theirs = await other.agent("private")
    friend = await other.agent("helper")
    await mesh.befriend(theirs, friend)
    task = await theirs.send(friend.agent_id, "their business")

    for path in (f"/console/agents/{theirs.agent_id}", f"/console/agents/{theirs.agent_id}/delete",
                 f"/console/tasks/{task['task_id']}", f"/console/tasks?agent={theirs.agent_id}",
                 f"/console/groups/no-such-group-{uniq}"):
        resp = await page.goto(path)
        assert resp is not None and resp.status == 404, path
        await expect(page.get_by_role("alert")).to_contain_text("no ")
        assert "their business" not in await page.content()

    # Acting on them is "not found" too, and changes nothing.
    cookie = await session_cookie(page)
    csrf = await page.locator('input[name="csrf"]').first.input_value()
    async with httpx.AsyncClient(base_url=str(mesh.http.base_url),
                                 cookies={"mesh_console": cookie}) as http:
        resp = await http.post(f"/console/agents/{theirs.agent_id}/delete", data={"csrf": csrf})
        assert resp.status_code == 404
        resp = await http.post(f"/console/tasks/{task['task_id']}/cancel", data={"csrf": csrf})
        assert resp.status_code == 404
    assert (await other.get(f"/v1/agents/{theirs.agent_id}")).status_code == 200
    assert (await theirs.get(f"/v1/mesh/tasks/{task['task_id']}")).json()["state"] == "submitted"


async def test_a_state_change_without_the_csrf_token_is_refused(open_page, gateway, uniq):
    w = await open_page()
    page = w.page
    me = f"csrf{uniq}"
    await register(page, me)
    cookie = await session_cookie(page)
    csrf = await page.locator('input[name="csrf"]').first.input_value()
    async with httpx.AsyncClient(base_url=gateway, cookies={"mesh_console": cookie}) as http:
        for data in ({"name": "sneaky"}, {"name": "sneaky", "csrf": "wrong"}):
            resp = await http.post("/console/agents", data=data)
            assert resp.status_code == 403
            assert "CSRF" in resp.text
        assert (await http.post("/console/signout")).status_code == 403
        # The same request with the token works: the refusal was the token.
        resp = await http.post("/console/agents", data={"name": "fine", "csrf": csrf})
        assert resp.status_code == 303
        # A script on the page (htmx) sends the header instead of the field.
        resp = await http.post("/console/agents", data={"name": "viaheader"},
                               headers={"X-CSRF-Token": csrf})
        assert resp.status_code == 303
        # Input Postgres cannot store is a problem page, not a 500.
        resp = await http.post("/console/agents", content=f"name=a%00b&csrf={csrf}",
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert resp.status_code == 422
        assert "NUL" in resp.text and "text/html" in resp.headers["content-type"]
    await page.goto("/console/agents")
    await expect(page.get_by_text(f"fine@{me}")).to_be_visible()
    assert "sneaky" not in await page.content()

    # Before sign-in the forms use a double-submit cookie: a form posted from
    # elsewhere (no cookie, or a token that does not match it) is refused.
    async with httpx.AsyncClient(base_url=gateway) as anon:
        resp = await anon.post("/console/signin", data={"username": me, "password": PASSWORD,
                                                        "csrf": "forged"})
        assert resp.status_code == 403
        assert "mesh_console=" not in resp.headers.get("set-cookie", "").replace(
            "mesh_console_pre=", "")


async def test_html_in_messages_shows_as_text_and_no_script_runs(open_page, mesh, uniq):
    w = await open_page()
    page = w.page
    me = f"xss{uniq}"
    await register(page, me)
    other = await mesh.owner()
    evil = await other.agent("evil")
    mine = await create_agent(page, "target")
    # evil befriends my agent through the API; I accept in the console.
    await evil.post("/v1/mesh/friends/requests", {"to_agent_id": mine, "note": HOSTILE})
    await page.goto("/console/friends")
    await expect(page.get_by_text(HOSTILE)).to_be_visible()
    await page.get_by_role("button", name="Accept").click()

    await page.goto("/console/feed")
    await expect(page.locator("[data-live-status]")).to_have_text("live")
    task = await evil.send(mine, HOSTILE, message={"metadata": {"html": HOSTILE}})
    await evil.post(f"/v1/mesh/tasks/{task['task_id']}/messages", {"parts": [
        {"kind": "data", "data": {"html": HOSTILE}},
        {"kind": "file", "file": {"name": HOSTILE, "uri": "javascript:alert(3)"}}]})
    # Arrives live (built with textContent) and shows the markup as text.
    await expect(page.locator("#feed-list li", has_text='<script>alert("xss")</script>').first
                 ).to_be_visible()

    await page.goto(f"/console/tasks/{task['task_id']}")
    await expect(page.locator(".part.text", has_text=HOSTILE)).to_be_visible()
    shown = await page.locator(".msg > pre.part.data").first.inner_text()
    assert json.loads(shown) == {"html": HOSTILE}  # formatted JSON, as text
    await expect(page.locator(".part.file", has_text=HOSTILE)).to_be_visible()
    assert await page.locator("b", has_text="bold").count() == 0
    assert await page.locator("img[src=x]").count() == 0
    # Only our own two scripts are on the page.
    sources = await page.locator("script").evaluate_all("els => els.map(e => e.src)")
    assert len(sources) == 2 and all(re.search(r"/console/static/", s) for s in sources)
    assert w.dialogs == [], w.dialogs
    assert w.errors == [], w.errors


async def test_session_cookie_flags(open_page, gateway, uniq):
    w = await open_page()
    page = w.page
    await register(page, f"ck{uniq}")
    cookie = next(c for c in await page.context.cookies() if c["name"] == "mesh_console")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/console"
    assert cookie["secure"] is False  # plain http on 127.0.0.1 in this test
    assert "mesh_console" not in await page.evaluate("document.cookie")
    assert await page.evaluate("Object.keys(localStorage).length") == 0

    # Behind TLS (a proxy that says so; uvicorn trusts it from 127.0.0.1) the cookie is Secure.
    async with httpx.AsyncClient(base_url=gateway) as http:
        tls = {"X-Forwarded-Proto": "https"}
        first = await http.get("/console/signin", headers=tls)
        pre = first.cookies["mesh_console_pre"]
        assert "secure" in first.headers["set-cookie"].lower()
        resp = await http.post("/console/signin", headers={**tls, "Cookie": f"mesh_console_pre={pre}"},
                               data={"username": f"ck{uniq}", "password": PASSWORD, "csrf": pre})
        assert resp.status_code == 303
        session = next(v for v in resp.headers.get_list("set-cookie")
                       if v.startswith("mesh_console="))
        flags = {f.strip().lower() for f in session.split(";")[1:]}
        assert {"httponly", "secure", "samesite=strict", "path=/console"} <= flags
