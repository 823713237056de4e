"""The agent page shows its runs in real Chromium: the current run (kept current
while the page is open), the last failure, totals and two server-rendered SVG
charts with text alternatives, a runs table filtered by outcome; a task's page
shows the run behind each message and the task's total; another owner reaches
none of it."""

from __future__ import annotations

import uuid

from playwright.async_api import expect

from tests.console.browser import shoot
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
    assert (await coder.post("/v1/mesh/runs", {"run_id": f"r-{tag}-now", "model": "claude-test",
                                               "outcome": "running"})).status_code == 201

    w = await open_page()
    await sign_in(w.page, me.username)
    await w.page.goto(f"{gateway}/console/agents/{coder.agent_id}")
    section = w.page.locator("section", has=w.page.locator("#runs-h"))
    await expect(section.locator("[data-total-cost]")).to_have_text("$0.7500")
    await expect(section.locator("[data-total-runs]")).to_have_text("7")
    live = section.locator("#run-live")
    await expect(live.get_by_role("status")).to_contain_text(f"Running now: r-{tag}-now")
    await expect(section.locator(".webhook-error")).to_contain_text("model API unreachable")
    await expect(section.locator("table.runs tbody tr")).to_have_count(7)
    # Two charts, each an image with a text alternative; today's bar says its figures.
    charts = section.get_by_role("img")
    await expect(charts).to_have_count(2)
    await expect(charts.first).to_have_attribute("aria-label", "Cost per day, last 30 days")
    assert "total $0.7500" in (await charts.first.locator("desc").text_content() or "")
    assert await section.locator("svg rect.bar").count() == 60

    # The run ends while the page is open: the block follows, without a reload.
    assert (await coder.post("/v1/mesh/runs", {
        "run_id": f"r-{tag}-now", "outcome": "ok", "turns": 3, "cost_usd": 0.25,
        "duration_ms": 4200})).status_code == 200
    await expect(live.locator("[data-run-state]")).to_have_attribute("data-run-state", "ok")
    await expect(live).to_contain_text(f"Last run r-{tag}-now")
    await expect(live).to_contain_text("ok · $0.2500 · 3 turns · 4.2 s")
    await shoot(w.page, "agent-runs")

    await section.get_by_label("Outcome").select_option("failed")
    await section.get_by_role("button", name="Filter").click()
    await expect(section.locator("table.runs tbody tr")).to_have_count(1)
    await expect(section.locator("table.runs tbody tr")).to_contain_text("model API unreachable")

    # A task: the run behind the coder's answer, and a failed run that posted
    # nothing, both in the task's total; the asker's message has no run.
    asker = await me.agent("asker")
    task = await asker.send(coder.agent_id, "Fix the flaky test, please.")
    tid = task["task_id"]
    for run_id, outcome, turns, cost in ((f"t-{tag}-1", "failed", 1, 0.05),
                                         (f"t-{tag}-2", "ok", 4, 0.3)):
        assert (await coder.post("/v1/mesh/runs", {
            "run_id": run_id, "task_id": tid, "outcome": outcome, "turns": turns, "cost_usd": cost,
            "duration_ms": 1500, **({"error": "the model API is unreachable"}
                                    if outcome == "failed" else {})})).status_code == 201
    await coder.reply(tid, "Fixed: the test awaited a sleep.",
                      metadata={"mesh_run": {"run_id": f"t-{tag}-2", "final": False}})
    await w.page.goto(f"{gateway}/console/tasks/{tid}")
    facts = w.page.locator("#task-facts")
    await expect(facts).to_contain_text("Run cost$0.3500 · 5 turns · 2 run(s)")
    answer = w.page.locator("li.msg", has_text="Fixed: the test")
    await expect(answer.locator("summary")).to_have_text("Run: ok · $0.3000 · 4 turns")
    await answer.locator("summary").click()
    await expect(answer.locator("details")).to_contain_text("1.5 s")
    await w.page.locator("summary", has_text="Runs of your agents on this task (2)").click()
    rows = w.page.locator("details.task-runs tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text("the model API is unreachable")
    await shoot(w.page, "task-runs")
    assert w.errors == [], w.errors

    # The dashboard: today's spend per agent and across them, with a chart.
    await w.page.goto(f"{gateway}/console")
    spend = w.page.locator("section", has=w.page.locator("#spend-h"))
    await expect(spend.locator("[data-spend-today]")).to_have_text("$1.3500")
    await expect(spend.locator(f'[data-spend-agent="{coder.agent_id}"]')).to_have_text("$1.3500")
    await expect(spend.get_by_role("img")).to_have_attribute(
        "aria-label", "Spend across your agents, last 30 days")

    # Another owner, signed in: the agent page, its live block and the task are
    # 404s, the figures nowhere.
    other = await mesh.owner()
    w2 = await open_page()
    await sign_in(w2.page, other.username)
    resp = await w2.page.goto(f"{gateway}/console/agents/{coder.agent_id}")
    assert resp is not None and resp.status == 404
    assert "0.7500" not in await w2.page.content()
    fragment = await w2.page.request.get(f"{gateway}/console/agents/{coder.agent_id}/runs/live")
    assert fragment.status == 404 and f"r-{tag}" not in await fragment.text()
    resp = await w2.page.goto(f"{gateway}/console/tasks/{tid}")
    assert resp is not None and resp.status == 404
    assert "0.3000" not in await w2.page.content()
    await w2.page.goto(f"{gateway}/console")
    await expect(w2.page.locator("[data-spend-today]")).to_have_text("$0.0000")
