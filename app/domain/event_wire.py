"""The wire form of an inbox event — its one serializer (ADR 014).

Every path that hands an event to a client starts from an ``inbox_events`` row
and calls :func:`encode_event`: the relay (whose bytes travel bus → push →
Redis → live SSE untouched), SSE catch-up and gap-fill, and long-poll. So one
seq reaches a client as the same bytes whichever way it came. ``created_at`` is
always UTC with microseconds, whatever the database session's time zone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# The columns encode_event reads, for queries that feed it.
EVENT_COLUMNS = ("seq, event_id, type, task_id, context_id, from_agent_id, created_at, payload, "
                 "traceparent")


@dataclass(frozen=True, slots=True)
class WireEvent:
    """An event ready for a client: ``data`` is the JSON, seq and type are
    beside it so SSE can write ``id:`` and ``event:`` without parsing it."""

    seq: int
    type: str
    data: bytes


def format_timestamp(value: datetime) -> str:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise TypeError(f"an event's created_at must be an aware datetime, got {value!r}")
    # Fixed width: isoformat() alone drops the fraction when it is zero.
    return value.astimezone(UTC).isoformat(timespec="microseconds")


# The same options as the JSON API responses (Starlette's JSONResponse). One
# encoder for every call: json.dumps with options builds a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _dumps(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


# The head encode_event writes: seq, event_id and type come first, in this order.
_HEAD = re.compile(rb'\{"seq":(\d+),"event_id":"((?:[^"\\]|\\.)*)","type":"((?:[^"\\]|\\.)*)"')


def peek(data: bytes) -> tuple[int, str] | None:
    """The seq and type of encoded event bytes, read from their head without
    parsing the body (the push worker's hot path); None for bytes encode_event
    did not make, which the caller then parses in full."""
    head = _HEAD.match(data)
    if head is None:
        return None
    raw_type = head.group(3)
    kind = json.loads(b'"' + raw_type + b'"') if b"\\" in raw_type else raw_type.decode()
    return int(head.group(1)), kind


def event_id_of(data: bytes) -> str:
    """The event id of encoded event bytes, read from their head (parsed in full
    only for bytes encode_event did not make)."""
    head = _HEAD.match(data)
    if head is not None and b"\\" not in head.group(2):
        return head.group(2).decode()
    return str(json.loads(data)["event_id"])


def encode_event(row: Mapping[str, Any]) -> bytes:
    """The inbox event's JSON (docs/api.md), fields in its order, from an inbox row."""
    payload = row["payload"]
    if isinstance(payload, str):  # a connection without the pool's jsonb codec
        payload = json.loads(payload)
    event = {
        "seq": row["seq"],
        "event_id": row["event_id"],
        "type": row["type"],
        "task_id": row["task_id"],
        "context_id": row["context_id"],
        "from_agent_id": row["from_agent_id"],
        "created_at": format_timestamp(row["created_at"]),
        "payload": payload,
    }
    # The message's trace (app.platform.tracing), only when the write had one: an event
    # written while tracing is off has the same bytes as before tracing existed.
    traceparent = row.get("traceparent")
    if traceparent:
        event["traceparent"] = traceparent
    return _dumps(event)


def wire_event(row: Mapping[str, Any]) -> WireEvent:
    return WireEvent(int(row["seq"]), str(row["type"]), encode_event(row))


_TRACE_MARK = b',"traceparent":"'


def traceparent_of(data: bytes) -> str | None:
    """The trace encode_event put last in an event's bytes, without parsing them
    (a traceparent holds no character JSON escapes); None when it has none. Only
    the envelope's own last field counts: a payload's "traceparent" key never does."""
    at = data.rfind(_TRACE_MARK)
    if at < 0:
        return None
    start = at + len(_TRACE_MARK)
    end = len(data) - 2
    if end <= start or data[end:] != b'"}' or b'"' in data[start:end]:
        return None
    return data[start:end].decode("ascii", "replace")


def encode_page(events: Sequence[WireEvent], next_after: int) -> bytes:
    """The long-poll body ``{"events":[…],"next_after":N}`` with each event's
    bytes embedded as they are, not re-encoded."""
    return b'{"events":[' + b",".join(e.data for e in events) + \
        b'],"next_after":' + str(int(next_after)).encode() + b"}"
