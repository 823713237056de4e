"""Task creates, written together: the creates that meet on one web process share
one statement (ADR 028), through app.platform.coalescer.

A create that finds one of ``in_flight`` slots free is written at once; creates
that arrive while every slot is writing go together, up to ``max_batch``, in the
next statement. One statement is one round trip, one transaction and one WAL flush
for the lot — the send's cost that grows with requests, not with rows.

A batch that fails is written again one create at a time, so each create gets
the answer it would have had alone: a taken id aborts the whole statement, and
only that create's caller must see the conflict.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import asyncpg

from app.platform.coalescer import Coalescer
from app.platform.metrics import TASK_CREATE_STATEMENTS
from app.store.writes import NewTask, Wakeup, writes


async def write(pool: asyncpg.Pool, topic: str, wakeup: Wakeup | None,
                tasks: Sequence[NewTask]) -> list[int | None]:
    """Write ``tasks`` in one statement; each one's event seq, None where its
    serving agent does not exist (see app.store.tasks.create_with_events)."""
    TASK_CREATE_STATEMENTS.inc()
    async with writes(pool, topic=topic, wakeup=wakeup, one_statement=True) as tx:
        return await tx.create_tasks(tasks)


class CreateBatcher:
    """The web process's writer of task creates (State.creates)."""

    def __init__(self, pool: asyncpg.Pool, topic: str, wakeup: Wakeup | None, *,
                 max_batch: int, in_flight: int) -> None:
        async def run(tasks: list[NewTask]) -> list[int | None]:
            return await write(pool, topic, wakeup, tasks)

        self._batches: Coalescer[NewTask, int | None] = Coalescer(
            run, max_batch=max_batch, in_flight=in_flight, alone_on_failure=True)

    @property
    def queued(self) -> int:
        """Creates waiting for a slot."""
        return self._batches.queued

    @property
    def sizes(self) -> deque[int]:
        """The latest statements' sizes, for tests."""
        return self._batches.sizes

    async def create(self, task: NewTask) -> int | None:
        """Write ``task`` with whatever else is waiting; its event's seq (None: the
        serving agent does not exist). Raises what writing it alone would raise."""
        return await self._batches.submit(task)
