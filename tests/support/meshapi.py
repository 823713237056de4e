"""A thin test client over the real HTTP API: owners, agents, friendships.

Every call goes through HTTP to the gateway under test; nothing touches the
database behind its back.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx


def _check(resp: httpx.Response, *expected: int) -> Any:
    if resp.status_code not in expected:
        raise AssertionError(f"{resp.request.method} {resp.request.url} → {resp.status_code}: "
                             f"{resp.text}")
    return resp.json() if resp.content else None


@dataclass
class AgentHandle:
    agent_id: str
    api_key: str
    key_id: str
    http: httpx.AsyncClient
    token: str = ""

    async def refresh_token(self) -> str:
        data = _check(await self.http.post("/v1/auth/token", json={"api_key": self.api_key}), 200)
        self.token = data["access_token"]
        return self.token

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        return await self.http.get(path, headers=self.headers, **kw)

    async def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return await self.http.post(path, json=json, headers=self.headers, **kw)

    async def delete(self, path: str, **kw: Any) -> httpx.Response:
        return await self.http.delete(path, headers=self.headers, **kw)

    async def send(self, to: str, text: str, **extra: Any) -> dict[str, Any]:
        message = {"parts": [{"kind": "text", "text": text}], **extra.pop("message", {})}
        body = {"to_agent_id": to, "message": message, **extra}
        return _check(await self.post("/v1/mesh/tasks", body), 201)  # type: ignore[no-any-return]

    async def reply(self, task_id: str, text: str, **extra: Any) -> dict[str, Any]:
        body = {"parts": [{"kind": "text", "text": text}], **extra}
        return _check(await self.post(f"/v1/mesh/tasks/{task_id}/messages", body), 201)  # type: ignore[no-any-return]

    async def inbox(self, after: int = 0, limit: int = 500, wait: float = 0) -> dict[str, Any]:
        resp = await self.get("/v1/mesh/inbox",
                              params={"after": after, "limit": limit, "wait": wait})
        return _check(resp, 200)  # type: ignore[no-any-return]


@dataclass
class OwnerHandle:
    username: str
    password: str
    token: str
    http: httpx.AsyncClient

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def human(self) -> str:
        return f"human@{self.username}"

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        return await self.http.get(path, headers=self.headers, **kw)

    async def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return await self.http.post(path, json=json, headers=self.headers, **kw)

    async def delete(self, path: str, **kw: Any) -> httpx.Response:
        return await self.http.delete(path, headers=self.headers, **kw)

    async def patch(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        return await self.http.patch(path, json=json, headers=self.headers, **kw)

    async def agent(self, name: str, **fields: Any) -> AgentHandle:
        created = _check(await self.post("/v1/agents", {"name": name, **fields}), 201)
        key = _check(await self.post(f"/v1/agents/{created['agent_id']}/keys"), 201)
        handle = AgentHandle(created["agent_id"], key["api_key"], key["key_id"], self.http)
        await handle.refresh_token()
        return handle


# Idle connections are dropped before uvicorn's keep-alive timeout (5 s) closes them:
# with httpx's default (also 5 s) a request after a pause of about 5 s could go out on
# a connection the server was closing, and fail with a ReadError.
KEEPALIVE = httpx.Limits(keepalive_expiry=2.0)


class MeshFactory:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, base_url: str, transport: httpx.AsyncBaseTransport | None = None,
                      ) -> AsyncIterator[MeshFactory]:
        async with httpx.AsyncClient(base_url=base_url, timeout=30, transport=transport,
                                     limits=KEEPALIVE) as http:
            yield cls(http)

    async def owner(self, username: str | None = None) -> OwnerHandle:
        username = username or f"u{uuid.uuid4().hex[:10]}"
        password = "correct horse battery"
        _check(await self.http.post("/v1/auth/register",
                                    json={"username": username, "password": password}), 201)
        token = _check(await self.http.post("/v1/auth/login",
                                            json={"username": username, "password": password}),
                       200)["access_token"]
        return OwnerHandle(username, password, token, self.http)

    async def befriend(self, a: AgentHandle, b: AgentHandle) -> None:
        req = _check(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)
        _check(await b.post(f"/v1/mesh/friends/requests/{req['request_id']}/accept"), 200)

    async def pair(self) -> tuple[AgentHandle, AgentHandle]:
        """Two agents of two owners, already friends."""
        alice, bob = await self.owner(), await self.owner()
        a, b = await alice.agent("a"), await bob.agent("b")
        await self.befriend(a, b)
        return a, b
