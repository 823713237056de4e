"""An A2A task stream read from the caller's durable inbox (ADR 017).

The per-task sequence of an event is its seq in the caller's inbox: strictly
increasing within the task (gaps are the caller's other events), assigned at
commit under the recipient's counter-row lock, so a reader that has seen seq N
has seen every earlier event of the task. A stream is the task snapshot —
marked with the newest seq it is current to — then every event after it (or
after the client's ``Last-Event-ID``), read from Postgres, once, in order.
The hub's notices only wake the reader; a quiet interval re-reads anyway.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from a2a.server.events.event_queue import Event

from app.a2a import mapping
from app.platform.metrics import A2A_STREAMS
from app.services import accounts
from app.store import inbox as inbox_store

if TYPE_CHECKING:
    from app.a2a.call import MeshCall

BATCH = 200
TaskReader = Callable[["MeshCall", str], Awaitable[dict[str, Any]]]


async def follow(c: MeshCall, task_id: str, read_task: TaskReader) -> AsyncGenerator[Event]:
    with A2A_STREAMS.track_inprogress():
        inner = _follow(c, task_id, read_task)
        try:
            async for event in inner:
                yield event
        finally:  # a dropped client: leave the hub now, not when collected
            await inner.aclose()


async def _follow(c: MeshCall, task_id: str, read_task: TaskReader) -> AsyncGenerator[Event]:
    s = c.state
    me = c.me.agent_id
    # Registered before the first read, so no notice slips between read and wait.
    async with s.hub.watch(me) as waiter:
        # The seq first, then the snapshot: the snapshot is current to at least it.
        current = await inbox_store.last_task_seq(s.pool, me, task_id)
        detail = await read_task(c, task_id)
        yield mapping.task(detail, seq=current)
        last = current if c.resume_after is None else c.resume_after
        ended = mapping.is_terminal(detail["state"])
        # The state as of ``last``, which messages replayed after it report as theirs.
        state = await inbox_store.task_state_at(s.pool, me, task_id, last) or "submitted"
        while True:
            rows = await inbox_store.task_events_after(s.pool, me, task_id, last, BATCH)
            for row in rows:
                last = int(row["seq"])
                event, state = mapping.stream_event(row, state)
                ended = ended or mapping.is_terminal(state)
                if event is not None:
                    yield event
            if len(rows) == BATCH:
                continue
            if ended:
                return  # a terminal task takes no more messages: nothing else will come
            left = s.settings.sse_recheck_seconds
            if c.me.expires_at is not None:
                left = min(left, c.me.expires_at - time.time())
                if left <= 0:
                    return  # the client reconnects with a fresh token and Last-Event-ID
            woke = await waiter.wait(left)
            if waiter.auth_changed:  # a key revoked or the agent deleted: end at once
                waiter.auth_changed = False
                if not await accounts.still_valid(s.pool, c.me):
                    return
            if not woke:
                # Quiet: the caller's own cancel reaches only the other inbox, so look.
                ended = mapping.is_terminal((await read_task(c, task_id))["state"])
