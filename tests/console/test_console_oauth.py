"""An owner connects an MCP client in a real browser: from the client's own site to
the gateway's authorize endpoint, the console's consent page (already signed in),
and back to the client with a code that works at /mcp (ADR 040)."""

from __future__ import annotations

import asyncio
import contextlib
import html
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import httpx
import uvicorn
from playwright.async_api import expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from devstack.process import free_port
from tests.console.helpers import create_agent, register
from tests.test_mcp_oauth import pkce
from tests.test_mcp_remote import call, session

ICON = '<link rel="icon" href="data:,">'  # no favicon request to count as an error


@contextlib.asynccontextmanager
async def client_site(link: dict[str, str], got: dict[str, str]) -> AsyncIterator[str]:
    """The MCP client's own web site, on another site than the gateway (localhost vs
    127.0.0.1): a page that links to the gateway, and the redirect URI."""
    port = free_port()

    async def home(request: Request) -> HTMLResponse:
        return HTMLResponse(f'{ICON}<a href="{html.escape(link["url"])}">Connect to the mesh</a>')

    async def callback(request: Request) -> HTMLResponse:
        got.update(request.query_params)
        return HTMLResponse(f"{ICON}<h1>Client connected</h1>")

    app = Starlette(routes=[Route("/", home), Route("/callback", callback)])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn's started flag has no event
        await asyncio.sleep(0.02)
    try:
        yield f"http://localhost:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_signed_in_owner_connects_a_client_from_its_site(open_page, uniq, gateway):
    link: dict[str, str] = {}
    got: dict[str, Any] = {}
    verifier, challenge = pkce()
    async with client_site(link, got) as site, httpx.AsyncClient(base_url=gateway) as http:
        redirect = f"{site}/callback"
        reg = await http.post("/oauth/register", json={"client_name": "Site client",
                                                       "redirect_uris": [redirect]})
        client_id = reg.json()["client_id"]
        link["url"] = f"{gateway}/oauth/authorize?" + urlencode({
            "response_type": "code", "client_id": client_id, "redirect_uri": redirect,
            "code_challenge": challenge, "code_challenge_method": "S256", "state": "s1"})

        w = await open_page(javascript=False)
        page = w.page
        await register(page, f"oauth{uniq}")  # signed in to the console
        agent_id = await create_agent(page, "remote")

        await page.goto(f"{site}/")
        await page.get_by_role("link", name="Connect to the mesh").click()
        # the console session counts although the trip began on another site
        await expect(page.get_by_role("heading", name="Connect an MCP client")).to_be_visible()
        await expect(page.get_by_text("Site client")).to_be_visible()
        await page.locator(f'input[name="agent_id"][value="{agent_id}"]').check()
        await page.get_by_role("button", name="Allow").click()
        await expect(page.get_by_role("heading", name="Client connected")).to_be_visible()
        assert got["state"] == "s1" and got["iss"] == gateway

        r = await http.post("/oauth/token", data={
            "grant_type": "authorization_code", "code": got["code"], "redirect_uri": redirect,
            "client_id": client_id, "code_verifier": verifier})
        assert r.status_code == 200, r.text
    async with session(gateway, r.json()["access_token"]) as s:
        me, _ = await call(s, "mesh_whoami")
    assert me["agent_id"] == agent_id

    await page.goto("/console/connections")
    await expect(page.get_by_text("Site client")).to_be_visible()
    assert w.errors == []


async def test_a_signed_out_owner_signs_in_on_the_way(open_page, uniq, gateway, mesh):
    owner = await mesh.owner()
    agent = await owner.agent("way")
    link: dict[str, str] = {}
    got: dict[str, Any] = {}
    _verifier, challenge = pkce()
    async with client_site(link, got) as site, httpx.AsyncClient(base_url=gateway) as http:
        redirect = f"{site}/callback"
        reg = await http.post("/oauth/register", json={"redirect_uris": [redirect]})
        link["url"] = f"{gateway}/oauth/authorize?" + urlencode({
            "response_type": "code", "client_id": reg.json()["client_id"], "redirect_uri": redirect,
            "code_challenge": challenge, "code_challenge_method": "S256"})
        page = (await open_page(javascript=False)).page
        await page.goto(f"{site}/")
        await page.get_by_role("link", name="Connect to the mesh").click()
        await page.get_by_label("Username").fill(owner.username)
        await page.get_by_label("Password").fill(owner.password)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("heading", name="Connect an MCP client")).to_be_visible()
        await page.locator(f'input[name="agent_id"][value="{agent.agent_id}"]').check()
        await page.get_by_role("button", name="Deny").click()
        await expect(page.get_by_role("heading", name="Client connected")).to_be_visible()
    assert got["error"] == "access_denied" and "code" not in got
