"""A context's timeline, for owners and for agents: one reader, two scopes.

* An owner sees the tasks of the context one of its agents takes part in
  (``GET /v1/contexts/{id}/timeline``, which also keeps its flat message list).
* An agent sees the whole context if it takes part in one of its tasks or is a
  member of the group the context belongs to (a group broadcast's);
  ``GET /v1/mesh/contexts/{id}/timeline``.

Anyone else gets the 404 of a context that does not exist.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

import asyncpg

from app.platform.errors import bad_request, not_found
from app.responses import (
    ArtifactOut,
    ContextTimeline,
    MessageOut,
    StateChangeOut,
    TaskOut,
    Timeline,
    TimelineEntry,
    TimelineMessage,
)
from app.services.principals import Agent, Owner
from app.store import agents as agents_store
from app.store import tasks as tasks_store
from app.store import timeline as store

Cursor = tuple[datetime, str, int, str]


async def context_timeline(pool: asyncpg.Pool, owner: Owner, context_id: str,
                           limit: int, cursor: str | None = None) -> Timeline:
    async with pool.acquire() as conn:
        mine = [r["agent_id"] for r in await agents_store.list_owned(conn, owner.user_id)]
        rows = await tasks_store.context_messages(conn, context_id, mine, limit)
        if not rows:
            # Same answer for "absent" and "not yours": existence is not disclosed.
            raise not_found(f"no context '{context_id}' with messages of your agents")
        entries, next_cursor = await _page(conn, context_id, mine, cursor, limit)
    messages = [TimelineMessage.of(row, seq=row["inbox_seq"]) for row in rows]
    return Timeline(context_id=context_id, messages=messages,
                    tasks=sorted({m.task_id for m in messages}), truncated=len(rows) == limit,
                    entries=entries, next_cursor=next_cursor)


async def agent_timeline(pool: asyncpg.Pool, me: Agent, context_id: str, limit: int,
                         cursor: str | None = None) -> ContextTimeline:
    async with pool.acquire() as conn:
        if not await store.agent_may_read(conn, context_id, me.agent_id):
            raise not_found(f"no context '{context_id}' that you take part in")
        entries, next_cursor = await _page(conn, context_id, None, cursor, limit)
    return ContextTimeline(context_id=context_id, entries=entries, next_cursor=next_cursor)


async def _page(conn: asyncpg.Connection, context_id: str, agent_ids: list[str] | None,
                cursor: str | None, limit: int) -> tuple[list[TimelineEntry], str | None]:
    after = decode_cursor(cursor) if cursor else None
    keys = await store.entries(conn, context_id, agent_ids, after, limit + 1)
    more, keys = len(keys) > limit, keys[:limit]
    by_kind: dict[str, list[str]] = {"task": [], "message": [], "state": [], "artifact": []}
    for k in keys:
        by_kind[k["kind"]].append(k["key"])
    tasks = {r["task_id"]: TaskOut.of(r) for r in await store.tasks(conn, by_kind["task"])}
    messages = {r["message_id"]: MessageOut.of(r)
                for r in await store.messages(conn, by_kind["message"])}
    states = {f"{r['id']:020d}": StateChangeOut.of(r)
              for r in await store.state_changes(conn, [int(k) for k in by_kind["state"]])}
    pairs = [k.split("/", 1) for k in by_kind["artifact"]]
    artifacts = {f"{r['task_id']}/{r['artifact_id']}": ArtifactOut.of(r)
                 for r in await store.artifacts(conn, [p[0] for p in pairs],
                                                [p[1] for p in pairs])}
    found: dict[str, dict[str, Any]] = {"task": tasks, "message": messages, "state": states,
                                        "artifact": artifacts}
    entries = [TimelineEntry(kind=k["kind"], at=k["at"], task_id=k["task_id"],
                             **{k["kind"]: found[k["kind"]].get(k["key"])}) for k in keys]
    last = keys[-1] if keys else None
    next_cursor = encode_cursor((last["at"], last["task_id"], last["rank"], last["key"])) \
        if more and last is not None else None
    return entries, next_cursor


def encode_cursor(position: Cursor) -> str:
    at, task_id, rank, key = position
    raw = f"{at.isoformat()}|{task_id}|{rank}|{key}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, task_id, rank, key = raw.split("|", 3)
        return datetime.fromisoformat(stamp), task_id, int(rank), key
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise bad_request("invalid cursor; pass the next_cursor of a previous page") from exc
