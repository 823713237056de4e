"""The issue's scenario, in real headless Chromium against the real gateway and pipeline:
register, two agents and a key (copied once), friends, a task from the human agent
answered through the API and seen on the live feed, an input-required answer, key
revocation (the agent's next call is 401) and sign-out (the old cookie is refused)."""

from __future__ import annotations

import httpx
from playwright.async_api import expect

from tests.console.browser import shoot
from tests.console.helpers import create_agent, register, session_cookie
from tests.support.meshapi import AgentHandle


async def test_owner_runs_agents_from_the_console(open_page, mesh, gateway, uniq):
    w = await open_page()
    page = w.page

    await page.goto("/console/")
    await expect(page).to_have_url(f"{gateway}/console/signin?next=/console/")
    await shoot(page, "signin")
    await page.goto("/console/register")
    await shoot(page, "register")
    me = f"e2e{uniq}"
    await register(page, me)

    alpha = await create_agent(page, "alpha", "Alpha coder")
    assert alpha == f"alpha@{me}"
    beta = await create_agent(page, "beta", "Beta reviewer")

    # A key for alpha: shown once, with a copy button; never again.
    await page.goto(f"/console/agents/{alpha}")
    await page.get_by_role("button", name="Create API key").click()
    key_field = page.get_by_role("textbox", name="API key")
    api_key = await key_field.input_value()
    assert api_key
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await page.get_by_role("button", name="Copy").click()
    await expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert await page.evaluate("navigator.clipboard.readText()") == api_key
    await shoot(page, "agent-new-key")
    await page.goto(f"/console/agents/{alpha}")
    assert api_key not in await page.content()
    key_id = (await page.locator("table code").first.inner_text()).strip()
    assert api_key.startswith(key_id) or key_id in api_key

    agent = AgentHandle(alpha, api_key, key_id, mesh.http)
    await agent.refresh_token()
    assert (await agent.get("/v1/mesh/me")).status_code == 200

    # Friends: another owner's agent asks beta; the console shows it and accepts.
    other = await mesh.owner()
    peer = await other.agent("peer")
    assert (await peer.post("/v1/mesh/friends/requests",
                            {"to_agent_id": beta, "note": "review my PRs?"})).status_code == 201
    await page.goto("/console/")
    await expect(page.locator('[data-counter="requests"]')).to_have_text("1")
    await page.goto("/console/friends")
    await page.get_by_role("button", name="Accept").click()
    await expect(page.locator("section", has_text=beta).get_by_text(peer.agent_id)).to_be_visible()
    await shoot(page, "friends")
    assert any(f["agent_id"] == beta for f in
               (await peer.get("/v1/mesh/friends")).json()["friends"])

    # A task from the human agent to alpha.
    await page.goto("/console/tasks")
    await page.get_by_label("To agent").fill(alpha)
    await page.get_by_label("Message").fill("Please fix the flaky test")
    await page.get_by_role("button", name="Send task").click()
    await expect(page.locator(".msg", has_text="Please fix the flaky test")).to_be_visible()
    task_id = page.url.rsplit("/", 1)[-1]
    inbox = await agent.inbox()
    assert [e["type"] for e in inbox["events"]] == ["task.created"]
    assert inbox["events"][0]["from_agent_id"] == f"human@{me}"

    # The live feed shows the agent's answer as it happens.
    await page.goto("/console/feed")
    await expect(page.locator("[data-live-status]")).to_have_text("live")
    await agent.reply(task_id, "Looking into it now")
    await expect(page.locator("#feed-list li", has_text="Looking into it now")).to_be_visible()
    await shoot(page, "feed")

    # The agent needs input; the dashboard says so; the human answers on the task page.
    resp = await agent.post(f"/v1/mesh/tasks/{task_id}/status", {"state": "working"})
    assert resp.status_code == 200, resp.text
    resp = await agent.post(f"/v1/mesh/tasks/{task_id}/status", {
        "state": "input-required",
        "message": {"parts": [{"kind": "text", "text": "Which branch?"}]}})
    assert resp.status_code == 200, resp.text
    assert (await agent.post("/v1/mesh/heartbeat")).status_code == 200
    await page.goto("/console/")
    await expect(page.locator('[data-counter="waiting"]')).to_have_text("1")
    await expect(page.locator('[data-counter="online"]')).to_have_text("1")
    await shoot(page, "dashboard")
    await page.get_by_role("link", name=task_id).first.click()
    await expect(page.get_by_text("Which branch?").first).to_be_visible()
    await page.get_by_label(f"Message as {me}").fill("main, please")
    await page.get_by_role("button", name="Send", exact=True).click()
    await expect(page.locator(".msg", has_text="main, please")).to_be_visible()
    history = page.locator("section", has=page.get_by_role("heading", name="State history"))
    await expect(history.locator("li")).to_have_count(3)  # created, → working, → input-required
    await expect(history.locator("li").last).to_contain_text("input-required")
    await shoot(page, "task")
    events = (await agent.inbox())["events"]
    assert events[-1]["type"] == "task.message"
    assert events[-1]["payload"]["message"]["parts"][0]["text"] == "main, please"

    await page.goto(f"/console/tasks?agent={alpha}")
    await expect(page.get_by_role("link", name=task_id)).to_be_visible()
    await shoot(page, "tasks")
    await page.goto("/console/agents")
    await shoot(page, "agents")

    # Revoking the key: the agent's very next call is refused.
    await page.goto(f"/console/agents/{alpha}")
    await page.get_by_role("button", name="Revoke").click()
    await expect(page.get_by_text("Key revoked")).to_be_visible()
    assert w.dialogs and w.dialogs[-1].startswith("confirm:")
    assert (await agent.get("/v1/mesh/me")).status_code == 401

    # Signing out ends the session on the server: the old cookie no longer works.
    cookie = await session_cookie(page)
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    async with httpx.AsyncClient(base_url=gateway, cookies={"mesh_console": cookie}) as old:
        home = await old.get("/console/")
        assert home.status_code == 303
        assert home.headers["location"].startswith("/console/signin")
        assert (await old.get("/console/feed/stream")).status_code == 401
    assert not w.errors, w.errors
