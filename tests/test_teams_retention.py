"""Retention with cron's clock passed in: old terminal tasks and
old acked inbox events are deleted in bounded batches and archived first; the
archives hold exactly the deleted rows; a client resuming over long-poll or SSE
sees no gap and no repeat. A database of its own, so counts are exact."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from httpx_sse import aconnect_sse

from app.platform.settings import Settings
from cron.retention import apply_retention
from tests.api_helpers import move, ok, text_message
from tests.support.isolated import db_now
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.servers import serve_app


@pytest.fixture
async def served(iso: Settings) -> AsyncIterator[tuple[str, MeshFactory]]:
    async with serve_app(iso) as url, MeshFactory.connect(url) as factory:
        yield url, factory


async def polled(agent: AgentHandle, after: int | None) -> list[dict[str, Any]]:
    params = {} if after is None else {"after": after}
    return ok(await agent.get("/v1/mesh/inbox", params=params))["events"]  # type: ignore[no-any-return]


async def streamed(url: str, agent: AgentHandle, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client, \
            aconnect_sse(client, "GET", "/v1/mesh/inbox/stream", headers=agent.headers) as src:
        async for sse in src.aiter_sse():
            if sse.data:
                events.append(json.loads(sse.data))
                if len(events) == count:
                    return events
    return events


def archived(folder: Path) -> list[dict[str, Any]]:
    assert not list(folder.glob("*.partial"))
    lines = []
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines += [json.loads(line) for line in f]
    return lines


async def test_old_rows_go_archived_and_clients_resume_without_gap(
        served: tuple[str, MeshFactory], iso: Settings, pool: asyncpg.Pool,
        tmp_path: Path) -> None:
    url, mesh = served
    a, b = await mesh.pair()
    done = []
    for i in range(3):
        task = await a.send(b.agent_id, f"job {i}")
        ok(await move(b, task["task_id"], "working"))
        ok(await move(b, task["task_id"], "completed", message=text_message(f"done {i}")))
        done.append(task["task_id"])
    still_open = (await a.send(b.agent_id, "open job"))["task_id"]
    b_events = await polled(b, 0)
    acked = b_events[-2]["seq"]  # all but b's newest event
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": acked}))
    before_resume = await polled(b, None)
    assert [e["seq"] for e in before_resume] == [acked + 1]

    folder = tmp_path / "archive"
    settings = iso.model_copy(update={"retention_days": 1, "retention_archive_dir": str(folder)})
    t0 = await db_now(pool)
    # Nothing is a day old yet; and with retention off nothing ever goes.
    assert (await apply_retention(pool, settings, now=t0))["tasks"] == 0
    off = iso.model_copy(update={"retention_days": 0})
    assert await apply_retention(pool, off, now=t0 + timedelta(days=30)) == \
        {"tasks": 0, "inbox_events": 0, "agent_runs": 0, "batches": 0}

    result = await apply_retention(pool, settings, now=t0 + timedelta(days=1, seconds=1),
                                   batch=2)
    assert result["tasks"] == 3 and result["batches"] > 3
    deleted_events = [e for e in b_events if e["seq"] <= acked]
    assert result["inbox_events"] == len(deleted_events)
    # Gone: the terminal tasks with their messages and state changes; the open one stays.
    for task_id in done:
        assert (await a.get(f"/v1/mesh/tasks/{task_id}")).status_code == 404
    ok(await a.get(f"/v1/mesh/tasks/{still_open}"))
    assert await pool.fetchval("SELECT count(*) FROM task_messages WHERE task_id = ANY($1)",
                               done) == 0
    assert await pool.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1",
                               b.agent_id) == len(b_events) - len(deleted_events)
    # a acked nothing: all of its events stay.
    assert len(await polled(a, 0)) == await pool.fetchval(
        "SELECT inbox_seq FROM agents WHERE agent_id = $1", a.agent_id)

    # The archives hold exactly the deleted rows.
    lines = archived(folder)
    assert sorted(r["row"]["task_id"] for r in lines if r["table"] == "tasks") == sorted(done)
    assert len([r for r in lines if r["table"] == "task_messages"]) == 6
    assert len([r for r in lines if r["table"] == "task_state_changes"]) == 6
    assert sorted(r["row"]["event_id"] for r in lines if r["table"] == "inbox_events") == \
        sorted(e["event_id"] for e in deleted_events)

    # Resuming: the same events as before, whichever way and from wherever.
    assert await polled(b, None) == before_resume
    assert await polled(b, 0) == before_resume  # the floor: no wait on a deleted seq
    assert await streamed(url, b, 1) == before_resume
    again = await apply_retention(pool, settings, now=t0 + timedelta(days=1, seconds=1))
    assert (again["tasks"], again["inbox_events"]) == (0, 0)
    # New events continue the seqs.
    await a.send(b.agent_id, "after retention")
    assert [e["seq"] for e in await polled(b, None)] == [acked + 1, acked + 2]
