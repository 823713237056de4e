"""``/`` is a door, not a 404: a browser is sent to the console, an API client
gets the index of what the gateway serves, and every link in it answers."""

from __future__ import annotations

import httpx


async def test_a_browser_lands_in_the_console(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        r = await http.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert r.status_code == 303
    assert r.headers["location"] == "/console"


async def test_an_api_client_gets_an_index_whose_links_answer(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway) as http:
        for accept in ("*/*", "application/json"):
            r = await http.get("/", headers={"Accept": accept})
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("application/json")
            links = r.json()["links"]
        assert {"docs", "openapi", "console", "agent_card"} <= set(links)
        for path in links.values():
            answer = await http.get(path)
            assert answer.status_code in (200, 303, 307), (path, answer.status_code)
