"""Calls that meet share one round trip.

Natural batching, no timer: a call that finds one of ``in_flight`` slots free goes
out at once, so an idle process adds no wait; calls that arrive while every slot is
busy queue up and go together, up to ``max_batch``, in the next round trip. The
round trip's fixed cost — a statement, a command, a socket write and read on each
end — is then paid per batch instead of per call.

Used by the web process for task creates (one statement, ADR 028) and for the rate
limit's token buckets (one script call).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Runs ``run(batch)`` for the calls that meet; ``run`` answers one result per
    item, in order.

    ``alone_on_failure``: a batch that fails is run again one item at a time, so
    each caller gets the answer it would have had alone (for a statement that one
    bad row aborts). Otherwise every caller of the failed batch gets its error.
    """

    def __init__(self, run: Callable[[list[T]], Awaitable[Sequence[R]]], *,
                 max_batch: int, in_flight: int, alone_on_failure: bool = False) -> None:
        if max_batch < 1 or in_flight < 1:
            raise ValueError("a batch holds at least one call, in at least one slot")
        self._run = run
        self._max_batch, self._in_flight = max_batch, in_flight
        self._alone_on_failure = alone_on_failure
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._busy = 0
        self._batches: set[asyncio.Task[None]] = set()
        self.sizes: deque[int] = deque(maxlen=1000)  # the latest batches' sizes, for tests

    @property
    def queued(self) -> int:
        """Calls waiting for a slot."""
        return len(self._queue)

    async def submit(self, item: T) -> R:
        """``item``'s result, run with whatever else is waiting. A caller that goes
        away cancels only its own wait: the batch, someone else's too, finishes."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, done))
        self._start()
        return await done

    def _start(self) -> None:
        while self._queue and self._busy < self._in_flight:
            batch = self._queue[:self._max_batch]
            del self._queue[:self._max_batch]
            self._busy += 1
            self.sizes.append(len(batch))
            job = asyncio.create_task(self._go(batch))
            self._batches.add(job)
            job.add_done_callback(self._batches.discard)

    async def _go(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self._run([item for item, _ in batch])
        except Exception as exc:
            if len(batch) > 1 and self._alone_on_failure:
                await self._each(batch)
            else:
                for _, done in batch:
                    _settle(done, error=exc)
        else:
            for (_, done), result in zip(batch, results, strict=True):
                _settle(done, result)
        finally:
            for _, done in batch:  # cancelled mid-run (shutdown): nobody waits forever
                _settle(done, error=RuntimeError("the call was interrupted; retry it"))
            self._busy -= 1
            self._start()

    async def _each(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        for item, done in batch:
            try:
                (result,) = await self._run([item])
            except Exception as alone:
                _settle(done, error=alone)
            else:
                _settle(done, result)


def _settle(done: asyncio.Future[R], result: R | None = None, *,
            error: BaseException | None = None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)  # type: ignore[arg-type]
