"""Shared assertions and small builders for the tests/test_api_*.py modules.

Everything goes through the real HTTP API; the database pool is only used to
*inspect* rows (counting inbox/outbox rows) and, in the atomicity tests, to
install a failing trigger — never to create state the API should create.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import httpx

from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle, _check

PROBLEM_JSON = "application/problem+json"

# Every task state, and one way to reach it from a fresh task (serving-side moves).
PATH_TO: dict[str, list[str]] = {
    "submitted": [],
    "working": ["working"],
    "input-required": ["working", "input-required"],
    "auth-required": ["working", "auth-required"],
    "completed": ["working", "completed"],
    "failed": ["working", "failed"],
    "canceled": ["canceled"],
    "rejected": ["rejected"],
}
STATES = list(PATH_TO)
TERMINAL = {"completed", "failed", "canceled", "rejected"}
# The documented state machine, written out independently of app/domain/task_states.py on purpose:
# the tests check the code against the contract, not against itself.
ALLOWED: dict[str, set[str]] = {
    "submitted": {"working", "canceled", "rejected"},
    "working": {"completed", "failed", "canceled", "input-required", "auth-required"},
    "input-required": {"working", "submitted", "canceled"},
    "auth-required": {"submitted", "canceled"},
    "completed": set(),
    "failed": set(),
    "canceled": set(),
    "rejected": set(),
}


def problem(resp: httpx.Response, status: int, *fragments: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem response with a useful detail; return its body."""
    assert resp.status_code == status, f"expected {status}, got {resp.status_code}: {resp.text}"
    assert resp.headers["content-type"].startswith(PROBLEM_JSON), resp.headers["content-type"]
    body = resp.json()
    assert body["status"] == status, body
    assert isinstance(body.get("title"), str) and body["title"], body
    detail = body.get("detail")
    assert isinstance(detail, str) and len(detail) >= 10, f"detail too thin: {body}"
    for fragment in fragments:
        assert fragment.lower() in detail.lower(), f"{fragment!r} not in detail {detail!r}"
    return body  # type: ignore[no-any-return]


def ok(resp: httpx.Response, *status: int) -> Any:
    return _check(resp, *(status or (200,)))


def text_message(text: str, **extra: Any) -> dict[str, Any]:
    return {"parts": [{"kind": "text", "text": text}], **extra}


async def me(agent: AgentHandle | OwnerHandle) -> dict[str, Any]:
    return ok(await agent.get("/v1/mesh/me"))  # type: ignore[no-any-return]


async def inbox_seq(agent: AgentHandle | OwnerHandle) -> int:
    return int((await me(agent))["inbox_seq"])


async def events_after(agent: AgentHandle, seq: int) -> list[dict[str, Any]]:
    return (await agent.inbox(after=seq))["events"]  # type: ignore[no-any-return]


async def move(agent: AgentHandle, task_id: str, state: str, **extra: Any) -> httpx.Response:
    return await agent.post(f"/v1/mesh/tasks/{task_id}/status", {"state": state, **extra})


async def task_in_state(initiator: AgentHandle, serving: AgentHandle, state: str,
                        text: str = "work") -> str:
    """A fresh task from ``initiator`` to ``serving``, moved (by the serving side)
    to ``state`` through the API; returns its task_id."""
    task = await initiator.send(serving.agent_id, text)
    for step in PATH_TO[state]:
        ok(await move(serving, task["task_id"], step))
    got = ok(await initiator.get(f"/v1/mesh/tasks/{task['task_id']}"))
    assert got["state"] == state
    return task["task_id"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def factory(gateway: str) -> AsyncIterator[MeshFactory]:
    async with MeshFactory.connect(gateway) as f:
        yield f


# --- row counts (inspection only) --------------------------------------------------

async def inbox_rows(db: asyncpg.Pool, agent_id: str, task_id: str | None = None) -> int:
    if task_id is None:
        return int(await db.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1",
                                     agent_id))
    return int(await db.fetchval(
        "SELECT count(*) FROM inbox_events WHERE agent_id = $1 AND task_id = $2",
        agent_id, task_id))


async def outbox_rows(db: asyncpg.Pool, key: str, task_id: str | None = None) -> int:
    if task_id is None:
        return int(await db.fetchval("SELECT count(*) FROM outbox_events WHERE key = $1", key))
    return int(await db.fetchval(
        "SELECT count(*) FROM outbox_events WHERE key = $1 AND payload->>'task_id' = $2",
        key, task_id))


async def message_rows(db: asyncpg.Pool, task_id: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM task_messages WHERE task_id = $1",
                                 task_id))


async def until(predicate: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """Await a state that has no event to await, e.g. a receipt: web processes mark
    hand-overs ``delivered`` in batches, a few ms after the read (ADR 021)."""
    async with asyncio.timeout(timeout):
        while not (result := await predicate()):  # noqa: ASYNC110 - a row's state has no event
            await asyncio.sleep(0.02)
        return result
