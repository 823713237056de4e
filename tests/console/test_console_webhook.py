"""The agent page's webhook card: register (secret shown once), state, refusal, removal
(ADR 035)."""

from __future__ import annotations

from playwright.async_api import expect

from tests.console.helpers import create_agent, register

PUBLIC = "https://93.184.215.14/hooks/console"


async def test_register_see_state_and_remove_a_webhook(open_page, uniq, db):
    w = await open_page(javascript=False)
    page = w.page
    await register(page, f"hook{uniq}")
    agent_id = await create_agent(page, "hooked")

    await page.get_by_label("Webhook URL").fill("http://169.254.169.254/latest/meta-data/")
    await page.get_by_role("button", name="Register webhook").click()
    await expect(page.get_by_text("link-local")).to_be_visible()
    assert await db.fetchval("SELECT count(*) FROM agent_webhooks WHERE agent_id = $1",
                             agent_id) == 0

    await page.get_by_label("Webhook URL").fill(PUBLIC)
    await page.get_by_role("button", name="Register webhook").click()
    secret = await page.get_by_role("textbox", name="Webhook secret").input_value()
    assert secret.startswith("whsec_")
    await expect(page.locator(".webhook-status")).to_have_attribute("data-status", "ok")
    await expect(page.get_by_text("0 events pending")).to_be_visible()

    await page.goto(f"/console/agents/{agent_id}")  # shown once: never again
    assert secret not in await page.content()
    await expect(page.get_by_text(PUBLIC)).to_be_visible()

    await db.execute("UPDATE agent_webhooks SET breaker = 'open', failures = 5, "
                     "last_error = 'HTTP 503: down' WHERE agent_id = $1", agent_id)
    await page.reload()
    await expect(page.locator(".webhook-status")).to_have_attribute("data-status", "open")
    await expect(page.get_by_text("HTTP 503: down")).to_be_visible()

    await page.get_by_role("button", name="Remove webhook").click()
    await expect(page.get_by_text("Webhook removed")).to_be_visible()
    assert await db.fetchval("SELECT count(*) FROM agent_webhooks WHERE agent_id = $1",
                             agent_id) == 0
