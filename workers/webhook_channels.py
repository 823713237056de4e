"""What workers.webhook delivers: the targets one lane loop serves (ADR 035, 039).

A channel says where a target's registration lives (its lease, breaker and
cursor columns), what comes next after its cursor, how a POST of it is headed,
and what a 2xx records. The loop — lanes, leases, retries, the breaker, the
SSRF-guarded POST — is the worker's and the same for every channel.

- ``AgentWebhooks``: an agent's whole inbox, signed per Standard Webhooks; a 2xx
  acks the agent's cursor (``agents.acked_seq``), as ``POST /v1/mesh/inbox/ack``.
- ``TaskPushes``: an A2A push-notification config; one task's events in the
  registering agent's inbox, each as an A2A ``StreamResponse``, with the
  config's ``authentication`` and ``token`` headers; a 2xx moves the config's
  own cursor (``task_push_configs.last_seq``) and nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
from a2a.utils.proto_utils import to_stream_response
from google.protobuf.json_format import MessageToDict

from app.a2a import mapping
from app.delivery.webhook_signing import Sealer, signature_headers
from app.domain.event_wire import event_id_of, traceparent_of
from app.platform import tracing
from app.platform.metrics import E2E_LATENCY
from app.store import agents as agents_store
from app.store import inbox as inbox_store
from app.store import push_configs as push_store
from app.store import webhooks as webhooks_store

# (channel kind, key): ("webhook", agent_id) or ("push", str(push_id)).
LaneKey = tuple[str, str]
Row = asyncpg.Record

TOKEN_HEADER = "X-A2A-Notification-Token"
# Opened webhook secrets kept in memory (sealed → opened), per process.
OPENED_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class Item:
    """One thing to POST: its seq in the target's cursor, its bytes, its source."""

    seq: int
    body: bytes
    source: Any = None

    @property
    def skip(self) -> bool:
        return not self.body


class Channel(Protocol):
    async def sweep(self, limit: int) -> list[tuple[str, str, bool]]:
        """(agent whose inbox feeds it, key, due now) for every registration."""

    async def claim(self, key: str, owner: str, lease: float) -> Row | None: ...

    async def renew(self, key: str, owner: str, lease: float) -> Row | None: ...

    async def peek(self, key: str, owner: str) -> Row | None:
        """The lane re-read under a live lease, writing nothing."""

    async def release(self, key: str, owner: str) -> bool: ...

    async def batch(self, key: str, row: Row, limit: int) -> list[Item]: ...

    def headers(self, row: Row, item: Item) -> dict[str, str]: ...

    async def delivered(self, key: str, row: Row, items: list[Item], owner: str,
                        lease: float) -> Row | None:
        """``items`` (consecutive, in seq order) were taken: one write records them."""

    async def failed(self, key: str, owner: str, lease: float, *, error: str, failures: int,
                     breaker: str, opens: int, retry_in: float) -> Row | None: ...

    async def opened(self, key: str) -> None:
        """The breaker just opened."""


class AgentWebhooks:
    def __init__(self, pool: asyncpg.Pool, sealer: Sealer) -> None:
        self.pool, self.sealer = pool, sealer
        self._opened: dict[str, str] = {}

    async def sweep(self, limit: int) -> list[tuple[str, str, bool]]:
        rows = await webhooks_store.sweep(self.pool, limit)
        return [(r["agent_id"], r["agent_id"], bool(r["due"])) for r in rows]

    async def claim(self, key: str, owner: str, lease: float) -> Row | None:
        return await webhooks_store.claim(self.pool, key, owner, lease)

    async def renew(self, key: str, owner: str, lease: float) -> Row | None:
        return await webhooks_store.renew(self.pool, key, owner, lease)

    async def peek(self, key: str, owner: str) -> Row | None:
        return await webhooks_store.peek(self.pool, key, owner)

    async def release(self, key: str, owner: str) -> bool:
        return await webhooks_store.release(self.pool, key, owner)

    async def batch(self, key: str, row: Row, limit: int) -> list[Item]:
        events = await inbox_store.after(self.pool, key, int(row["cursor"]), limit)
        return [Item(e.seq, e.data, e) for e in events]

    def headers(self, row: Row, item: Item) -> dict[str, str]:
        keys = [self._open(row["secret"])]
        if row["previous_valid"]:
            keys.append(self._open(row["previous_secret"]))
        headers = signature_headers(event_id_of(item.body), datetime.now(UTC), item.body, keys)
        # The message's trace (ADR 042): the receiver's own requests can join it.
        traceparent = traceparent_of(item.body)
        if traceparent:
            headers[tracing.TRACEPARENT] = traceparent
        return headers

    def _open(self, sealed: str) -> str:
        # Opened once per sealed value, not once per POST; a new secret is a new key.
        opened = self._opened.get(sealed)
        if opened is None:
            if len(self._opened) >= OPENED_KEPT:
                self._opened.clear()
            opened = self._opened[sealed] = self.sealer.open(sealed)
        return opened

    async def delivered(self, key: str, row: Row, items: list[Item], owner: str,
                        lease: float) -> Row | None:
        fresh = await webhooks_store.delivered(self.pool, key, owner, lease, items[0].seq,
                                               items[-1].seq)
        if fresh is not None:
            for latency in fresh["latencies"]:
                E2E_LATENCY.observe(max(latency, 0.0))
        if tracing.enabled:
            tracing.delivered((traceparent_of(item.body) for item in items), "webhook")
        if row["breaker"] == "open" or row["status"] == "inactive":
            await agents_store.set_reachable(self.pool, key, True)
        return fresh

    async def failed(self, key: str, owner: str, lease: float, **state: Any) -> Row | None:
        return await webhooks_store.failed(self.pool, key, owner, lease, **state)

    async def opened(self, key: str) -> None:
        # Unreachable by webhook: cron's heartbeat rule applies to it again.
        await agents_store.set_reachable(self.pool, key, False)


class TaskPushes:
    def __init__(self, pool: asyncpg.Pool, sealer: Sealer) -> None:
        self.pool, self.sealer = pool, sealer

    async def sweep(self, limit: int) -> list[tuple[str, str, bool]]:
        rows = await push_store.sweep(self.pool, limit)
        return [(r["agent_id"], str(r["push_id"]), bool(r["due"])) for r in rows]

    async def claim(self, key: str, owner: str, lease: float) -> Row | None:
        return await push_store.claim(self.pool, int(key), owner, lease)

    async def renew(self, key: str, owner: str, lease: float) -> Row | None:
        return await push_store.renew(self.pool, int(key), owner, lease)

    async def peek(self, key: str, owner: str) -> Row | None:
        return await push_store.peek(self.pool, int(key), owner)

    async def release(self, key: str, owner: str) -> bool:
        return await push_store.release(self.pool, int(key), owner)

    async def batch(self, key: str, row: Row, limit: int) -> list[Item]:
        """The task's next events as StreamResponse JSON. A message event reports
        the task's state at it, so the state before the cursor is read first."""
        agent_id, task_id, cursor = row["agent_id"], row["task_id"], int(row["cursor"])
        rows = await inbox_store.task_events_after(self.pool, agent_id, task_id, cursor, limit)
        if not rows:
            return []
        state = await inbox_store.task_state_at(self.pool, agent_id, task_id,
                                                cursor) or "submitted"
        items = []
        for event_row in rows:
            event, state = mapping.stream_event(event_row, state)
            if event is None:
                # Nothing A2A shows (not a task event): skip it, but move past it.
                items.append(Item(int(event_row["seq"]), b"", None))
                continue
            body = MessageToDict(to_stream_response(event))
            items.append(Item(int(event_row["seq"]),
                              json.dumps(body, ensure_ascii=False,
                                         separators=(",", ":")).encode()))
        return items

    def headers(self, row: Row, item: Item) -> dict[str, str]:
        out: dict[str, str] = {}
        if row["token"]:
            out[TOKEN_HEADER] = self.sealer.open(row["token"])
        if row["auth_scheme"] and row["auth_credentials"]:
            out["Authorization"] = (f"{row['auth_scheme']} "
                                    f"{self.sealer.open(row['auth_credentials'])}")
        return out

    async def delivered(self, key: str, row: Row, items: list[Item], owner: str,
                        lease: float) -> Row | None:
        return await push_store.succeeded(self.pool, int(key), owner, lease, items[-1].seq)

    async def failed(self, key: str, owner: str, lease: float, **state: Any) -> Row | None:
        return await push_store.failed(self.pool, int(key), owner, lease, **state)

    async def opened(self, key: str) -> None:
        return None  # the config's own state (failures, breaker) is all there is
