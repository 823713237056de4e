"""The inbox read path from Postgres (after, limit, next_after, the acked cursor,
long-poll) and the monotone ack."""

from __future__ import annotations

import asyncio

import pytest

from tests.api_helpers import ok, problem, until


async def _filled(mesh, n: int):
    """a sends b ``n`` tasks. b's inbox holds exactly those (a, not b, asked for the
    friendship, so b's friend.request event is acked away first)."""
    a, b = await mesh.pair()
    [request] = (await b.inbox())["events"]
    assert request["type"] == "friend.request" and request["seq"] == 1
    ok(await b.post("/v1/mesh/inbox/ack", {"seq": 1}))
    tasks = [await a.send(b.agent_id, f"m{i}") for i in range(n)]
    return a, b, tasks


async def test_after_limit_and_next_after(mesh):
    a, b, tasks = await _filled(mesh, 5)
    page = await b.inbox(after=1, limit=2)
    assert [e["seq"] for e in page["events"]] == [2, 3]
    assert page["next_after"] == 3
    page = await b.inbox(after=page["next_after"], limit=2)
    assert [e["seq"] for e in page["events"]] == [4, 5]
    page = await b.inbox(after=page["next_after"], limit=10)
    assert [e["seq"] for e in page["events"]] == [6]
    assert [e["task_id"] for e in (await b.inbox(after=1))["events"]] == \
        [t["task_id"] for t in tasks]
    # Past the end: empty, and next_after stays where it was asked.
    end = await b.inbox(after=page["next_after"])
    assert end == {"events": [], "next_after": 6}
    beyond = await b.inbox(after=99)
    assert beyond == {"events": [], "next_after": 99}


async def test_default_cursor_is_the_acked_one(mesh):
    a, b, _ = await _filled(mesh, 4)
    resp = await b.get("/v1/mesh/inbox")
    assert [e["seq"] for e in ok(resp)["events"]] == [2, 3, 4, 5]
    assert ok(await b.post("/v1/mesh/inbox/ack", {"seq": 3})) == {"acked_seq": 3, "inbox_seq": 5}
    assert [e["seq"] for e in ok(await b.get("/v1/mesh/inbox"))["events"]] == [4, 5]
    assert [e["seq"] for e in ok(await b.get("/v1/mesh/inbox", params={"limit": 1}))["events"]] \
        == [4]
    # An explicit after still reads older events again (a reader may re-fetch).
    assert [e["seq"] for e in (await b.inbox(after=0))["events"]] == [1, 2, 3, 4, 5]


async def test_ack_is_monotone_and_clamped(mesh):
    a, b, _ = await _filled(mesh, 3)
    assert ok(await b.post("/v1/mesh/inbox/ack", {"seq": 3}))["acked_seq"] == 3
    # Lower or equal: does not move back.
    assert ok(await b.post("/v1/mesh/inbox/ack", {"seq": 2}))["acked_seq"] == 3
    assert ok(await b.post("/v1/mesh/inbox/ack", {"seq": 0}))["acked_seq"] == 3
    # Beyond what exists: clamped to inbox_seq, so future events are not pre-acked.
    assert ok(await b.post("/v1/mesh/inbox/ack", {"seq": 1000})) == {"acked_seq": 4,
                                                                     "inbox_seq": 4}
    await a.send(b.agent_id, "new")
    assert [e["seq"] for e in ok(await b.get("/v1/mesh/inbox"))["events"]] == [5]
    me = ok(await b.get("/v1/mesh/me"))
    assert (me["acked_seq"], me["inbox_seq"]) == (4, 5)
    # Acks are per agent: a's cursor did not move.
    assert ok(await a.get("/v1/mesh/me"))["acked_seq"] == 0


@pytest.mark.parametrize(("body", "field"), [
    ({"seq": -1}, "seq"), ({"seq": "three"}, "seq"), ({"seq": "3"}, "seq"), ({"seq": True}, "seq"),
    ({"seq": 1.5}, "seq"), ({"seq": None}, "seq"),
    ({}, "seq"), ({"seq": 1, "extra": 1}, "extra"),
])
async def test_ack_validation(mesh, body, field):
    a, _ = await mesh.pair()
    data = problem(await a.post("/v1/mesh/inbox/ack", body), 422, field)
    assert field in {e["field"] for e in data["errors"]}


@pytest.mark.parametrize(("params", "name"), [
    ({"after": -1}, "after"), ({"after": "x"}, "after"), ({"limit": 0}, "limit"),
    ({"limit": 501}, "limit"), ({"wait": 31}, "wait"), ({"wait": "soon"}, "wait"),
    ({"wait": -1}, "wait"),
])
async def test_read_query_validation(mesh, params, name):
    a, _ = await mesh.pair()
    problem(await a.get("/v1/mesh/inbox", params=params), 422, name)


async def test_inbox_is_private(mesh):
    a, b, _ = await _filled(mesh, 2)
    # a reads its own inbox: b's task.created events are not there.
    assert all(e["type"] != "task.created" for e in (await a.inbox())["events"])
    problem(await b.http.get("/v1/mesh/inbox"), 401)


async def test_long_poll_returns_an_event_sent_while_waiting(mesh):
    a, b = await mesh.pair()
    start = (await b.inbox())["next_after"]

    async def send_when_waiting() -> dict:
        # Let the long-poll go out first. Whether the send commits before or after
        # the poll registers its waiter, the poll must answer with the event (the
        # re-check after registering covers the first case) and never with [].
        await asyncio.sleep(0)
        return await a.send(b.agent_id, "while you wait")

    page, task = await asyncio.gather(b.inbox(after=start, wait=20), send_when_waiting())
    assert [e["task_id"] for e in page["events"]] == [task["task_id"]]


async def test_long_poll_with_nothing_new_returns_empty(mesh):
    a, b = await mesh.pair()
    start = (await b.inbox())["next_after"]
    assert await b.inbox(after=start, wait=0.3) == {"events": [], "next_after": start}


async def test_reading_marks_delivered_once(mesh, db):
    a, b, _ = await _filled(mesh, 2)
    async def rows() -> list:
        return await db.fetch("SELECT seq, delivered_at FROM inbox_events WHERE agent_id = $1 "
                              "AND seq > 1 ORDER BY seq", b.agent_id)

    await b.inbox(after=1, limit=1)
    # Marked by the web process's batcher shortly after the hand-over (ADR 021).
    first = (await until(lambda: _marked(rows, 0)))[0]["delivered_at"]
    assert (await rows())[1]["delivered_at"] is None  # not handed over, so never queued
    await b.inbox(after=1)
    marked = await until(lambda: _marked(rows, 1))
    assert marked[0]["delivered_at"] == first


async def _marked(rows, i: int) -> list | None:
    got = await rows()
    return got if got[i]["delivered_at"] is not None else None
