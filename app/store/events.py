"""The transactional write's tail: per-recipient seq, inbox rows, outbox rows.

One statement does it all, inside the caller's transaction: it locks the
recipients' counter rows in agent_id order (so two writes reaching the same
agents can never deadlock), bumps each counter by one, inserts the inbox
events with those seqs and one outbox row per event for the relay. The
relay is woken after the commit (app.delivery.after_commit), not from inside it.

The outbox row carries only the event's envelope (seq, event_id, type, ids),
never its content or a wire form: the relay's claim joins the inbox row back
and encodes it with app.domain.event_wire, like every other delivery path (ADR 014).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.domain.ids import new_event_id
from app.platform import tracing

WAKEUP_CHANNEL = "mesh_outbox"


def relay_wakeup_channel(topic: str) -> str:
    """The Redis channel the relays of ``topic`` hear a web process's commits on
    (ADR 029): published in the after-commit signal's Redis pipeline, so a send costs the web
    no NOTIFY round trip. Per topic, like the relay's claim."""
    return f"mesh:outbox-wakeup:{topic}"


def relay_wakeup_message(events: int) -> bytes:
    """A relay wake-up's body: how many inbox events its round announces (each of its
    commits' recipients, once per commit). The relay waits differently for a lone
    send than for a round of many (ADR 060)."""
    return str(events).encode()


def relay_wakeup_events(body: bytes | str) -> int:
    """The events a wake-up announces: at least 1, and 1 for a body without a count
    (a NOTIFY, or a web process that sends none)."""
    try:
        return max(int(body), 1)
    except ValueError:
        return 1


@dataclass(frozen=True)
class NewEvent:
    agent_id: str
    type: str
    payload: dict[str, Any]
    task_id: str | None = None
    context_id: str | None = None
    from_agent_id: str | None = None
    event_id: str = field(default_factory=new_event_id)
    # The trace of the request that makes the event (None while tracing is off).
    traceparent: str | None = field(default_factory=tracing.current_traceparent)


# An inbox row as written: what app.domain.event_wire encodes. Every event write
# returns it, so the web can carry a committed event in its commit notice with the
# bytes every other path sends (app.delivery.after_commit).
WRITTEN = ("agent_id, seq, event_id, type, task_id, context_id, from_agent_id, payload, "
           "traceparent, created_at")


def event_tail(source: str, *, topic: str) -> str:
    """The CTEs ``ins`` and ``out`` that every event write ends with: insert the
    inbox events ``source`` selects (columns agent_id, seq, event_id, type, task_id,
    context_id, from_agent_id, payload, traceparent, in that order) and one outbox row per event,
    carrying the envelope the relay's claim joins back (ADR 014). ``topic`` is the
    SQL expression (a placeholder) of the bus topic."""
    return f"""ins AS (
    INSERT INTO inbox_events (agent_id, seq, event_id, type, task_id, context_id,
                              from_agent_id, payload, traceparent)
    {source}
    RETURNING {WRITTEN}
), out AS (
    INSERT INTO outbox_events (topic, key, payload)
    SELECT {topic}, i.agent_id, jsonb_build_object(
        'seq', i.seq, 'event_id', i.event_id, 'type', i.type, 'task_id', i.task_id,
        'context_id', i.context_id, 'from_agent_id', i.from_agent_id)
    FROM ins i ORDER BY i.agent_id
    RETURNING id
)"""


def bump_many(recipients: str) -> str:
    """The CTEs ``locked`` and ``bumped``: each agent ``recipients`` selects (a
    query, with repeats) gets its counter moved by the number of times it is
    named; ``bumped`` has (agent_id, inbox_seq: the last seq taken, bumped_by).
    The counter rows are locked in agent_id order, so two writes reaching the
    same agents can never deadlock; agents that do not exist get no row."""
    return f"""locked AS (
    SELECT a.agent_id FROM agents a WHERE a.agent_id IN ({recipients})
    ORDER BY a.agent_id FOR UPDATE
), counts AS (
    SELECT agent_id, count(*) AS n FROM ({recipients}) AS named(agent_id) GROUP BY agent_id
), bumped AS (
    UPDATE agents a SET inbox_seq = a.inbox_seq + c.n FROM locked l, counts c
    WHERE a.agent_id = l.agent_id AND c.agent_id = l.agent_id
    RETURNING a.agent_id, a.inbox_seq, c.n AS bumped_by
)"""


_APPEND_SQL = f"""
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::jsonb[], $10::text[])
        AS r(agent_id, event_id, type, task_id, context_id, from_agent_id, payload, traceparent)
), {bump_many("SELECT agent_id FROM req")}, {event_tail(
    "SELECT r.agent_id, b.inbox_seq, r.event_id, r.type, r.task_id, r.context_id, "
    "r.from_agent_id, r.payload, r.traceparent FROM req r JOIN bumped b USING (agent_id)",
    topic="$8")},
receipt AS (
    -- The message this event carries learns its recipient's seq (for receipts)
    -- in the same statement.
    UPDATE task_messages m SET inbox_seq = i.seq FROM ins i
    WHERE m.message_id = $9 AND m.recipient = i.agent_id AND m.sender = i.from_agent_id
    RETURNING 1
)
SELECT {WRITTEN} FROM ins
"""


class RecipientMissing(Exception):
    """An event named an agent that does not exist (deleted concurrently)."""


async def append(conn: asyncpg.Connection, events: Sequence[NewEvent], *,
                 topic: str, skip_missing: bool = False,
                 message_id: str | None = None) -> list[dict[str, Any]]:
    """Write ``events`` (at most one per recipient); returns one row per event
    written (the columns :data:`WRITTEN`).

    An event for an agent that no longer exists raises :class:`RecipientMissing`
    (the caller's transaction then rolls back), or is dropped with ``skip_missing``
    (system notices such as timeouts, where the other side may be gone).
    ``message_id`` names the task message an event carries, to record its seq."""
    if not events:
        return []
    recipients = [e.agent_id for e in events]
    if len(set(recipients)) != len(recipients):
        raise ValueError("one event per recipient per write: seq is bumped once per agent")
    rows = await conn.fetch(
        _APPEND_SQL,
        recipients, [e.event_id for e in events], [e.type for e in events],
        [e.task_id for e in events], [e.context_id for e in events],
        [e.from_agent_id for e in events], [e.payload for e in events], topic, message_id,
        [e.traceparent for e in events],
    )
    if len(rows) != len(events) and not skip_missing:
        raise RecipientMissing(sorted(set(recipients) - {r["agent_id"] for r in rows}))
    return [dict(r) for r in rows]
