"""What a peer writes into a message is rendered defensively on the owner's task
page: hostile run facts (``metadata.mesh_run``) never make it a 500, and a file
URI becomes a link only for http(s) — in real Chromium, signed in as the owner."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.async_api import expect

from tests.console.helpers import session_cookie, sign_in

HTML = '<script>alert("run")</script><img src=x onerror="alert(2)"><b>bold</b>'

# Each is the whole `mesh_run` of one message from the peer; every one of them
# answered 500 before (float("abc"), float({}), float(10**400), int("3") …).
HOSTILE_RUNS: list[Any] = [
    {"cost_usd": "abc", "turns": "many", "outcome": HTML},
    {"cost_usd": {"nested": {"deeper": [1, 2]}}, "turns": {"a": 1}},
    {"cost_usd": 10**400, "turns": 10**400},
    {"cost_usd": -5, "turns": -3, "outcome": "ok"},
    {"cost_usd": [1, 2, 3], "turns": [4], "outcome": ["ok"]},
    {"cost_usd": HTML, "turns": HTML, "outcome": {"html": HTML}},
    {"cost_usd": 1e308, "turns": 1.5, "outcome": "x" * 5000},
    {"cost_usd": True, "turns": False, "outcome": 7},
    "not an object at all",
    [HTML, {"cost_usd": 1}],
]


async def _signed_in_owner(open_page, mesh):  # type: ignore[no-untyped-def]
    me = await mesh.owner()
    mine = await me.agent("target")
    evil = await (await mesh.owner()).agent("evil")
    await mesh.befriend(evil, mine)
    w = await open_page()
    await sign_in(w.page, me.username)
    return w, mine, evil


async def test_hostile_run_facts_never_break_the_task_page(open_page, mesh, gateway):
    w, mine, evil = await _signed_in_owner(open_page, mesh)
    cookie = await session_cookie(w.page)
    # (status, markup stayed text, totals only from the sane run) per variant
    answers: list[tuple[int, bool, bool]] = []
    async with httpx.AsyncClient(base_url=gateway, cookies={"mesh_console": cookie},
                                 timeout=30) as http:
        for run in HOSTILE_RUNS:
            task = await evil.send(mine.agent_id, "hello", message={"metadata": {"mesh_run": run}})
            # A sane run beside the hostile one still counts; the hostile one adds nothing.
            await evil.reply(task["task_id"], "done",
                             metadata={"mesh_run": {"cost_usd": 0.25, "turns": 2,
                                                    "outcome": "ok"}})
            resp = await http.get(f"/console/tasks/{task['task_id']}")
            body = resp.text
            escaped = ("<script>alert" not in body and "<img src=x" not in body
                       and "<b>bold</b>" not in body)
            # Only the sane run's figures are summed, as the peer's claim.
            summed = "Peer-reported cost</dt><dd>$0.2500 · 2 turns" in body
            answers.append((resp.status_code, escaped, summed))
    failing = [(a, r) for a, r in zip(answers, HOSTILE_RUNS, strict=True) if a != (200, True, True)]
    assert failing == [], f"{len(failing)} of {len(answers)} variants: {failing}"
    assert len(answers) == 10

    # And in the browser: the markup is text, nothing ran.
    await w.page.goto(f"/console/tasks/{task['task_id']}")
    await expect(w.page.locator("summary", has_text="Run: ok · $0.2500 · 2 turns")).to_be_visible()
    assert await w.page.locator("b", has_text="bold").count() == 0
    assert await w.page.locator("img[src=x]").count() == 0
    assert w.dialogs == [] and w.errors == [], (w.dialogs, w.errors)


NOT_LINKS = ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>",
             "vbscript:msgbox(1)", "JaVaScRiPt:alert(1)", " javascript:alert(1)",
             "\tjava\nscript:alert(1)", "file:///etc/passwd", "jAvAsCrIpT:alert(document.domain)",
             "//evil.example/x", "ftp://files.example/x"]
LINKS = ["https://files.example/report.pdf", "http://files.example/a.txt",
         "HTTPS://files.example/upper.png"]


async def test_only_http_file_uris_become_links(open_page, mesh):
    w, mine, evil = await _signed_in_owner(open_page, mesh)
    page = w.page
    parts = [{"kind": "file", "file": {"name": f"f{i}", "uri": uri}}
             for i, uri in enumerate(NOT_LINKS + LINKS)]
    task = await evil.send(mine.agent_id, "files")
    assert (await evil.post(f"/v1/mesh/tasks/{task['task_id']}/messages",
                            {"parts": parts})).status_code == 201

    await page.goto(f"/console/tasks/{task['task_id']}")
    files = page.locator(".part.file")
    await expect(files).to_have_count(len(parts))
    wrong: list[tuple[str, list[str]]] = []
    text_only = linked = 0
    for i, uri in enumerate(NOT_LINKS + LINKS):
        part = files.nth(i)
        await expect(part).to_contain_text(f"f{i}")
        anchors = await part.locator("a").evaluate_all(
            "els => els.map(e => e.getAttribute('href'))")
        if uri in LINKS:
            linked += anchors == [uri]
        elif anchors == [] and await part.locator("code.uri").count() == 1:
            text_only += 1  # shown, as text, and not a link
        if (anchors == [uri]) != (uri in LINKS):
            wrong.append((uri, anchors))
    assert wrong == [], wrong
    assert (text_only, linked) == (len(NOT_LINKS), len(LINKS)) == (10, 3)
    # No anchor anywhere on the page points at a non-web scheme.
    all_hrefs = await page.locator("a[href]").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")
    bad = [h for h in all_hrefs if h.strip().lower().split(":")[0] in
           ("javascript", "data", "vbscript", "file", "ftp") or h.startswith("//")]
    assert bad == [], bad
    assert w.dialogs == [] and w.errors == [], (w.dialogs, w.errors)
