"""An owner's view of a conversation: every message of a context in tasks one of
the owner's agents takes part in, in order, with each task's current state."""

from __future__ import annotations

import asyncpg

from app.errors import not_found
from app.responses import Timeline, TimelineMessage
from app.services.principals import Owner
from app.store import agents as agents_store
from app.store import tasks as tasks_store


async def context_timeline(pool: asyncpg.Pool, owner: Owner, context_id: str,
                           limit: int) -> Timeline:
    async with pool.acquire() as conn:
        mine = [r["agent_id"] for r in await agents_store.list_owned(conn, owner.user_id)]
        rows = await tasks_store.context_messages(conn, context_id, mine, limit)
    if not rows:
        # Same answer for "absent" and "not yours": existence is not disclosed.
        raise not_found(f"no context '{context_id}' with messages of your agents")
    messages = [TimelineMessage.of(row, seq=row["inbox_seq"]) for row in rows]
    return Timeline(context_id=context_id, messages=messages,
                    tasks=sorted({m.task_id for m in messages}), truncated=len(rows) == limit)
