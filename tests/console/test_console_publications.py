"""Publications in the console, in real Chromium: publish from an agent's page,
browse (search box, tag filter, pages), fork into a new agent that shows on the
dashboard, delete your own (forks stay); refusals shown next to their form."""

from __future__ import annotations

import uuid

from playwright.async_api import expect

from tests.api_helpers import ok
from tests.console.browser import shoot
from tests.console.helpers import create_agent, register


def word() -> str:
    return "w" + uuid.uuid4().hex[:12]


async def test_publish_browse_fork_and_delete(open_page, uniq, db):
    marker, tag = word(), word()[:12]
    a = await open_page()
    alice = a.page
    await register(alice, f"pa{uniq}")
    source = await create_agent(alice, "reviewer", "Careful Reviewer")
    await alice.get_by_label("Description").fill("Reviews Python pull requests")
    await alice.get_by_label("Instructions").fill("Be kind, be brief.")
    await alice.get_by_role("button", name="Save").click()
    await expect(alice.get_by_text("Saved.")).to_be_visible()

    publish = alice.locator("#publish")
    await publish.get_by_label("Title").fill(f"Reviewer {marker}")
    await publish.get_by_label("Summary").fill("Reads your diff and says what is wrong")
    await publish.get_by_label("Tags").fill(f"python, {tag.upper()}")
    await publish.get_by_role("button", name="Publish").click()
    await expect(alice.get_by_text("Published.")).to_be_visible()
    await expect(alice.get_by_role("heading", name=f"Reviewer {marker}")).to_be_visible()
    pid = alice.url.split("/console/publications/", 1)[1].split("?", 1)[0]
    await shoot(alice, "publication")

    b = await open_page()
    bob = b.page
    me = f"pb{uniq}"
    await register(bob, me)
    await bob.get_by_role("link", name="Publications").click()
    await bob.get_by_label("Search", exact=True).fill(marker)
    await bob.get_by_role("button", name="Search").click()
    rows = bob.locator("table.publications tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text(f"pa{uniq}")
    await shoot(bob, "publications")
    # The tag filter: the row's tag link lists what carries it.
    await rows.first.get_by_role("link", name=tag.lower()).click()
    await expect(bob.get_by_label("Tag", exact=True)).to_have_value(tag.lower())
    await expect(rows).to_have_count(1)
    await rows.first.get_by_role("link", name=f"Reviewer {marker}").click()
    await expect(bob.get_by_text("Be kind, be brief.")).to_be_visible()
    assert source not in await bob.content()  # the source agent is the publisher's business
    await expect(bob.get_by_role("button", name="Delete publication")).to_have_count(0)

    await bob.get_by_label("New agent's name").fill("myreviewer")
    await bob.get_by_role("button", name="Fork").click()
    forked = f"myreviewer@{me}"
    await expect(bob.get_by_text("Forked from a publication")).to_be_visible()
    await expect(bob.get_by_label("Display name")).to_have_value("Careful Reviewer")
    await expect(bob.get_by_label("Description")).to_have_value("Reviews Python pull requests")
    await expect(bob.get_by_label("Instructions")).to_have_value("Be kind, be brief.")
    row = await db.fetchrow("SELECT forked_from, owner_id FROM agents WHERE agent_id = $1", forked)
    assert row["forked_from"] == pid

    await bob.get_by_role("link", name="Dashboard").click()
    await expect(bob.locator("ul.agents").get_by_role("link", name="Careful Reviewer")).to_be_visible()
    await expect(bob.locator("ul.agents")).to_contain_text(forked)

    await alice.goto(f"/console/publications/{pid}")
    await expect(alice.get_by_text("forked 1 times")).to_be_visible()
    await alice.get_by_role("button", name="Delete publication").click()
    await expect(alice.get_by_text("Publication deleted")).to_be_visible()
    assert a.dialogs and "Forks stay" in a.dialogs[-1]
    assert await db.fetchval("SELECT count(*) FROM publications WHERE publication_id = $1",
                             pid) == 0
    await bob.reload()
    await expect(bob.locator("ul.agents")).to_contain_text(forked)
    assert a.errors == [] and b.errors == []
    await bob.goto(f"/console/publications/{pid}")  # gone: a 404 page
    await expect(bob.get_by_text(f"no publication '{pid}'")).to_be_visible()


async def test_pages_and_refusals_without_javascript(open_page, mesh, uniq):
    tag = word()[:12]
    publisher = await mesh.owner()
    src = await publisher.agent("src", description="template")
    made = []
    for i in range(25):
        made.append(ok(await publisher.post("/v1/publications", {
            "source_agent_id": src.agent_id, "title": f"Item {i}", "summary": "s",
            "tags": [tag]}), 201)["publication_id"])

    w = await open_page(javascript=False)
    page = w.page
    await register(page, f"pn{uniq}")
    await page.goto(f"/console/publications?tag={tag}")
    rows = page.locator("table.publications tbody tr")
    await expect(rows).to_have_count(20)
    seen = [await r.get_attribute("href") for r in await rows.locator("td:first-child a").all()]
    await page.get_by_role("link", name="More publications").click()
    await expect(rows).to_have_count(5)
    seen += [await r.get_attribute("href") for r in await rows.locator("td:first-child a").all()]
    await expect(page.get_by_role("link", name="More publications")).to_have_count(0)
    assert sorted(seen) == sorted(f"/console/publications/{p}" for p in made)

    resp = await page.goto("/console/publications?q=a%00b")
    assert resp is not None and resp.status == 422
    await expect(page.get_by_text("NUL")).to_be_visible()

    # Refusals appear next to the form that caused them.
    mine = await create_agent(page, "own")
    publish = page.locator("#publish")
    await publish.get_by_label("Title").fill("Bad tags")
    await publish.get_by_label("Summary").fill("s")
    await publish.get_by_label("Tags").fill(" ".join(f"t{i}" for i in range(11)))
    await publish.get_by_role("button", name="Publish").click()
    problem = page.locator("#publish .problem")
    await expect(problem).to_have_attribute("data-status", "422")
    await expect(problem).to_contain_text("tags")
    assert mine in page.url

    await page.goto(f"/console/publications/{made[0]}")
    await page.get_by_label("New agent's name").fill("own")  # taken: the agent above
    await page.get_by_role("button", name="Fork").click()
    await expect(page.locator(".problem")).to_have_attribute("data-status", "409")
    await expect(page.locator(".problem")).to_contain_text("already have an agent")
    assert ok(await publisher.get(f"/v1/publications/{made[0]}"))["fork_count"] == 0
