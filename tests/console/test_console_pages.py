"""Console pages beyond the main scenario: plain HTML without JavaScript, problems
shown next to the form, groups, live dashboard counters, the feed's resume, and
operations for admins."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from httpx_sse import aconnect_sse
from playwright.async_api import expect

from app.platform.settings import Settings
from tests.api_helpers import ok
from tests.console.browser import shoot
from tests.console.helpers import PASSWORD, create_agent, register, session_cookie, sign_in
from tests.support.meshapi import MeshFactory
from tests.support.servers import serve_app


async def test_every_form_works_without_javascript(open_page, mesh, uniq):
    w = await open_page(javascript=False)
    page = w.page
    me = f"nojs{uniq}"
    await register(page, me)
    await page.get_by_role("button", name="Sign out").click()
    await sign_in(page, me)
    agent_id = await create_agent(page, "plain", "Plain HTML")
    await page.get_by_label("Description").fill("works without scripts")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_text("Saved.")).to_be_visible()
    await page.get_by_role("button", name="Create API key").click()
    assert await page.get_by_role("textbox", name="API key").input_value()
    await page.get_by_role("button", name="Revoke").click()  # no confirm() without JS
    await expect(page.get_by_text("Key revoked")).to_be_visible()

    await page.goto("/console/tasks")
    await page.get_by_label("To agent").fill(agent_id)
    await page.get_by_label("Message").fill("no scripts needed")
    await page.get_by_role("button", name="Send task").click()
    await expect(page.locator(".msg", has_text="no scripts needed")).to_be_visible()
    await page.get_by_role("button", name="Cancel task").click()
    await expect(page.locator(".head .badge")).to_have_text("canceled")

    # Filters are a plain GET form.
    await page.goto("/console/tasks")
    await page.get_by_label("State").select_option("canceled")
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(r"state=canceled"))
    assert await page.locator("#task-list tbody tr").count() == 1

    # Deleting asks on a page of its own.
    await page.goto(f"/console/agents/{agent_id}")
    await page.get_by_role("link", name=f"Delete {agent_id}…").click()
    await page.get_by_role("button", name="Delete agent").click()
    await expect(page.get_by_text("Agent deleted.")).to_be_visible()
    assert w.dialogs == []


async def test_a_problem_is_shown_next_to_the_form_that_caused_it(open_page, uniq):
    w = await open_page()
    page = w.page
    me = f"prob{uniq}"
    await register(page, me)
    await create_agent(page, "dup")
    await page.goto("/console/agents")
    form = page.locator("#create")
    await form.get_by_label("Name", exact=True).fill("dup")
    async with page.expect_response(lambda r: r.request.method == "POST") as posted:
        await form.get_by_role("button", name="Create agent").click()
    assert (await posted.value).status == 409
    await expect(form.get_by_role("alert")).to_contain_text("already have an agent named 'dup'")

    await page.goto("/console/tasks")
    await page.get_by_label("To agent").fill(f"nobody@{me}")
    await page.get_by_label("Message").fill("hello?")
    await page.get_by_role("button", name="Send task").click()
    await expect(page.locator("#start").get_by_role("alert")).to_contain_text("unknown agent")

    await page.goto(f"/console/agents/dup@{me}")
    await page.get_by_label("Skills").fill("[{not json")
    await page.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("alert")).to_contain_text("skills must be a JSON list")
    await shoot(page, "agent-problem")
    # Nothing raw: no stack trace, no JSON body in the page.
    assert "Traceback" not in await page.content()


async def test_groups_and_live_dashboard_counters(open_page, mesh, uniq):
    w = await open_page()
    page = w.page
    me = f"grp{uniq}"
    await register(page, me)
    mine = await create_agent(page, "lead")
    other = await mesh.owner()
    peer = await other.agent("peer")
    stranger = await other.agent("stranger")

    # The dashboard's counters follow the feed: a request arrives, the number changes.
    await page.goto("/console/")
    await expect(page.locator("[data-live-status]")).to_have_text("live")
    await expect(page.locator('[data-counter="requests"]')).to_have_text("0")
    await peer.post("/v1/mesh/friends/requests", {"to_agent_id": mine})
    await expect(page.locator('[data-counter="requests"]')).to_have_text("1")
    await page.goto("/console/friends")
    await page.get_by_role("button", name="Accept").click()

    await page.goto("/console/groups")
    await page.get_by_label("Group id").fill(f"team-{uniq}")
    await page.get_by_label("Name").fill("Release team")
    await page.get_by_role("button", name="Create group").click()
    await expect(page.get_by_role("heading", name="Release team")).to_be_visible()
    for agent_id, role in ((mine, "owner"), (peer.agent_id, "member")):
        await page.get_by_label("Agent", exact=False).fill(agent_id)
        await page.get_by_label("Role").select_option(role)
        await page.get_by_role("button", name="Add").click()
        await expect(page.locator("table", has_text=agent_id)).to_be_visible()
    # Another owner's agent that is no friend of mine cannot be added.
    await page.get_by_label("Agent", exact=False).fill(stranger.agent_id)
    await page.get_by_role("button", name="Add").click()
    await expect(page.get_by_role("alert")).to_contain_text("befriend it first")
    # peer, another owner's, is only invited: it joins when it accepts; then its
    # owner's console takes it out again (ADR 030).
    assert (await peer.get(f"/v1/mesh/groups/team-{uniq}/roster")).status_code == 404
    ok(await peer.post(f"/v1/mesh/groups/invitations/team-{uniq}/accept"))
    roster = (await peer.get(f"/v1/mesh/groups/team-{uniq}/roster")).json()
    assert {m["agent_id"]: m["role"] for m in roster["members"]} == {mine: "owner",
                                                                     peer.agent_id: "member"}
    await page.reload()
    await shoot(page, "group")
    await page.locator("tr", has_text=peer.agent_id).get_by_role("button", name="Remove").click()
    await expect(page.locator("table", has_text=peer.agent_id)).to_have_count(0)
    await page.goto("/console/groups")
    await shoot(page, "groups")
    # My own agent leaves the group from the groups page.
    await page.locator("tr", has_text=mine).get_by_role("button", name="Leave").click()
    await expect(page.locator("tr", has_text=mine)).to_have_count(0)
    # The refused add answered 403 (Chromium logs a status line for that); nothing else.
    assert [e for e in w.errors if not e.startswith("Failed to load resource")] == []


async def test_the_feed_resumes_after_a_reconnect_without_gaps(open_page, mesh, gateway, uniq):
    w = await open_page()
    page = w.page
    await register(page, f"feed{uniq}")
    mine = await create_agent(page, "sink")
    cookie = await session_cookie(page)
    other = await mesh.owner()
    src = await other.agent("src")
    req = (await src.post("/v1/mesh/friends/requests", {"to_agent_id": mine})).json()
    await page.goto("/console/friends")
    await page.get_by_role("button", name="Accept").click()
    await expect(page.get_by_text(src.agent_id).first).to_be_visible()
    assert req["request_id"]

    async def read(n: int, last_id: str | None) -> tuple[list[dict], str]:
        headers = {"Last-Event-ID": last_id} if last_id else {}
        got: list[dict] = []
        async with httpx.AsyncClient(base_url=gateway, timeout=None,
                                     cookies={"mesh_console": cookie}) as http, \
                aconnect_sse(http, "GET", "/console/feed/stream", headers=headers) as source:
            async for sse in source.aiter_sse():
                if sse.data:
                    got.append(json.loads(sse.data))
                    last_id = sse.id
                    if len(got) == n:
                        assert last_id is not None
                        return got, last_id
        raise AssertionError("stream ended early")

    first = await src.send(mine, "one")
    got, last = await asyncio.wait_for(read(1, f"{mine}=0"), 30)
    # friend.request was seq 1 (and is before the cursor we gave: 0 → it comes too)
    seqs = [g["event"]["seq"] for g in got]
    assert seqs == [1]
    rest, last = await asyncio.wait_for(read(1, last), 30)
    assert rest[0]["event"]["type"] == "task.created"
    # Disconnected: three more arrive; the reconnect with the last id gets exactly those.
    for text in ("two", "three", "four"):
        await src.send(mine, text)
    again, _ = await asyncio.wait_for(read(3, last), 30)
    base = rest[0]["event"]["seq"]
    assert [g["event"]["seq"] for g in again] == [base + 1, base + 2, base + 3]
    assert [g["event"]["payload"]["message"]["parts"][0]["text"] for g in again] == [
        "two", "three", "four"]
    # Watching is not delivery: the agent's receipts still say queued.
    assert all(m["receipt"]["status"] == "queued" for m in
               (await src.get(f"/v1/mesh/tasks/{first['task_id']}")).json()["messages"])


@pytest.fixture
async def admin_web(iso: Settings, uniq: str) -> AsyncIterator[tuple[str, str]]:
    admin = f"ops{uniq}"
    async with serve_app(iso.model_copy(update={"admin_usernames": [admin]})) as url:
        yield url, admin


async def test_operations_page_shows_dead_letters_and_retries(open_page, admin_web, pool: asyncpg.Pool):
    url, admin = admin_web
    async with MeshFactory.connect(url) as mesh:
        a, b = await mesh.pair()
        for i in range(3):
            await a.send(b.agent_id, f"doomed {i}")
    # No relay runs on this database; the rows are failed as a relay gives up on them.
    await pool.execute("UPDATE outbox_events SET status = 'failed', attempts = 10, "
                       "last_error = 'MessageSizeTooLargeError: the record is over the broker limit'")
    w = await open_page(url)
    page = w.page
    await register(page, admin)
    await expect(page.locator('[data-counter="dead"]')).to_have_text(str(
        await pool.fetchval("SELECT count(*) FROM outbox_events WHERE status = 'failed'")))
    await page.get_by_role("link", name="Operations").click()
    await expect(page.get_by_text("MessageSizeTooLargeError").first).to_be_visible()
    await shoot(page, "ops")
    failed = await pool.fetchval("SELECT count(*) FROM outbox_events WHERE status = 'failed'")
    await page.locator("tbody tr").first.get_by_role("button", name="Retry").click()
    await expect(page.get_by_text("1 dead letter(s) back to pending")).to_be_visible()
    assert await pool.fetchval("SELECT count(*) FROM outbox_events WHERE status = 'failed'") == failed - 1
    await page.get_by_role("button", name="Retry all").click()
    await expect(page.get_by_text(f"{failed - 1} dead letter(s) back to pending")).to_be_visible()
    await expect(page.get_by_text("No dead letters")).to_be_visible()

    # A non-admin owner gets a 403 page, not the outbox.
    w2 = await open_page(url)
    await register(w2.page, f"not{admin}")
    resp = await w2.page.goto("/console/ops")
    assert resp is not None and resp.status == 403


async def test_tasks_page_pages_and_searches_message_text(open_page, mesh, uniq):
    w = await open_page()
    page = w.page
    me = f"pg{uniq}"
    await register(page, me)
    worker = await create_agent(page, "worker")
    token = (await mesh.http.post("/v1/auth/login", json={"username": me, "password": PASSWORD})
             ).json()["access_token"]
    as_me = {"Authorization": f"Bearer {token}"}  # an owner token acts as human@{me}
    for i in range(27):
        text = "find the needle here" if i == 3 else f"routine job {i}"
        resp = await mesh.http.post("/v1/mesh/tasks", headers=as_me, json={
            "to_agent_id": worker, "message": {"parts": [{"kind": "text", "text": text}]}})
        assert resp.status_code == 201

    await page.goto("/console/tasks")
    rows = page.locator("#task-list tbody tr")
    await expect(rows).to_have_count(25)
    first_page = set(await rows.locator("td:first-child").all_inner_texts())
    await page.get_by_role("link", name="Older tasks →").click()
    await expect(rows).to_have_count(2)
    second_page = set(await rows.locator("td:first-child").all_inner_texts())
    assert not first_page & second_page
    assert await page.get_by_role("link", name="Older tasks →").count() == 0

    await page.goto("/console/tasks")
    await page.get_by_label("Text", exact=True).fill("NEEDLE")
    async with page.expect_request(lambda r: r.headers.get("hx-request") == "true") as swapped:
        await page.get_by_label("Text", exact=True).press("Enter")
    assert "q=NEEDLE" in (await swapped.value).url  # htmx refreshed the list in place
    await expect(rows).to_have_count(1)
    await expect(page).to_have_url(re.compile(r"q=NEEDLE"))
    await rows.first.get_by_role("link").click()
    await expect(page.locator(".msg", has_text="find the needle here")).to_be_visible()
    # A LIKE wildcard is searched for literally, not as "anything".
    await page.goto("/console/tasks?q=%25")
    await expect(page.get_by_text("No tasks match.")).to_be_visible()
    assert w.errors == [], w.errors  # htmx runs under the console's CSP


async def test_registration_can_be_closed(open_page, migrated: Settings):
    async with serve_app(migrated.model_copy(update={"registration_enabled": False})) as url:
        w = await open_page(url)
        page = w.page
        await page.goto("/console/signin")
        assert await page.get_by_role("link", name="Register").count() == 0
        await page.goto("/console/register")
        await expect(page.get_by_role("alert")).to_contain_text("Registration is disabled")
        assert await page.get_by_role("button", name="Register").count() == 0
