"""The new-agent form's A2A fields (ADR 041): a card URL the target rule refuses
is shown next to the form, and no agent is made."""

from __future__ import annotations

from playwright.async_api import expect

from tests.console.helpers import register


async def test_an_a2a_agent_with_a_refused_card_url_is_not_made(open_page, uniq, db):
    w = await open_page(javascript=False)
    page = w.page
    await register(page, f"a2a{uniq}")
    await page.goto("/console/agents")
    form = page.locator("#create")
    await form.get_by_label("Name", exact=True).fill("remote")
    await form.get_by_label("Agent card URL").fill("http://169.254.169.254/latest/meta-data/")
    await form.get_by_label("Headers sent with every call").fill("X-Api-Key: s3cret")
    await form.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_text("link-local")).to_be_visible()
    assert "s3cret" not in await page.content()
    assert await db.fetchval("SELECT count(*) FROM agents WHERE name = 'remote' AND owner_id = "
                             "(SELECT user_id FROM users WHERE username = $1)",
                             f"a2a{uniq}") == 0

    await form.get_by_label("Name", exact=True).fill("remote")
    await form.get_by_label("Agent card URL").fill("https://example.com/card.json")
    await form.get_by_label("Headers sent with every call").fill("not a header line")
    await form.get_by_role("button", name="Create agent").click()
    await expect(page.get_by_text("is not 'Name: value'")).to_be_visible()
