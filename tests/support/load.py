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
                    break
                if resp is not None and resp.status_code == 401:
                    await sender.refresh_token()
                log.retries += 1
                await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return log


class SseCollector:
    """Follows one agent's inbox over SSE; reconnects (Last-Event-ID) on any error."""

    def __init__(self, base_url: str, agent: AgentHandle) -> None:
        self.base_url = base_url
        self.agent = agent
        self.connections: list[list[dict[str, Any]]] = []
        self.last_seq = 0
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._current: httpx.Response | None = None
        self.changed = asyncio.Event()
        self.errors: list[str] = []

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def cut(self) -> None:
        """Drop the current connection from the client side (the next one resumes)."""
        if self._current is not None:
            await self._current.aclose()

    @property
    def events(self) -> list[dict[str, Any]]:
        return [e for conn in self.connections for e in conn]

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
                            received.append(event)
                            self.last_seq = event["seq"]
                            self.changed.set()
                            backoff = 0.05
                except (httpx.HTTPError, httpx.StreamError, RuntimeError):
                    pass
                finally:
                    self._current = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)

    async def wait_for(self, seq: int, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while self.last_seq < seq:
                self.changed.clear()
                await self.changed.wait()


def check_connection_order(collector: SseCollector) -> None:
    """Within one connection: strictly consecutive seqs, no skip, no repeat."""
    for conn in collector.connections:
        seqs = [e["seq"] for e in conn]
        for a, b in itertools.pairwise(seqs):
            assert b == a + 1, f"{collector.agent.agent_id}: seq {b} after {a} on one connection"


def check_delivery(log: SendLog, collectors: dict[str, SseCollector],
                   inbox_seq: dict[str, int]) -> dict[str, int]:
    """Every accepted message exactly once at its recipient, in seq order, and the
    union of a recipient's connections exactly 1..inbox_seq. Returns counts."""
    counts: dict[str, int] = {}
    for agent_id, collector in collectors.items():
        assert not collector.errors, collector.errors[:3]
        check_connection_order(collector)
        seqs = [e["seq"] for e in collector.events]
        in_order = seqs == list(range(1, inbox_seq[agent_id] + 1))
        assert in_order, (
            f"{agent_id}: got {len(seqs)} events, expected 1..{inbox_seq[agent_id]}; "
            f"first bad index {next((i for i, s in enumerate(seqs) if s != i + 1), None)}")
        got = [e["payload"]["message"]["message_id"] for e in collector.events
               if e["type"] == "task.created"]
        unique = len(got) == len(set(got))
        assert unique, f"{agent_id}: a message arrived twice"
        expected = {m for m, r in log.accepted.items() if r == agent_id}
        same = set(got) == expected
        assert same, (f"{agent_id}: {len(expected - set(got))} accepted messages "
                                      f"missing, {len(set(got) - expected)} unexpected")
        counts[agent_id] = len(got)
    return counts
