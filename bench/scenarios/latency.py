"""Scenario 1: end-to-end latency at a fixed, open-loop rate.

Several senders → several recipients, each recipient on one SSE stream. A
message is sent every ``1/rate`` s on a fixed schedule (open loop: a slow
answer never delays the next send, so queueing shows up as latency instead of
being hidden by a slower offered load). Per message:

* e2e = perf_counter when the SSE client parsed the event − perf_counter when
  the send request was written (one clock, one process);
* API = response read − request written.

The run is repeated with the outbox process restarted on the baseline relay
setting (no wake-up, 1 s sweep, batch 50); web and push stay as they are.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.client import Client, HttpError, SseEvent, SseStream, now
from bench.cpu import CpuMeter, Interval, Measure
from bench.load import (
    Agent,
    Cast,
    db_now,
    inbox_seqs,
    message_id_of,
    new_message_id,
    open_stream,
    relay_batches_since,
    send,
)
from bench.stats import Dist


@dataclass
class LatencyRun:
    rate: float
    seconds: float
    offered: int = 0
    accepted: int = 0
    errors: list[str] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    pipeline: list[float] = field(default_factory=list)   # 201 read → SSE event parsed
    api: list[float] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)   # start − schedule (open-loop honesty)
    missing: int = 0
    duplicates: int = 0
    reordered: int = 0      # events whose seq is not above the stream's previous one
    cpu: Interval | None = None
    relay_rows: int = 0     # this run's rows the relay sent …
    relay_batches: int = 0  # … in this many transactions

    @property
    def sends_per_batch(self) -> float:
        return self.relay_rows / self.relay_batches if self.relay_batches else math.nan

    @property
    def e2e_dist(self) -> Dist:
        return Dist.of_seconds(self.e2e)

    @property
    def pipeline_dist(self) -> Dist:
        return Dist.of_seconds(self.pipeline)

    @property
    def api_dist(self) -> Dist:
        return Dist.of_seconds(self.api)


async def run(stream_urls: Sequence[str], database_url: str, cast: Cast, client: Client, *,
              rate: float, seconds: float, settle: float, topic: str = "",
              meter: CpuMeter | None = None) -> LatencyRun:
    """One open-loop run; waits up to ``settle`` s after the last send for stragglers.
    Recipient i's stream goes to web process ``stream_urls[i % len]`` (round robin).
    With the bus ``topic``, also counts the relay's batches for this run's rows."""
    result = LatencyRun(rate, seconds)
    sent_at: dict[str, float] = {}
    acked_at: dict[str, float] = {}
    seen: set[str] = set()
    received_at: dict[str, float] = {}
    got_all = asyncio.Event()
    sending_done = False

    last_seq: dict[int, int] = {}

    def on_event(stream: SseStream, ev: SseEvent) -> None:
        if ev.id is not None and ev.id.isdigit():
            seq = int(ev.id)
            if seq <= last_seq.get(id(stream), -1):
                result.reordered += 1
            last_seq[id(stream)] = seq
        mid = message_id_of(ev)
        if mid is None or mid not in sent_at:
            return
        if mid in seen:
            result.duplicates += 1
            return
        seen.add(mid)
        result.e2e.append(ev.at - sent_at[mid])
        received_at[mid] = ev.at
        if len(seen) >= result.accepted and sending_done:
            got_all.set()

    after = await inbox_seqs(database_url, [r.agent_id for r in cast.recipients])
    streams = [await open_stream(stream_urls[i % len(stream_urls)], r, after[r.agent_id], on_event)
               for i, r in enumerate(cast.recipients)]
    pairs = itertools.cycle([(s, r) for s in cast.senders for r in cast.recipients])
    db_start = await db_now(database_url) if topic else None

    async def one(sender: Agent, recipient: Agent, mid: str) -> None:
        sent_at[mid] = now()   # the request is written without another await (warm pool)
        try:
            resp = await send(client, sender, recipient.agent_id, mid)
        except HttpError as exc:
            result.errors.append(str(exc))
            return
        if resp.status == 201:
            result.accepted += 1
            result.api.append(resp.latency)
            acked_at[mid] = resp.done_at
        else:
            sent_at.pop(mid, None)
            result.errors.append(f"HTTP {resp.status}: {resp.body[:200]!r}")

    tasks: list[asyncio.Task[None]] = []
    measure = Measure(meter) if meter is not None else None
    if measure is not None:
        measure.__enter__()
    total = math.floor(rate * seconds)
    start = now() + 0.05
    for i in range(total):
        due = start + i / rate
        delay = due - now()
        if delay > 0:
            await asyncio.sleep(delay)
        result.send_lag.append(now() - due)
        sender, recipient = next(pairs)
        mid = new_message_id()
        tasks.append(asyncio.create_task(one(sender, recipient, mid)))
        result.offered += 1
    await asyncio.gather(*tasks)
    if measure is not None:
        measure.__exit__(None, None, None)
        result.cpu = measure.result
    sending_done = True
    if len(seen) >= result.accepted:
        got_all.set()
    try:
        await asyncio.wait_for(got_all.wait(), settle)
    except TimeoutError:
        pass
    result.missing = result.accepted - len(seen)
    result.pipeline = [at - acked_at[mid] for mid, at in received_at.items() if mid in acked_at]
    if topic:
        result.relay_rows, result.relay_batches = await relay_batches_since(
            database_url, topic, db_start)
    for s in streams:
        s.close()
    return result
