"""The event serializer and the delivery protocol, in-process (no services)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from app.api.sse import KEEP_ALIVE_FRAME, frame
from app.delivery import protocol as delivery
from app.domain.event_wire import WireEvent, encode_event, encode_page, format_timestamp, wire_event
from app.services.inbox_stream import KEEP_ALIVE

SHANGHAI = timezone(timedelta(hours=8))


def row(**over: Any) -> dict[str, Any]:
    return {"seq": 7, "event_id": "ev-1", "type": "task.message", "task_id": "t-1",
            "context_id": "c-1", "from_agent_id": "a@x",
            "created_at": datetime(2026, 12, 1, 8, 0, 0, 123456, tzinfo=UTC),
            "payload": {"message": {"parts": [{"kind": "text", "text": "héllo\nwörld"}]}}} | over


def test_fields_in_design_order_compact_and_utf8() -> None:
    data = encode_event(row())
    assert data == (
        '{"seq":7,"event_id":"ev-1","type":"task.message","task_id":"t-1","context_id":"c-1",'
        '"from_agent_id":"a@x","created_at":"2026-12-01T08:00:00.123456+00:00",'
        '"payload":{"message":{"parts":[{"kind":"text","text":"héllo\\nwörld"}]}}}'
    ).encode()
    assert b"\n" not in data and b"\r" not in data  # one SSE data line


def test_the_instant_not_the_session_zone_decides_the_bytes() -> None:
    utc = row()
    shanghai = row(created_at=utc["created_at"].astimezone(SHANGHAI))
    assert encode_event(shanghai) == encode_event(utc)


def test_timestamps_have_a_fixed_width() -> None:
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == \
        "2026-01-02T03:04:05.000000+00:00"
    with pytest.raises(TypeError):
        format_timestamp(datetime(2026, 1, 2))  # naive: which instant would it be?
    with pytest.raises(TypeError):
        encode_event(row(created_at="2026-01-02T03:04:05+00:00"))


def test_payload_as_jsonb_text_encodes_the_same() -> None:
    # A connection without the pool's jsonb codec hands the payload over as text.
    r = row()
    assert encode_event(r | {"payload": json.dumps(r["payload"])}) == encode_event(r)


def test_wire_event_and_page_embed_the_bytes_verbatim() -> None:
    a, b = wire_event(row()), wire_event(row(seq=8, type="task.status"))
    assert (a.seq, a.type) == (7, "task.message")
    body = encode_page([a, b], 8)
    assert body == b'{"events":[' + a.data + b"," + b.data + b'],"next_after":8}'
    assert json.loads(body) == {"events": [json.loads(a.data), json.loads(b.data)],
                                "next_after": 8}
    assert encode_page([], 3) == b'{"events":[],"next_after":3}'


def test_sse_frame_carries_the_stored_bytes() -> None:
    ev = WireEvent(12, "task.created", b'{"seq":12}')
    assert frame(ev) == b'id: 12\r\nevent: task.created\r\ndata: {"seq":12}\r\n\r\n'
    assert frame(KEEP_ALIVE) == KEEP_ALIVE_FRAME == b": keep-alive\r\n\r\n"


def test_delivery_protocol_round_trips() -> None:
    assert delivery.inbox_stream_key("coder@bob") == "inbox:coder@bob"
    assert delivery.entry_seq(delivery.entry_id(42).encode()) == 42
    notice = delivery.parse_notice(delivery.event_notice("coder@bob", 5).encode())
    assert notice == delivery.Notice("coder@bob", "event", seq=5)
    assert delivery.parse_notice(delivery.auth_notice("coder@bob")) == \
        delivery.Notice("coder@bob", "auth")


def test_an_event_notice_carries_small_events_and_announces_large_ones() -> None:
    events = [WireEvent(6, "task.message", b'{"seq":6}'),
              WireEvent(7, "task.status", b'{"seq":7,\n"s":1}')]  # a newline inside
    data = delivery.event_notice_carrying("coder@bob", events)
    notice = delivery.parse_notice(data)
    assert (notice.agent_id, notice.kind, notice.seq) == ("coder@bob", "event", 7)
    assert data.startswith(delivery.event_notice("coder@bob", 7).encode() + b"\n")
    assert delivery.carried_events(notice.carried) == events

    big = [WireEvent(8, "task.message", b"x" * (delivery.CARRY_MAX_BYTES + 1))]
    plain = delivery.parse_notice(delivery.event_notice_carrying("coder@bob", big))
    assert plain == delivery.Notice("coder@bob", "event", seq=8)  # announced, not carried

    for broken in (b"6 task.message 99\n{}", b"6 task.message\n{}", b"x y z\n{}"):
        assert delivery.carried_events(broken) is None  # read as a plain notice
