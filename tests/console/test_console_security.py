"""The console's security properties, in real Chromium: scoping, CSRF, escaping, cookies."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis
from playwright.async_api import Page, expect

from app.platform.settings import Settings
from tests.console.helpers import PASSWORD, create_agent, register, session_cookie
from tests.support.isolated import wait_until
from tests.support.servers import serve_app

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


# --- one throttle for every way in (ADR 032) --------------------------------------

SLOW = 0.0001  # a refill so slow that no test sees a token come back


@pytest.fixture
async def throttled(migrated: Settings, redis_client: aioredis.Redis,
                    request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A gateway of its own with the login throttle on (the session's has it off)
    and the settings ``request.param`` names."""
    async for key in redis_client.scan_iter("mesh:auth:*"):
        await redis_client.delete(key)
    update = {"auth_throttle_enabled": True, **getattr(request, "param", {})}
    async with serve_app(migrated.model_copy(update=update)) as url:
        yield url


async def from_address(page: Page, address: str) -> None:
    # uvicorn trusts X-Forwarded-For from 127.0.0.1, as behind a real proxy.
    await page.context.set_extra_http_headers({"X-Forwarded-For": address})


async def submit(page: Page, form: str, username: str, password: str) -> tuple[int, dict[str, str]]:
    """Fill and send the sign-in (``form="signin"``) or register form as a person
    does; the status and headers of the POST's answer."""
    await page.goto(f"/console/{form}")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    button = "Sign in" if form == "signin" else "Register"
    async with page.expect_response(lambda r: r.url.endswith(f"/console/{form}")
                                    and r.request.method == "POST") as answer:
        await page.get_by_role("button", name=button).click()
    resp = await answer.value
    await page.wait_for_load_state()
    return resp.status, resp.headers


async def has_session(page: Page) -> bool:
    return any(c["name"] == "mesh_console" for c in await page.context.cookies())


@pytest.mark.parametrize("throttled", [{"auth_limits": {"login_failures": (SLOW, 3),
                                                         "login_failures_account": (SLOW, 6)}}],
                         indirect=True)
async def test_console_sign_in_meets_the_apis_login_throttle(open_page, throttled, uniq):
    victim = f"vic{uniq}"
    async with httpx.AsyncClient(base_url=throttled, headers={"X-Forwarded-For": "10.7.0.9"}
                                 ) as http:
        resp = await http.post("/v1/auth/register", json={"username": victim,
                                                          "password": PASSWORD})
        assert resp.status_code == 201, resp.text

    guesser = (await open_page(throttled)).page
    await from_address(guesser, "10.7.0.1")
    statuses = [(await submit(guesser, "signin", victim, f"guess {i} wrong"))[0]
                for i in range(12)]
    assert statuses == [401] * 3 + [429] * 9, statuses
    # The right password from the guesser's address is refused too (no hash spent),
    # shown on the form with the problem's detail and Retry-After.
    status, headers = await submit(guesser, "signin", victim, PASSWORD)
    assert status == 429 and int(headers["retry-after"]) >= 1
    await expect(guesser.get_by_role("alert")).to_contain_text("failed logins for this account")
    await expect(guesser.get_by_role("alert")).to_contain_text("retry after")
    assert not await has_session(guesser)

    # The API counts the console's failures: the same address is locked there too.
    async with httpx.AsyncClient(base_url=throttled) as http:
        resp = await http.post("/v1/auth/login", json={"username": victim, "password": PASSWORD},
                               headers={"X-Forwarded-For": "10.7.0.1"})
        assert resp.status_code == 429, resp.text
        # Guesses from more addresses through the API use up the account's bucket ...
        for address in ("10.7.0.2", "10.7.0.3", "10.7.0.4"):
            resp = await http.post("/v1/auth/login", json={"username": victim,
                                                           "password": "still wrong"},
                                   headers={"X-Forwarded-For": address})
            assert resp.status_code == 401, resp.text
    # ... and the account is locked for the console as well, from a new address.
    owner = (await open_page(throttled)).page
    await from_address(owner, "10.7.0.5")
    status, headers = await submit(owner, "signin", victim, PASSWORD)
    assert status == 429 and int(headers["retry-after"]) >= 1
    await expect(owner.get_by_role("alert")).to_contain_text("failed logins for this account")
    assert not await has_session(owner)


@pytest.mark.parametrize("throttled", [{"auth_limits": {"register": (SLOW, 2)}}], indirect=True)
async def test_console_registration_meets_the_per_address_throttle(open_page, throttled, uniq):
    page = (await open_page(throttled)).page
    await from_address(page, "10.8.0.1")
    statuses = []
    for i in range(5):
        await page.context.clear_cookies()  # a new visitor each time, same address
        statuses.append((await submit(page, "register", f"reg{i}{uniq}", PASSWORD))[0])
    assert statuses == [303, 303, 429, 429, 429], statuses
    await expect(page.get_by_role("alert")).to_contain_text("too many registrations")
    async with httpx.AsyncClient(base_url=throttled) as http:
        resp = await http.post("/v1/auth/register", json={"username": f"reg9{uniq}",
                                                          "password": PASSWORD},
                               headers={"X-Forwarded-For": "10.8.0.1"})
        assert resp.status_code == 429, resp.text


@pytest.mark.parametrize("throttled", [{"kdf_queue": 0}], indirect=True)
async def test_console_password_checks_share_the_bounded_hasher(open_page, mesh, throttled):
    """With no room in the hasher's queue, every password check is refused:
    the console's too, so its hashes are the same bounded ones as the API's."""
    owner = await mesh.owner()  # registered through the session's gateway
    async with httpx.AsyncClient(base_url=throttled) as http:
        resp = await http.post("/v1/auth/login", json={"username": owner.username,
                                                       "password": owner.password})
        assert resp.status_code == 503, resp.text
    page = (await open_page(throttled)).page
    status, headers = await submit(page, "signin", owner.username, owner.password)
    assert status == 503 and headers["retry-after"] == "1"
    await expect(page.get_by_role("alert")).to_contain_text("too many logins")
    assert not await has_session(page)


# --- the live feed's streams are capped per owner ----------------------------------

FEED_CAP = 4


@pytest.mark.parametrize("throttled", [{"console_feed_max_streams_per_owner": FEED_CAP}],
                         indirect=True)
async def test_feed_streams_per_owner_are_capped(open_page, throttled, uniq):
    page = (await open_page(throttled)).page
    await register(page, f"feed{uniq}")
    # The dashboard's live updates are the first of the owner's feed streams.
    await expect(page.locator("[data-live-status]")).to_have_text("live")
    cookie = await session_cookie(page)
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx.AsyncClient(
            base_url=throttled, cookies={"mesh_console": cookie}, timeout=30))

        async def open_feed() -> httpx.Response:
            return await stack.enter_async_context(http.stream("GET", "/console/feed/stream"))

        # A script with the session cookie opens cap + 2 more.
        opened = [await open_feed() for _ in range(FEED_CAP + 2)]
        statuses = [r.status_code for r in opened]
        assert statuses == [200] * (FEED_CAP - 1) + [429] * 3, statuses
        refused = opened[-1]
        await refused.aread()
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert "live-feed streams" in refused.json()["detail"]
        assert int(refused.headers["Retry-After"]) >= 1

        # Another owner is not affected by this one's streams.
        other = (await open_page(throttled)).page
        await register(other, f"feed2{uniq}")
        async with httpx.AsyncClient(base_url=throttled, timeout=30,
                                     cookies={"mesh_console": await session_cookie(other)}
                                     ) as theirs, theirs.stream("GET", "/console/feed/stream") as r:
            assert r.status_code == 200

        # Closing one stream frees its slot.
        await opened[0].aclose()

        async def reopened() -> bool:
            async with http.stream("GET", "/console/feed/stream") as r:
                return r.status_code == 200
        await wait_until(reopened, "a slot freed by a closed feed stream")
