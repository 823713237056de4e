"""A blocking SendMessage: wait for the task to settle, then answer with it (ADR 036).

The wait is the caller's inbox, read from Postgres: every state the serving
agent sets, and every message it sends, is an event there, committed under
the caller's counter-row lock. The waiter is a long-poll waiter of the hub
(app.delivery.inbox_hub), so the commit notice of the write that settles the task
wakes it — nothing polls; a quiet interval re-reads only in case a notice was
lost.

Waits are bounded per calling agent and per web process: a wait holds no
database connection, but it does hold a request, and a caller that opens
thousands must not crowd out the others. Beyond the bound the call answers at
once with the task as it is, as ``returnImmediately`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.a2a import mapping
from app.a2a.follow import TaskReader
from app.delivery.inbox_hub import LONG_POLL
from app.services import accounts
from app.store import inbox as inbox_store

if TYPE_CHECKING:
    from app.a2a.call import MeshCall

# States a caller waits for: the task is done, or it needs the caller.
INTERRUPTED = frozenset({"input-required", "auth-required"})
PER_CALLER = 4  # concurrent blocking calls of one agent in one web process
PER_PROCESS = 256  # concurrent blocking calls of all agents in one web process
BATCH = 200
STATUS_EVENTS = ("task.status", "task.timeout")


def settled(state: str) -> bool:
    return mapping.is_terminal(state) or state in INTERRUPTED


class WaitSlots:
    """Counts a web process's blocking waits; a slot is taken or refused at once."""

    def __init__(self, per_caller: int = PER_CALLER, per_process: int = PER_PROCESS) -> None:
        self.per_caller = per_caller
        self.per_process = per_process
        self._by_caller: Counter[str] = Counter()
        self._total = 0

    @contextlib.contextmanager
    def take(self, agent_id: str) -> Iterator[bool]:
        """True when the caller may wait; the slot is given back on exit.
        Synchronous: taking and counting happen with no await in between."""
        if self._by_caller[agent_id] >= self.per_caller or self._total >= self.per_process:
            yield False
            return
        self._by_caller[agent_id] += 1
        self._total += 1
        try:
            yield True
        finally:
            self._total -= 1
            self._by_caller[agent_id] -= 1
            if not self._by_caller[agent_id]:
                del self._by_caller[agent_id]


async def until_settled(c: MeshCall, task_id: str, read_task: TaskReader,
                        since: int, seconds: float) -> dict[str, Any]:
    """The task once an event after seq ``since`` in the caller's inbox settles it,
    or as it is after ``seconds``. ``since`` is the caller's newest event of the
    task before its message was written, so a reply to a task that is already
    input-required waits for the next settled state, not the current one."""
    s, me = c.state, c.me.agent_id
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # Registered before the first read, so no notice slips between read and wait.
    async with s.hub.watch(me, LONG_POLL) as waiter:
        while True:
            rows = await inbox_store.task_events_after(s.pool, me, task_id, since, BATCH)
            for row in rows:
                since = int(row["seq"])
                if row["type"] in STATUS_EVENTS and settled(row["payload"]["state"]):
                    return await read_task(c, task_id)
            if len(rows) == BATCH:
                continue
            # Spread over half to one and a half intervals: waits parked together
            # would otherwise re-read together, a burst of queries every interval
            # that the parallel send load felt (bench a2a_blocking, ADR 036).
            quiet = s.settings.longpoll_recheck_seconds * random.uniform(0.5, 1.5)
            left = min(deadline - loop.time(), quiet)
            if c.me.expires_at is not None:
                left = min(left, c.me.expires_at - time.time())
            if deadline - loop.time() <= 0 or left <= 0:
                return await read_task(c, task_id)
            if not await waiter.wait(left):
                # Quiet: the caller's own cancel (another request) reaches only the
                # other inbox, so look at the task itself.
                detail = await read_task(c, task_id)
                if settled(detail["state"]):
                    return detail
            if waiter.auth_changed:  # a key revoked or the agent deleted: stop waiting
                waiter.auth_changed = False
                if not await accounts.still_valid(s.pool, c.me):
                    return await read_task(c, task_id)


# This web process's waits, shared by the JSON-RPC and the HTTP+JSON bindings.
SLOTS = WaitSlots()
