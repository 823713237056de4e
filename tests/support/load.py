"""Counting harness for delivery guarantees: many senders → many recipients
over the real HTTP API, recipients on SSE that reconnect with Last-Event-ID.

Every accepted send (2xx) is remembered; every event each SSE connection
receives is recorded with the connection it came on. The checks then say:
each accepted message reached its recipient exactly once, every connection
saw strictly consecutive seqs (no skip, no repeat), and the union over a
recipient's reconnects is exactly 1..N.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from tests.support.meshapi import AgentHandle, MeshFactory, OwnerHandle


@dataclass
class Cast:
    owner: OwnerHandle
    senders: list[AgentHandle]
    recipients: list[AgentHandle]


async def build_cast(mesh: MeshFactory, n_senders: int, n_recipients: int) -> Cast:
    """One owner's agents in one group: everyone may message everyone."""
    owner = await mesh.owner()
    senders = [await owner.agent(f"s{i}") for i in range(n_senders)]
    recipients = [await owner.agent(f"r{i}") for i in range(n_recipients)]
    group = f"g-{uuid.uuid4().hex[:10]}"
    resp = await owner.post("/v1/groups", {"group_id": group, "name": "load"})
    assert resp.status_code == 201, resp.text
    for agent in senders + recipients:
        resp = await owner.post(f"/v1/groups/{group}/members", {"agent_id": agent.agent_id})
        assert resp.status_code == 201, resp.text
    return Cast(owner, senders, recipients)


@dataclass
class SendLog:
    accepted: dict[str, str] = field(default_factory=dict)  # message_id → recipient
    retries: int = 0
    progress: asyncio.Event = field(default_factory=asyncio.Event)

    def accept(self, message_id: str, recipient: str) -> None:
        self.accepted[message_id] = recipient
        self.progress.set()

    async def wait_accepted(self, at_least: int, timeout: float = 120.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.accepted) < at_least:
                self.progress.clear()
                await self.progress.wait()


async def send_load(cast: Cast, total: int, *, concurrency: int = 12,
                    log: SendLog | None = None,
                    pause: asyncio.Event | None = None) -> SendLog:
    """Send ``total`` messages round-robin from every sender to every recipient.
    A failed request is retried with the same message_id until it is accepted,
    as a real client would (the id makes the retry safe)."""
    log = log or SendLog()
    pairs = itertools.cycle([(s, r) for s in cast.senders for r in cast.recipients])
    jobs = [(next(pairs), f"m-load-{uuid.uuid4().hex}") for _ in range(total)]
    queue: asyncio.Queue[tuple[tuple[AgentHandle, AgentHandle], str]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def worker() -> None:
        while True:
            try:
                (sender, recipient), message_id = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await send_until_accepted(sender, recipient, message_id, log, pause=pause)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return log


async def send_until_accepted(sender: AgentHandle, recipient: AgentHandle, message_id: str,
                              log: SendLog, *, pause: asyncio.Event | None = None) -> None:
    """One message, retried with the same message_id until it is accepted, as a real
    client would (the id makes the retry safe)."""
    body = {"to_agent_id": recipient.agent_id, "message": {
        "message_id": message_id, "parts": [{"kind": "text", "text": message_id}]}}
    for attempt in itertools.count():
        if pause is not None:
            await pause.wait()
        try:
            resp = await sender.post("/v1/mesh/tasks", body)
        except httpx.HTTPError:
            resp = None
        if resp is not None and resp.status_code in (200, 201):
            log.accept(message_id, recipient.agent_id)
            return
        if resp is not None and resp.status_code == 401:
            with contextlib.suppress(AssertionError, httpx.HTTPError):
                await sender.refresh_token()
        log.retries += 1
        await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))


class InboxReader:
    """Follows one agent's inbox and records every event with the connection (SSE)
    or the poll (long-poll) it came on; resumes after its last seq on any error.
    ``slim`` keeps only what the counting needs (a long soak receives 10⁵ events)."""

    def __init__(self, base_url: str, agent: AgentHandle, *, slim: bool = False) -> None:
        self.base_url = base_url
        self.agent = agent
        self.slim = slim
        self.connections: list[list[dict[str, Any]]] = []
        self.last_seq = 0
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()
        self.errors: list[str] = []

    def start(self) -> None:
        # One follower per reader: two would interleave their receptions.
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None  # not `running` from here on
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None

    async def cut(self) -> None:
        """Drop the current connection from the client side (the next one resumes)."""

    async def _run(self) -> None:
        raise NotImplementedError

    def _record(self, into: list[dict[str, Any]], event: dict[str, Any]) -> None:
        if self.slim:
            slim: dict[str, Any] = {"seq": event["seq"], "type": event["type"]}
            if event["type"] == "task.created":
                slim["payload"] = {"message": {
                    "message_id": event["payload"]["message"]["message_id"]}}
            event = slim
        into.append(event)
        self.last_seq = event["seq"]
        self.changed.set()

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for conn in self.connections for e in conn]

    async def wait_for(self, seq: int, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while self.last_seq < seq:
                self.changed.clear()
                await self.changed.wait()


class LongPollCollector(InboxReader):
    """Follows one agent's inbox by long-polling ``GET /v1/mesh/inbox?after=&wait=``."""

    def __init__(self, base_url: str, agent: AgentHandle, *, wait: float = 10.0,
                 limit: int = 500, slim: bool = False) -> None:
        super().__init__(base_url, agent, slim=slim)
        self.wait = wait
        self.limit = limit
        self._poll: asyncio.Task[httpx.Response] | None = None

    async def cut(self) -> None:
        if self._poll is not None:
            self._poll.cancel()

    async def _run(self) -> None:
        backoff = 0.05
        async with httpx.AsyncClient(base_url=self.base_url,
                                     timeout=httpx.Timeout(10.0, read=self.wait + 20)) as client:
            while True:
                self._poll = asyncio.create_task(client.get(
                    "/v1/mesh/inbox", headers=self.agent.headers,
                    params={"after": self.last_seq, "limit": self.limit, "wait": self.wait}))
                try:
                    resp = await self._poll
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    continue  # cut: poll again from the same seq
                except httpx.HTTPError:
                    resp = None
                finally:
                    self._poll = None
                if resp is not None and resp.status_code == 401:
                    with contextlib.suppress(AssertionError, httpx.HTTPError):
                        await self.agent.refresh_token()
                elif resp is not None and resp.status_code == 200:
                    events = resp.json()["events"]
                    after = int(resp.request.url.params["after"])
                    if events:
                        received: list[dict[str, Any]] = []
                        self.connections.append(received)
                        for event in events:
                            if event["seq"] <= after:
                                self.errors.append(f"seq {event['seq']} after={after}")
                            self._record(received, event)
                    backoff = 0.05
                    continue
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)


class SseCollector(InboxReader):
    """Follows one agent's inbox over SSE; reconnects (Last-Event-ID) on any error."""

    def __init__(self, base_url: str, agent: AgentHandle, *, slim: bool = False) -> None:
        super().__init__(base_url, agent, slim=slim)
        self._current: httpx.Response | None = None

    async def cut(self) -> None:
        if self._current is not None:
            await self._current.aclose()

    async def _run(self) -> None:
        backoff = 0.05
        async with httpx.AsyncClient(base_url=self.base_url,
                                     timeout=httpx.Timeout(10.0, read=60.0)) as client:
            while True:
                received: list[dict[str, Any]] = []
                self.connections.append(received)
                headers = {**self.agent.headers, "Last-Event-ID": str(self.last_seq)}
                try:
                    async with aconnect_sse(client, "GET", "/v1/mesh/inbox/stream",
                                            headers=headers) as source:
                        self._current = source.response
                        if source.response.status_code == 401:
                            await self.agent.refresh_token()
                            continue
                        async for sse in source.aiter_sse():
                            if not sse.data:
                                # httpx-sse turns a keep-alive comment into an empty
                                # event once an id was seen; the SSE spec drops those.
                                continue
                            try:
                                event = json.loads(sse.data)
                                if int(sse.id) != event["seq"]:
                                    raise ValueError(f"id {sse.id} != seq {event['seq']}")
                            except (ValueError, KeyError, TypeError) as exc:
                                self.errors.append(f"bad SSE event {sse!r}: {exc}")
                                continue
                            self._record(received, event)
                            backoff = 0.05
                except (httpx.HTTPError, httpx.StreamError, RuntimeError):
                    pass
                finally:
                    self._current = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)


@dataclass
class Tally:
    """What one recipient's reader received, against what was accepted for it."""

    events: int  # events received, every type
    messages: int  # distinct accepted messages received
    lost: int  # accepted messages never received
    duplicated: int  # extra receptions of a message or of a seq
    unexpected: int  # messages received that were never accepted for this recipient
    out_of_order: int  # consecutive receptions whose seqs are not n, n + 1
    missing_seqs: int  # seqs in 1..inbox_seq never received
    errors: list[str]
    first_break: int | None  # index of the first reception that breaks 1..inbox_seq

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.out_of_order
                    or self.missing_seqs or self.errors or self.first_break is not None)


def tally(log: SendLog, reader: InboxReader, inbox_seq: int) -> Tally:
    """Count one recipient's delivery. The union of its connections (or polls), in
    the order received, must be exactly 1..inbox_seq — a resume after the last seq
    seen repeats nothing and skips nothing — and hold each accepted message once."""
    events = reader.events
    seqs = [e["seq"] for e in events]
    breaks = sum(1 for a, b in itertools.pairwise(seqs) if b != a + 1)
    # Within one connection the same holds (no skip later papered over by a resume).
    breaks += sum(1 for conn in reader.connections
                  for a, b in itertools.pairwise([e["seq"] for e in conn]) if b != a + 1)
    expected_seqs = list(range(1, inbox_seq + 1))
    first_break = None if seqs == expected_seqs else next(
        (i for i, s in enumerate(seqs) if i >= inbox_seq or s != i + 1), len(seqs))
    got = [e["payload"]["message"]["message_id"] for e in events if e["type"] == "task.created"]
    expected = {m for m, r in log.accepted.items() if r == reader.agent.agent_id}
    received = set(got)
    # A seq received twice, or one message at two seqs (stored twice), is a duplicate.
    at_two_seqs = len({(e["seq"], e["payload"]["message"]["message_id"]) for e in events
                       if e["type"] == "task.created"}) - len(received)
    return Tally(events=len(seqs), messages=len(received & expected),
                 lost=len(expected - received),
                 duplicated=(len(seqs) - len(set(seqs))) + at_two_seqs,
                 unexpected=len(received - expected), out_of_order=breaks,
                 missing_seqs=len(set(expected_seqs) - set(seqs)), errors=reader.errors,
                 first_break=first_break)


def check_delivery(log: SendLog, collectors: dict[str, InboxReader],
                   inbox_seq: dict[str, int]) -> dict[str, int]:
    """Every accepted message exactly once at its recipient, in seq order, and the
    union of a recipient's connections exactly 1..inbox_seq. Returns counts."""
    counts: dict[str, int] = {}
    for agent_id, collector in collectors.items():
        t = tally(log, collector, inbox_seq[agent_id])
        assert not t.errors, t.errors[:3]
        assert t.out_of_order == 0 and t.first_break is None and t.missing_seqs == 0, (
            f"{agent_id}: got {t.events} events, expected 1..{inbox_seq[agent_id]}; "
            f"{t.out_of_order} order breaks, {t.missing_seqs} seqs missing, "
            f"first bad index {t.first_break}")
        assert t.duplicated == 0, f"{agent_id}: {t.duplicated} receptions twice"
        assert t.lost == 0 and t.unexpected == 0, (
            f"{agent_id}: {t.lost} accepted messages missing, {t.unexpected} unexpected")
        counts[agent_id] = t.messages
    return counts
