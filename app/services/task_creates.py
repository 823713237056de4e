"""Task creates, written together: the creates that meet on one web process share
one statement (ADR 028).

Natural batching, no timer: a create that finds one of ``in_flight`` slots free
is written at once, so an idle gateway adds no wait; creates that arrive while
every slot is writing queue up and go together, up to ``max_batch``, in the next
statement. One statement is one round trip, one transaction and one WAL flush
for the lot — the send's cost that grows with requests, not with rows.

A batch that fails is written again one create at a time, so each create gets
the answer it would have had alone: a taken id aborts the whole statement, and
only that create's caller must see the conflict.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

import asyncpg

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
        if max_batch < 1 or in_flight < 1:
            raise ValueError("a create batch holds at least one create, in at least one slot")
        self._pool, self._topic, self._wakeup = pool, topic, wakeup
        self._max_batch, self._in_flight = max_batch, in_flight
        self._queue: list[tuple[NewTask, asyncio.Future[int | None]]] = []
        self._writing = 0
        self._batches: set[asyncio.Task[None]] = set()
        self.sizes: deque[int] = deque(maxlen=1000)  # the latest batches' sizes, for tests

    @property
    def queued(self) -> int:
        """Creates waiting for a slot."""
        return len(self._queue)

    async def create(self, task: NewTask) -> int | None:
        """Write ``task`` with whatever else is waiting; its event's seq (None: the
        serving agent does not exist). Raises what writing it alone would raise."""
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._queue.append((task, done))
        self._start()
        # A caller that goes away (client gone) cancels only its own future: the
        # statement, someone else's too, finishes.
        return await done

    def _start(self) -> None:
        while self._queue and self._writing < self._in_flight:
            batch = self._queue[:self._max_batch]
            del self._queue[:self._max_batch]
            self._writing += 1
            self.sizes.append(len(batch))
            job = asyncio.create_task(self._write(batch))
            self._batches.add(job)
            job.add_done_callback(self._batches.discard)

    async def _write(self, batch: list[tuple[NewTask, asyncio.Future[int | None]]]) -> None:
        try:
            seqs = await write(self._pool, self._topic, self._wakeup, [t for t, _ in batch])
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], error=exc)
            else:
                await self._write_each(batch)
        else:
            for (_, done), seq in zip(batch, seqs, strict=True):
                _settle(done, seq)
        finally:
            for _, done in batch:  # cancelled mid-write (shutdown): nobody waits forever
                _settle(done, error=RuntimeError("the create was interrupted; retry it"))
            self._writing -= 1
            self._start()

    async def _write_each(self, batch: list[tuple[NewTask, asyncio.Future[int | None]]]) -> None:
        for task, done in batch:
            try:
                (seq,) = await write(self._pool, self._topic, self._wakeup, [task])
            except Exception as alone:
                _settle(done, error=alone)
            else:
                _settle(done, seq)


def _settle(done: asyncio.Future[int | None], seq: int | None = None, *,
            error: BaseException | None = None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(seq)
