"""The SSE stream's wait on its client (app.web.sse_response.Client): a hub wake-up
ends it whenever it came, also before the first wait."""

from __future__ import annotations

import asyncio

from starlette.types import Message

from app.delivery.inbox_hub import Waiter
from app.web.sse_response import Client

# Longer than any test may take: a wait that does not return at once fails the
# test by its result (False after the whole timeout), not by a clock.
LONG = 30.0


async def silent_client() -> Message:
    """A client that neither sends nor leaves."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_a_wake_before_the_first_wait_is_not_lost() -> None:
    waiter = Waiter("b@bob")
    waiter.wake()  # a notice while the stream read its first batch
    assert await Client(silent_client).wait(waiter, LONG) is True
    assert waiter.take_woken() is False  # the wait consumed it


async def test_a_wake_during_the_wait_ends_it() -> None:
    waiter = Waiter("b@bob")
    client = Client(silent_client)
    waiting = asyncio.create_task(client.wait(waiter, LONG))
    await asyncio.sleep(0)  # let the wait begin
    assert waiter.on_wake is not None
    waiter.wake()
    assert await waiting is True


async def test_a_tick_with_no_wake_is_false_and_a_leaving_client_none() -> None:
    waiter = Waiter("b@bob")
    assert await Client(silent_client).wait(waiter, 0) is False

    async def leaving() -> Message:
        return {"type": "http.disconnect"}

    assert await Client(leaving).wait(waiter, LONG) is None
