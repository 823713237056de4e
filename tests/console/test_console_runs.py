"""The agent page shows its runs in real Chromium: the current run, the last
failure, totals and two server-rendered SVG charts with text alternatives, a
runs table filtered by outcome; another owner reaches none of it."""

from __future__ import annotations

import uuid

from playwright.async_api import expect

from tests.console.helpers import sign_in


async def test_the_agent_page_shows_runs_charts_and_the_last_failure(open_page, mesh, gateway):
    me = await mesh.owner()
    coder = await me.agent("coder")
    tag = uuid.uuid4().hex[:6]
    for i in range(6):
        outcome = "failed" if i == 4 else "ok"
        resp = await coder.post("/v1/mesh/runs", {
            "run_id": f"r-{tag}-{i}", "outcome": outcome, "turns": 2, "cost_usd": 0.125,
            "duration_ms": 2000, "model": "claude-test",
            **({"error": "model API unreachable"} if outcome == "failed" else {})})
        assert resp.status_code == 201, resp.text
    assert (await coder.post("/v1/mesh/runs", {"run_id": f"r-{tag}-now",
                                               "outcome": "running"})).status_code == 201

    w = await open_page()
    await sign_in(w.page, me.username)
    await w.page.goto(f"{gateway}/console/agents/{coder.agent_id}")
    section = w.page.locator("section", has=w.page.locator("#runs-h"))
    await expect(section.locator("[data-total-cost]")).to_have_text("$0.7500")
    await expect(section.locator("[data-total-runs]")).to_have_text("7")
    await expect(section.get_by_role("status")).to_contain_text(f"r-{tag}-now")
    await expect(section.locator(".webhook-error")).to_contain_text("model API unreachable")
    await expect(section.locator("table.runs tbody tr")).to_have_count(7)
    # Two charts, each an image with a text alternative; today's bar says its figures.
    charts = section.get_by_role("img")
    await expect(charts).to_have_count(2)
    await expect(charts.first).to_have_attribute("aria-label", "Cost per day, last 30 days")
    assert "total $0.7500" in (await charts.first.locator("desc").text_content() or "")
    assert await section.locator("svg rect.bar").count() == 60

    await section.get_by_label("Outcome").select_option("failed")
    await section.get_by_role("button", name="Filter").click()
    await expect(section.locator("table.runs tbody tr")).to_have_count(1)
    await expect(section.locator("table.runs tbody tr")).to_contain_text("model API unreachable")

    # The dashboard: today's spend per agent and across them, with a chart.
    await w.page.goto(f"{gateway}/console")
    spend = w.page.locator("section", has=w.page.locator("#spend-h"))
    await expect(spend.locator("[data-spend-today]")).to_have_text("$0.7500")
    await expect(spend.locator(f'[data-spend-agent="{coder.agent_id}"]')).to_have_text("$0.7500")
    await expect(spend.get_by_role("img")).to_have_attribute(
        "aria-label", "Spend across your agents, last 30 days")

    # Another owner, signed in: the agent page is a 404, the figures nowhere.
    other = await mesh.owner()
    w2 = await open_page()
    await sign_in(w2.page, other.username)
    resp = await w2.page.goto(f"{gateway}/console/agents/{coder.agent_id}")
    assert resp is not None and resp.status == 404
    assert "0.7500" not in await w2.page.content()
    await w2.page.goto(f"{gateway}/console")
    await expect(w2.page.locator("[data-spend-today]")).to_have_text("$0.0000")
