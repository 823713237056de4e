"""The SDK's one 401 path (meshd/transport.py), in process against a scripted gateway:
a rejected token is renewed once and the request repeated — for plain calls and the
SSE stream alike — and a second 401, or one for a static token, is final."""

from __future__ import annotations

import json

import httpx
import pytest

from meshd import AuthError, MeshClient
from tests.unit.meshd.test_models import EVENT


class FakeGateway:
    def __init__(self) -> None:
        self.issued = 0
        self.valid: set[str] = set()
        self.seen: list[tuple[str, str | None]] = []
        self.refuse_all = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.path, request.headers.get("authorization")))
        if request.url.path == "/v1/auth/token":
            self.issued += 1
            token = f"t{self.issued}"
            self.valid = {token}
            body = {"access_token": token, "token_type": "bearer", "expires_in": 900, "agent_id": "a@x"}
            return httpx.Response(200, json=body)
        auth = request.headers.get("authorization", "")
        if self.refuse_all or auth.removeprefix("Bearer ") not in self.valid:
            return httpx.Response(401, json={"title": "Unauthorized", "detail": "token expired"})
        if request.url.path == "/v1/mesh/me":
            return httpx.Response(200, json={"agent_id": "a@x", "acked_seq": 0})
        assert request.url.path == "/v1/mesh/inbox/stream"
        sse = f"id: 7\nevent: task.created\ndata: {json.dumps(EVENT)}\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse.encode())


def client(gw: FakeGateway, **kw) -> MeshClient:
    kw.setdefault("api_key", "mk_k_s")
    return MeshClient("http://gw.test", transport=httpx.MockTransport(gw), **kw)


async def test_a_call_with_an_expired_token_renews_it_once_and_repeats():
    gw = FakeGateway()
    async with client(gw) as mesh:
        assert await mesh.authenticate() == "a@x"
        gw.valid = set()  # the gateway no longer takes t1
        assert (await mesh.me())["agent_id"] == "a@x"
        assert mesh.auth.refreshes == 2
    assert gw.seen == [
        ("/v1/auth/token", None),
        ("/v1/mesh/me", "Bearer t1"),
        ("/v1/auth/token", None),
        ("/v1/mesh/me", "Bearer t2"),
    ]


async def test_the_stream_takes_the_same_path():
    gw = FakeGateway()
    async with client(gw) as mesh:
        await mesh.authenticate()
        gw.valid = set()
        opened = []
        events = [e async for e in mesh.stream(6, on_open=lambda: opened.append(True))]
        assert [e.seq for e in events] == [7] and events[0].raw == EVENT and opened == [True]
        assert mesh.auth.refreshes == 2
    assert [s for s in gw.seen if s[0] == "/v1/mesh/inbox/stream"] == [
        ("/v1/mesh/inbox/stream", "Bearer t1"),
        ("/v1/mesh/inbox/stream", "Bearer t2"),
    ]


async def test_a_second_401_is_final():
    gw = FakeGateway()
    async with client(gw) as mesh:
        await mesh.authenticate()
        gw.refuse_all = True
        with pytest.raises(AuthError, match="token expired"):
            await mesh.me()
        with pytest.raises(AuthError):
            async for _ in mesh.stream():
                pass
        assert mesh.auth.refreshes == 3  # one renewal per request, never a loop


async def test_a_static_token_is_never_renewed():
    gw = FakeGateway()
    async with client(gw, api_key=None, token="owner-jwt") as mesh:
        with pytest.raises(AuthError):
            await mesh.me()
    assert gw.seen == [("/v1/mesh/me", "Bearer owner-jwt")]
