"""Tasks sent to the owner's ``human@{username}``: under "Needs you" with Complete and
Reject, live on the dashboard (its counter and its list agree) and on the task page."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.helpers import sign_in
from tests.support.meshapi import AgentHandle


async def live(page: Page) -> None:
    """The page's feed is connected: what happens from now on reaches it."""
    await expect(page.locator("[data-live-status]")).to_have_text("live")


async def state_of(agent: AgentHandle, task_id: str) -> str:
    resp = await agent.get(f"/v1/mesh/tasks/{task_id}")
    assert resp.status_code == 200, resp.text
    return str(resp.json()["state"])


async def test_a_task_sent_to_me_needs_me_and_completes(open_page, mesh):
    owner = await mesh.owner()
    worker = await owner.agent("worker")
    w = await open_page()
    page = w.page
    await sign_in(page, owner.username, owner.password)
    await live(page)

    waiting = page.locator("#waiting-list li")
    counter = page.locator("[data-counter=waiting]")
    first = await worker.send(owner.human, "please approve the release")
    row = page.locator(f"#waiting-list li[data-task-id='{first['task_id']}']")
    await expect(row).to_be_visible()  # arrived live, no reload
    await expect(counter).to_have_text(str(await waiting.count()))
    assert await counter.inner_text() == "1"

    second = await worker.send(owner.human, "and the changelog")
    await expect(page.locator(f"#waiting-list li[data-task-id='{second['task_id']}']")).to_be_visible()
    await expect(counter).to_have_text("2")
    assert await waiting.count() == 2

    await row.get_by_role("button", name="Complete").click()
    await expect(row).to_have_count(0)
    assert await state_of(worker, first["task_id"]) == "completed"
    await expect(counter).to_have_text(str(await waiting.count()))

    second_row = page.locator(f"#waiting-list li[data-task-id='{second['task_id']}']")
    await second_row.get_by_role("button", name="Reject").click()
    await expect(second_row).to_have_count(0)
    assert await state_of(worker, second["task_id"]) == "rejected"
    await expect(counter).to_have_text("0")
    assert w.errors == [], w.errors


async def test_the_task_page_follows_the_task(open_page, mesh):
    owner = await mesh.owner()
    worker = await owner.agent("worker")
    task = await worker.send(owner.human, "first question")
    w = await open_page()
    page = w.page
    await sign_in(page, owner.username, owner.password)
    await page.goto(f"/console/tasks/{task['task_id']}")
    await expect(page.get_by_role("button", name="Complete")).to_be_visible()
    await expect(page.get_by_role("button", name="Reject")).to_be_visible()
    await live(page)
    await page.evaluate("window.__sameDocument = true")

    # A draft in the answer box survives the live update of the rest of the page.
    await page.get_by_label(f"Message as {owner.username}").fill("half-typed answer")
    await worker.reply(task["task_id"], "a second message, from the worker")
    await expect(page.locator(".msg", has_text="a second message, from the worker")).to_be_visible()
    assert await page.get_by_label(f"Message as {owner.username}").input_value() == "half-typed answer"

    assert (await worker.post(f"/v1/mesh/tasks/{task['task_id']}/status",
                              {"state": "canceled"})).status_code == 200
    await expect(page.locator("[data-task-state]")).to_have_attribute("data-task-state", "canceled")
    await expect(page.locator("#task-history")).to_contain_text("canceled")
    assert await page.evaluate("window.__sameDocument === true")  # no reload happened
    assert w.errors == [], w.errors


async def test_complete_from_the_task_page(open_page, mesh):
    owner = await mesh.owner()
    worker = await owner.agent("worker")
    task = await worker.send(owner.human, "sign this off")
    page = (await open_page(javascript=False)).page
    await sign_in(page, owner.username, owner.password)
    await page.goto(f"/console/tasks/{task['task_id']}")
    await page.get_by_label("Note with the decision").fill("looks good")
    await page.get_by_role("button", name="Complete").click()
    await expect(page.locator("[data-task-state]")).to_have_attribute("data-task-state", "completed")
    assert await state_of(worker, task["task_id"]) == "completed"
    await expect(page.locator(".msg", has_text="looks good")).to_be_visible()
    await expect(page.get_by_role("button", name="Complete")).to_have_count(0)
