"""Scenario 4: long-poll wake-up.

Each try parks ``GET /v1/mesh/inbox?after=N&wait=10`` for one recipient, lets
it settle in the server (100 ms), sends one message to that recipient, and
times until the poll returns with it: from the send request written (what a
user sees) and from the send's 201 (the wake-up path alone: relay → bus →
push → Redis notification → the parked request re-reads Postgres).

Baseline, in the same run: the seed design's client, which re-queries every
500 ms (``wait=0`` polls on a fixed 500 ms period, sends at random phases).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from bench.client import Client, HttpError, now
from bench.load import Agent, new_message_id, send


@dataclass
class LongPollRun:
    from_send: list[float] = field(default_factory=list)
    from_ack: list[float] = field(default_factory=list)
    empty: int = 0          # polls that returned without the event (timeout)
    errors: list[str] = field(default_factory=list)


def _has(events: list[dict], message_id: str) -> bool:  # type: ignore[type-arg]
    return any((e.get("payload") or {}).get("message", {}).get("message_id") == message_id
               for e in events)


async def run(base_url: str, sender: Agent, recipient: Agent, *, tries: int,
              after: int) -> LongPollRun:
    result = LongPollRun()
    poller, sender_client = Client(base_url), Client(base_url)
    await poller.prewarm(1)
    await sender_client.prewarm(1)
    for _ in range(tries):
        mid = new_message_id()
        poll = asyncio.create_task(poller.request(
            "GET", f"/v1/mesh/inbox?after={after}&wait=10&limit=10", recipient.headers))
        await asyncio.sleep(0.1)
        t0 = now()
        try:
            ack = await send(sender_client, sender, recipient.agent_id, mid)
            resp = await poll
        except HttpError as exc:
            result.errors.append(str(exc))
            continue
        if ack.status != 201 or resp.status != 200:
            result.errors.append(f"send {ack.status}, poll {resp.status}")
            continue
        data = resp.json()
        if not _has(data["events"], mid):
            result.empty += 1
        else:
            result.from_send.append(resp.done_at - t0)
            result.from_ack.append(resp.done_at - ack.done_at)
        after = data["next_after"]
    poller.close()
    sender_client.close()
    return result


async def run_baseline(base_url: str, sender: Agent, recipient: Agent, *, tries: int,
                       after: int, period: float = 0.5) -> LongPollRun:
    """A client that re-polls every ``period`` s; latency from the send written."""
    result = LongPollRun()
    poller, sender_client = Client(base_url), Client(base_url)
    await poller.prewarm(1)
    await sender_client.prewarm(1)
    rng = random.Random(7)
    pending: dict[str, float] = {}
    stop = asyncio.Event()
    cursor = after

    async def poll_loop() -> None:
        nonlocal cursor
        next_at = now()
        while not stop.is_set():
            next_at += period
            try:
                resp = await poller.request("GET", f"/v1/mesh/inbox?after={cursor}&limit=100",
                                            recipient.headers)
            except HttpError as exc:
                result.errors.append(str(exc))
            else:
                data = resp.json()
                for e in data["events"]:
                    mid = (e.get("payload") or {}).get("message", {}).get("message_id")
                    if mid in pending:
                        result.from_send.append(resp.done_at - pending.pop(mid))
                cursor = data["next_after"]
            await asyncio.sleep(max(0.0, next_at - now()))

    loop_task = asyncio.create_task(poll_loop())
    for _ in range(tries):
        await asyncio.sleep(rng.uniform(0.2, 0.7))
        mid = new_message_id()
        pending[mid] = now()
        try:
            await send(sender_client, sender, recipient.agent_id, mid)
        except HttpError as exc:
            result.errors.append(str(exc))
    deadline = now() + 3 * period + 2
    while pending and now() < deadline:  # noqa: ASYNC110 (bounded straggler wait)
        await asyncio.sleep(0.05)
    result.empty = len(pending)
    stop.set()
    await loop_task
    poller.close()
    sender_client.close()
    return result
