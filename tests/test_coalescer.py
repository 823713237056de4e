"""Calls that meet share one round trip (app/platform/coalescer.py): what each
caller gets when a batch fails or a caller leaves. The round trips that use it are
tested against their services (tests/test_task_create_batches.py,
tests/test_ratelimit.py)."""

from __future__ import annotations

import asyncio

import pytest

from app.platform.coalescer import Coalescer


class Gate:
    """A round trip the test lets finish: records each batch, answers item × 10,
    fails a batch holding a negative item."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.arrived = asyncio.Event()
        self.open = asyncio.Event()

    async def run(self, batch: list[int]) -> list[int]:
        self.batches.append(batch)
        self.arrived.set()
        await self.open.wait()
        if any(i < 0 for i in batch):
            raise ValueError(f"bad item in {batch}")
        return [i * 10 for i in batch]


async def _queue(calls: Coalescer[int, int], items: tuple[int, ...]) -> list[asyncio.Task[int]]:
    """Submit ``items``, each its own caller, and return once all are queued."""
    waits = [asyncio.ensure_future(calls.submit(i)) for i in items]
    await asyncio.sleep(0)  # one turn of the loop: each caller's first step queues it
    assert calls.queued == len(items)
    return waits


@pytest.mark.parametrize("alone", [False, True])
async def test_a_failed_batch_fails_each_caller_unless_run_alone(alone: bool) -> None:
    gate = Gate()
    calls = Coalescer(gate.run, max_batch=8, in_flight=1, alone_on_failure=alone)
    first = asyncio.ensure_future(calls.submit(1))
    await gate.arrived.wait()
    rest = await _queue(calls, (2, -3, 4))
    gate.open.set()
    results = await asyncio.gather(first, *rest, return_exceptions=True)

    assert results[0] == 10
    if alone:  # the batch again, one at a time: only the bad item fails
        assert gate.batches == [[1], [2, -3, 4], [2], [-3], [4]]
        assert results[1] == 20 and results[3] == 40
        assert isinstance(results[2], ValueError)
    else:
        assert gate.batches == [[1], [2, -3, 4]]
        assert all(isinstance(r, ValueError) for r in results[1:])


async def test_a_caller_that_leaves_takes_only_its_own_wait() -> None:
    gate = Gate()
    calls = Coalescer(gate.run, max_batch=2, in_flight=1)
    first = asyncio.ensure_future(calls.submit(1))
    await gate.arrived.wait()
    leaving, staying, later = await _queue(calls, (2, 3, 4))
    leaving.cancel()
    gate.open.set()

    assert await asyncio.gather(first, staying, later) == [10, 30, 40]
    assert leaving.cancelled()
    # max_batch splits what queued; the left caller's item still went out.
    assert gate.batches == [[1], [2, 3], [4]]
    assert list(calls.sizes) == [1, 2, 1]


def test_a_coalescer_needs_room() -> None:
    with pytest.raises(ValueError):
        Coalescer(Gate().run, max_batch=1, in_flight=0)
