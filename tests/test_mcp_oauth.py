"""OAuth 2.1 for ``/mcp`` against the real gateway: metadata, dynamic registration,
the owner's sign-in and consent in the console, code + PKCE, rotating refresh
tokens, client metadata documents, and every way a grant ends."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import html
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from devstack.process import free_port
from tests.api_helpers import ok
from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle
from tests.support.servers import serve_app
from tests.test_mcp_remote import MCP_HEADERS, _initialize, call, session

REDIRECT = "http://127.0.0.1:33333/callback"


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
    return verifier, challenge.decode()


@dataclass
class Browser:
    """An owner's browser, as far as the console needs one: a cookie jar that signs in."""
    http: httpx.AsyncClient
    owner: OwnerHandle

    async def sign_in(self, next_url: str) -> httpx.Response:
        page = await self.http.get(next_url)
        assert page.status_code == 303 and page.headers["location"].startswith("/console/signin?next=")
        form = await self.http.get(page.headers["location"])
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token
        nxt = parse_qs(urlsplit(page.headers["location"]).query)["next"][0]
        done = await self.http.post("/console/signin", data={
            "username": self.owner.username, "password": self.owner.password,
            "csrf": token.group(1), "next": nxt})
        assert done.status_code == 303 and done.headers["location"] == nxt
        return await self.http.get(nxt)


@contextlib.asynccontextmanager
async def browser(base: str, owner: OwnerHandle) -> AsyncIterator[Browser]:
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield Browser(http, owner)


def hidden(page: str) -> dict[str, str]:
    return {m.group(1): html.unescape(m.group(2))
            for m in re.finditer(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)}


async def register_client(http: httpx.AsyncClient, redirect: str = REDIRECT) -> str:
    r = await http.post("/oauth/register", json={
        "client_name": "Test MCP client", "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "none"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["token_endpoint_auth_method"] == "none" and body["redirect_uris"] == [redirect]
    return str(body["client_id"])


def authorize_url(client_id: str, challenge: str, state: str = "st-1", **extra: str) -> str:
    return "/oauth/authorize?" + urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": state,
        "scope": "mcp", **extra})


async def handed_over(http: httpx.AsyncClient, url: str) -> str:
    """Where /oauth/authorize sends the browser on (a page that refreshes to the console)."""
    start = await http.get(url)
    assert start.status_code == 200, start.text
    target = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', start.text)
    assert target
    url = html.unescape(target.group(1))
    assert url.startswith("/console/oauth/authorize?")
    return url


async def consent(b: Browser, client_id: str, challenge: str, agent_id: str, *,
                  decision: str = "approve", **extra: str) -> dict[str, list[str]]:
    """The whole front channel: authorize → console sign-in → consent → redirect back."""
    target = await handed_over(b.http, authorize_url(client_id, challenge, **extra))
    page = await b.http.get(target)
    if page.status_code == 303:  # not signed in yet
        page = await b.sign_in(target)
    assert page.status_code == 200, page.text
    assert "Test MCP client" in page.text or client_id in page.text
    assert "form-action 'self' http://127.0.0.1:33333" in page.headers["content-security-policy"]
    form = hidden(page.text)
    answer = await b.http.post("/console/oauth/authorize",
                               data={**form, "agent_id": agent_id, "decision": decision})
    assert answer.status_code == 303, answer.text
    back = urlsplit(answer.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
    return parse_qs(back.query)


async def tokens(http: httpx.AsyncClient, **form: str) -> httpx.Response:
    return await http.post("/oauth/token", data=form)


async def grant(mesh: MeshFactory, gateway: str) -> tuple[OwnerHandle, AgentHandle, dict[str, Any], str]:
    owner = await mesh.owner()
    agent = await owner.agent("oa")
    verifier, challenge = pkce()
    async with browser(gateway, owner) as b:
        client_id = await register_client(b.http)
        back = await consent(b, client_id, challenge, agent.agent_id)
        assert back["state"] == ["st-1"] and back["iss"] == [gateway]
        r = await tokens(b.http, grant_type="authorization_code", code=back["code"][0],
                         redirect_uri=REDIRECT, client_id=client_id, code_verifier=verifier,
                         resource=f"{gateway}/mcp")
        assert r.status_code == 200, r.text
        assert r.headers["cache-control"] == "no-store"
    return owner, agent, r.json(), client_id


async def mcp_status(gateway: str, token: str) -> int:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        r = await http.post("/mcp", json=_initialize(),
                            headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
    return r.status_code


async def test_metadata_documents(gateway):
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        server = ok(await http.get("/.well-known/oauth-authorization-server"), 200)
        resource = ok(await http.get("/.well-known/oauth-protected-resource/mcp"), 200)
    assert server["issuer"] == gateway
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["client_id_metadata_document_supported"] is True
    assert server["registration_endpoint"] == f"{gateway}/oauth/register"
    assert resource["authorization_servers"] == [gateway]


async def test_the_whole_flow_then_refresh_rotation_and_replay(mesh, gateway):
    owner, agent, issued, client_id = await grant(mesh, gateway)
    assert issued["token_type"] == "Bearer" and issued["scope"] == "mcp"
    async with session(gateway, issued["access_token"], "discover") as s:
        me, _ = await call(s, "mesh_whoami")
    assert me["agent_id"] == agent.agent_id  # the agent the owner picked

    # the token is for /mcp only: the REST API does not take it
    r = await owner.http.get("/v1/mesh/me", headers={"Authorization": f"Bearer {issued['access_token']}"})
    assert r.status_code == 401

    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        r = await tokens(http, grant_type="refresh_token", refresh_token=issued["refresh_token"],
                         client_id=client_id)
        assert r.status_code == 200, r.text
        second = r.json()
        assert second["refresh_token"] != issued["refresh_token"]  # rotated
        assert await mcp_status(gateway, second["access_token"]) == 200
        # the replaced refresh token again: it leaked, so the grant ends
        r = await tokens(http, grant_type="refresh_token", refresh_token=issued["refresh_token"],
                         client_id=client_id)
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
    assert await mcp_status(gateway, second["access_token"]) == 401
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        r = await tokens(http, grant_type="refresh_token", refresh_token=second["refresh_token"])
        assert r.json()["error"] == "invalid_grant"


async def test_pkce_and_codes_are_checked(mesh, gateway):
    owner = await mesh.owner()
    agent = await owner.agent("pk")
    verifier, challenge = pkce()
    async with browser(gateway, owner) as b:
        client_id = await register_client(b.http)
        other = await register_client(b.http)
        code = (await consent(b, client_id, challenge, agent.agent_id))["code"][0]
        base = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                "client_id": client_id}
        r = await tokens(b.http, **base, code_verifier=pkce()[0])  # not the verifier
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
        r = await tokens(b.http, **base, code_verifier=verifier)  # spent by the wrong try
        assert r.json()["error"] == "invalid_grant"

        code = (await consent(b, client_id, challenge, agent.agent_id))["code"][0]
        r = await tokens(b.http, **{**base, "code": code, "client_id": other}, code_verifier=verifier)
        assert r.json()["error"] == "invalid_grant"  # issued to another client

        code = (await consent(b, client_id, challenge, agent.agent_id))["code"][0]
        good = await tokens(b.http, **{**base, "code": code}, code_verifier=verifier)
        assert good.status_code == 200
        again = await tokens(b.http, **{**base, "code": code}, code_verifier=verifier)
        assert again.json()["error"] == "invalid_grant"
        # a code used twice ends what the first use got
        assert await mcp_status(gateway, good.json()["access_token"]) == 401

        for form in ({"grant_type": "password", "username": "x"}, {"grant_type": "authorization_code"},
                     {}, {"grant_type": "refresh_token", "refresh_token": "mr_nope"}):
            r = await tokens(b.http, **form)
            assert 400 <= r.status_code < 500 and r.json()["error"], form
        r = await b.http.post("/oauth/token", json=base)  # JSON instead of a form
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"


async def test_authorization_requests_are_checked(mesh, gateway):
    owner = await mesh.owner()
    agent = await owner.agent("ar")
    _verifier, challenge = pkce()
    async with browser(gateway, owner) as b:
        client_id = await register_client(b.http)
        # unknown client or redirect URI: shown to the user, never redirected
        for url in (authorize_url("mc_unknown", challenge),
                    authorize_url(client_id, challenge).replace("33333", "44444").replace(
                        "callback", "evil")):
            r = await b.http.get(url)
            assert r.status_code == 400 and "location" not in r.headers
        # a known client with a bad request: back to the client with the error
        for extra, error in (({"code_challenge_method": "plain"}, "invalid_request"),
                             ({"response_type": "token"}, "unsupported_response_type"),
                             ({"resource": "https://elsewhere.example/mcp"}, "invalid_target")):
            r = await b.http.get(authorize_url(client_id, challenge, **extra))
            assert r.status_code == 303
            assert parse_qs(urlsplit(r.headers["location"]).query)["error"] == [error]
        r = await b.http.get(authorize_url(client_id, ""))
        assert parse_qs(urlsplit(r.headers["location"]).query)["error"] == ["invalid_request"]

        # the owner says no
        back = await consent(b, client_id, challenge, agent.agent_id, decision="deny")
        assert back["error"] == ["access_denied"] and "code" not in back
        # the owner may only pick their own agents
        stranger = await (await MeshFactory(b.http).owner()).agent("zz")
        page = await b.http.get(await handed_over(b.http, authorize_url(client_id, challenge)))
        r = await b.http.post("/console/oauth/authorize",
                              data={**hidden(page.text), "agent_id": stranger.agent_id,
                                    "decision": "approve"})
        assert r.status_code == 404 and "location" not in r.headers
        # no CSRF token, no code
        form = {k: v for k, v in hidden(page.text).items() if k != "csrf"}
        r = await b.http.post("/console/oauth/authorize",
                              data={**form, "agent_id": agent.agent_id, "decision": "approve"})
        assert r.status_code == 403 and "location" not in r.headers

        r = await b.http.post("/oauth/register", json={"redirect_uris": ["javascript:alert(1)"]})
        assert r.status_code == 400 and r.json()["error"] == "invalid_redirect_uri"
        r = await b.http.post("/oauth/register", json={"redirect_uris": ["http://evil.example/cb"]})
        assert r.json()["error"] == "invalid_redirect_uri"  # plain http only to loopback
        for bad in ({"redirect_uris": [REDIRECT], "client_uri": "not a url"},
                    {"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]},
                    {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"},
                    {"redirect_uris": "x"}, {"redirect_uris": [5]}, [], {"redirect_uris": [REDIRECT],
                                                                        "contacts": "me"}):
            r = await b.http.post("/oauth/register", json=bad)
            assert r.status_code == 400 and r.json()["error"].startswith("invalid_"), bad
        r = await b.http.post("/oauth/register", content=b"garbage")
        assert r.status_code == 400 and r.json()["error"] == "invalid_client_metadata"


@pytest.mark.parametrize("end", ["disconnect", "revoke-key", "delete-agent"])
async def test_a_grant_ends_with_its_agent_keys_or_the_owner(mesh, gateway, end):
    owner, agent, issued, _client_id = await grant(mesh, gateway)
    assert await mcp_status(gateway, issued["access_token"]) == 200
    async with browser(gateway, owner) as b:
        page = await b.sign_in("/console/connections")
        assert agent.agent_id in page.text and "Test MCP client" in page.text
        if end == "disconnect":
            grant_id = re.search(r'action="/console/connections/([^/"]+)/revoke"', page.text)
            assert grant_id
            r = await b.http.post(f"/console/connections/{grant_id.group(1)}/revoke",
                                  data={"csrf": hidden(page.text)["csrf"]})
            assert r.status_code == 303
            assert agent.agent_id not in (await b.http.get("/console/connections")).text
    if end == "revoke-key":
        ok(await owner.delete(f"/v1/agents/{agent.agent_id}/keys/{agent.key_id}"), 204)
    if end == "delete-agent":
        ok(await owner.delete(f"/v1/agents/{agent.agent_id}"), 204)
    assert await mcp_status(gateway, issued["access_token"]) == 401
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        r = await tokens(http, grant_type="refresh_token", refresh_token=issued["refresh_token"])
        assert r.json()["error"] == "invalid_grant"


@contextlib.asynccontextmanager
async def document_server() -> AsyncIterator[str]:
    """A client's metadata document at its own URL (a small real server)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/client.json"

    async def doc(request: Any) -> JSONResponse:
        return JSONResponse({"client_id": url, "client_name": "Doc client",
                             "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"})

    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/client.json", doc)]),
                                           host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn's started flag has no event
        await asyncio.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        await task


async def test_client_metadata_documents(mesh, gateway, migrated):
    owner = await mesh.owner()
    agent = await owner.agent("cm")
    verifier, challenge = pkce()
    async with document_server() as client_id:
        # the shared gateway fetches no private URL (nor plain http)
        async with browser(gateway, owner) as b:
            r = await b.http.get(authorize_url(client_id, challenge))
            assert r.status_code == 400 and "location" not in r.headers
        settings = migrated.model_copy(update={"oauth_client_fetch_allow_private": True})
        async with serve_app(settings) as base, browser(base, owner) as b:
            back = await consent(b, client_id, challenge, agent.agent_id)
            r = await tokens(b.http, grant_type="authorization_code", code=back["code"][0],
                             redirect_uri=REDIRECT, client_id=client_id, code_verifier=verifier)
            assert r.status_code == 200, r.text
            async with session(base, r.json()["access_token"]) as s:
                me, _ = await call(s, "mesh_whoami")
            assert me["agent_id"] == agent.agent_id


async def test_the_open_endpoints_are_rate_limited_per_address(migrated):
    settings = migrated.model_copy(update={
        "ratelimit_enabled": True,
        "ratelimit_routes": {"POST /oauth/register": (0.001, 2), "POST /oauth/token": (0.001, 2)}})
    async with serve_app(settings) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        answers = [(await http.post("/oauth/register", json={"redirect_uris": [REDIRECT]})).status_code
                   for _ in range(3)]
        assert answers == [201, 201, 429]
        answers = [(await tokens(http, grant_type="refresh_token", refresh_token="mr_x")).status_code
                   for _ in range(3)]
        assert answers == [400, 400, 429]
        r = await tokens(http, grant_type="refresh_token", refresh_token="mr_x")
        assert r.headers["retry-after"]


async def test_access_tokens_are_bound_to_their_agent_resource_and_lifetime(mesh, gateway, migrated):
    """Tokens forged with the gateway's own key (the worst case: a token that was
    valid, altered) still fail unless agent, grant, audience and expiry all hold."""
    owner, agent, issued, _client_id = await grant(mesh, gateway)
    other = await owner.agent("ob")
    claims = jwt.decode(issued["access_token"], options={"verify_signature": False})
    assert claims["aud"] == f"{gateway}/mcp" and claims["sub"] == agent.agent_id

    def forged(**change: Any) -> str:
        return jwt.encode({**claims, **change}, migrated.jwt_secret, algorithm="HS256")

    assert await mcp_status(gateway, forged()) == 200  # the control: unaltered, it works
    now = int(time.time())
    for token in (forged(exp=now - 1),
                  forged(aud="https://elsewhere.example/mcp"),
                  forged(sub=other.agent_id),          # the grant is for `agent`, not `other`
                  forged(gid="og_not_a_grant"),
                  jwt.encode(claims, "another-secret-" + "y" * 32, algorithm="HS256")):
        assert await mcp_status(gateway, token) == 401
