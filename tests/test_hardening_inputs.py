"""415 for non-JSON bodies, reserved names and weak passwords,
a per-agent cap on SSE streams, no routing through an encoded '/', and problem
details that never name interpreter internals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from app.platform.settings import Settings
from tests.api_helpers import problem
from tests.support.meshapi import MeshFactory
from tests.support.servers import serve_app


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
async def test_a_body_that_is_not_declared_json_is_415(mesh: MeshFactory,
                                                       content_type: str) -> None:
    resp = await mesh.http.post("/v1/auth/login", content=b'{"username":"x","password":"y"}',
                                headers={"Content-Type": content_type})
    problem(resp, 415, "application/json")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "application/problem+json"])
async def test_json_media_types_are_read(mesh: MeshFactory, content_type: str) -> None:
    resp = await mesh.http.post("/v1/auth/login", content=b'{"username":"x","password":"y"}',
                                headers={"Content-Type": content_type})
    problem(resp, 401)


@pytest.mark.parametrize("name", ["root", "system", "human", "administrator"])
async def test_reserved_usernames_are_refused(mesh: MeshFactory, name: str) -> None:
    resp = await mesh.http.post("/v1/auth/register",
                                json={"username": name, "password": "correct horse battery"})
    problem(resp, 422, "reserved", name)


@pytest.mark.parametrize("password", ["{user}", "        ", "aaaaaaaaaa", "password",
                                      "short"])
async def test_trivially_weak_passwords_are_refused(mesh: MeshFactory, uniq: str,
                                                    password: str) -> None:
    user = f"weak{uniq}"
    resp = await mesh.http.post("/v1/auth/register", json={
        "username": user, "password": password.format(user=user)})
    problem(resp, 422, "password")


@contextlib.asynccontextmanager
async def open_stream(http: httpx.AsyncClient, headers: dict[str, str]
                      ) -> AsyncIterator[httpx.Response]:
    async with http.stream("GET", "/v1/mesh/inbox/stream", headers=headers) as resp:
        yield resp


async def test_sse_streams_per_agent_are_capped(migrated: Settings) -> None:
    settings = migrated.model_copy(update={"sse_max_streams_per_agent": 2})
    async with serve_app(settings) as url, MeshFactory.connect(url) as mesh:
        a, b = await mesh.pair()
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(httpx.AsyncClient(base_url=url,
                                                                         timeout=30))
                       for _ in range(2)]
            for client in clients:
                resp = await stack.enter_async_context(open_stream(client, b.headers))
                assert resp.status_code == 200
            refused = await mesh.http.get("/v1/mesh/inbox/stream", headers=b.headers)
            problem(refused, 429, "open inbox streams")
            assert refused.headers["Retry-After"]
            # Another agent is not affected.
            async with open_stream(mesh.http, a.headers) as other:
                assert other.status_code == 200
        # Closing the streams gives their slots back.
        async with asyncio.timeout(20):
            while True:
                async with open_stream(mesh.http, b.headers) as again:
                    if again.status_code == 200:
                        break
                await asyncio.sleep(0.05)


async def test_an_encoded_slash_in_a_path_id_routes_nowhere(mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    a = await owner.agent("a")
    for raw in (f"/v1/agents/{a.agent_id}%2Fkeys", f"/v1/agents/{a.agent_id}%2fkeys"):
        resp = await mesh.http.get(httpx.URL(str(mesh.http.base_url).rstrip("/") + raw),
                                   headers=owner.headers)
        problem(resp, 404, "%2F")
        assert "api_key" not in resp.text and "keys" not in resp.json()


async def test_problem_details_do_not_name_interpreter_internals(mesh: MeshFactory) -> None:
    resp = await mesh.http.post("/v1/auth/login", content=b"{\"username\": \"\xff\"}",
                                headers={"Content-Type": "application/json"})
    body = problem(resp, 400, "UTF-8")
    assert "codec" not in body["detail"] and "Error" not in body["detail"]
