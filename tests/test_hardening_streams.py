"""Revoked long-polls end at once, every header/query value
that reaches SQL is bounded before it gets there, and a client that hangs up
mid-body is a client disconnect (499), not a 500."""

from __future__ import annotations

import asyncio
import base64
import logging

import httpx
import pytest

from app.platform.settings import Settings
from tests.api_helpers import problem, until
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.servers import serve_app

TOO_BIG = str(2**63)  # one past BIGINT


async def _metric(http: httpx.AsyncClient, name: str, **labels: str) -> float:
    text = (await http.get("/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
        elif not labels and line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _until(predicate, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():  # noqa: ASYNC110 - a gauge has no event to await
            await asyncio.sleep(0.02)


# --- revocation ends a parked long-poll -------------------------------------------

@pytest.mark.parametrize("how", ["revoke-key", "delete-agent"])
async def test_parked_long_poll_ends_when_credentials_are_revoked(mesh: MeshFactory,
                                                                  how: str) -> None:
    owner = await mesh.owner()
    a, b = await owner.agent("a"), await owner.agent("b")
    await mesh.befriend(a, b)
    after = (await b.inbox())["next_after"]
    base = await _metric(mesh.http, "agent_mesh_longpoll_waiting")
    poll = asyncio.create_task(b.get("/v1/mesh/inbox",
                                     params={"after": after, "wait": 25}, timeout=40))
    await _until(lambda: _parked(mesh.http, base))
    if how == "revoke-key":
        resp = await owner.delete(f"/v1/agents/{b.agent_id}/keys/{b.key_id}")
    else:
        resp = await owner.delete(f"/v1/agents/{b.agent_id}")
    assert resp.status_code == 204
    if how == "revoke-key":
        sent = await a.send(b.agent_id, "after the revocation")
    answer = await asyncio.wait_for(poll, 20)
    problem(answer, 401, "revoked")
    if how == "revoke-key":
        # Receipts are marked in batches (ADR 021): hand a later message to c and
        # await its receipt, so any hand-over to b queued before it was flushed too.
        c = await owner.agent("c")
        await mesh.befriend(a, c)
        fence = await a.send(c.agent_id, "fence")
        assert (await c.inbox(wait=10))["events"]
        await until(lambda: _receipt_state(a, fence["task_id"], "delivered"))
        assert await _receipt_state(a, sent["task_id"], "queued")


async def _receipt_state(sender: AgentHandle, task_id: str, status: str) -> bool:
    task = (await sender.get(f"/v1/mesh/tasks/{task_id}")).json()
    receipts = [m["receipt"] for m in task["messages"] if m.get("receipt")]
    assert receipts, task
    return all(r["status"] == status for r in receipts)


async def _parked(http: httpx.AsyncClient, base: float) -> bool:
    return await _metric(http, "agent_mesh_longpoll_waiting") > base


# --- values that reach SQL are bounded first --------------------------------------

async def test_last_event_id_beyond_bigint_is_a_422_before_the_stream(mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    resp = await mesh.http.get("/v1/mesh/inbox/stream",
                               headers={**b.headers, "Last-Event-ID": TOO_BIG})
    problem(resp, 422, "Last-Event-ID")


@pytest.mark.parametrize("path,param", [
    ("/v1/mesh/inbox", "after"),
    ("/v1/mesh/inbox", "limit"),
    ("/v1/mesh/inbox/stream", "after"),
    ("/v1/mesh/tasks", "limit"),
])
async def test_query_values_beyond_bigint_are_422(mesh: MeshFactory, path: str,
                                                  param: str) -> None:
    a, b = await mesh.pair()
    resp = await b.get(path, params={param: TOO_BIG})
    problem(resp, 422, param)


async def test_task_cursor_out_of_range_is_400(mesh: MeshFactory) -> None:
    """A cursor is opaque, but it decodes to a time that reaches SQL: one past
    what Postgres (or the driver) can hold is the cursor's 400, not a 500."""
    a, b = await mesh.pair()
    for stamp in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"):
        raw = base64.urlsafe_b64encode(f"{stamp}|t-abc".encode()).decode().rstrip("=")
        problem(await b.get("/v1/mesh/tasks", params={"cursor": raw}), 400, "cursor")


async def test_outbox_row_id_beyond_bigint_is_422(iso: Settings) -> None:
    async with serve_app(iso) as url, MeshFactory.connect(url) as mesh:
        admin = await mesh.owner("admin")
        problem(await admin.post(f"/v1/admin/outbox/dead/{TOO_BIG}/retry"), 422, "row id")
        problem(await admin.post("/v1/admin/outbox/dead/-1/retry"), 422, "row id")
        problem(await admin.get("/v1/admin/outbox/dead", params={"after_id": TOO_BIG}), 422,
                "after_id")


# --- a client that hangs up mid-body ---------------------------------------------

async def test_client_disconnect_mid_body_is_a_499_logged_at_debug(
        gateway: str, mesh: MeshFactory, caplog: pytest.LogCaptureFixture) -> None:
    route = "POST /v1/auth/login"
    before_500 = await _metric(mesh.http, "agent_mesh_http_requests_total", route=route,
                               status="500")
    before_499 = await _metric(mesh.http, "agent_mesh_http_requests_total", route=route,
                               status="499")
    host, port = gateway.removeprefix("http://").split(":")
    caplog.set_level(logging.DEBUG)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"username\": \"")
    await writer.drain()
    writer.close()
    await writer.wait_closed()

    async def counted() -> bool:
        return await _metric(mesh.http, "agent_mesh_http_requests_total", route=route,
                             status="499") > before_499
    await _until(counted)
    assert await _metric(mesh.http, "agent_mesh_http_requests_total", route=route,
                         status="500") == before_500
    errors = [r for r in caplog.records if (r.levelno >= logging.WARNING
              and "disconnect" in r.getMessage().lower()) or r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert any("disconnect" in r.getMessage().lower() for r in caplog.records
               if r.levelno == logging.DEBUG)
