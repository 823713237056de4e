"""Tasks: create, read, list, messages, artifacts, receipts and the FULL
documented transition matrix (every (from, to) pair, for both sides)."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.api_helpers import (
    ALLOWED,
    STATES,
    TERMINAL,
    factory,
    inbox_seq,
    move,
    ok,
    problem,
    task_in_state,
    text_message,
    until,
)
from tests.support.meshapi import AgentHandle


@pytest.fixture(scope="module")
async def duo(gateway: str) -> AsyncIterator[tuple[AgentHandle, AgentHandle]]:
    """(initiator, serving): two befriended agents of two owners, for the matrix."""
    async with factory(gateway) as f:
        yield await f.pair()


# --- the transition matrix -----------------------------------------------------------

MATRIX = [(src, dst, side) for src in STATES for dst in STATES
          for side in ("initiator", "serving")]


REPLAY = "replay"  # 200 with the task as it is, and nothing written


def _expected(src: str, dst: str, side: str) -> int | str:
    # task_in_state reaches every state but 'submitted' by the serving agent's own
    # moves, so the serving side asking for the state again repeats its last move.
    if src == dst and side == "serving" and src != "submitted":
        return REPLAY
    if dst not in ALLOWED[src]:
        return 409
    if side == "initiator" and dst != "canceled":
        return 403
    return 200


@pytest.mark.parametrize(("src", "dst", "side"), MATRIX,
                         ids=[f"{s}->{d}-by-{w}" for s, d, w in MATRIX])
async def test_transition_matrix(duo, src, dst, side):
    initiator, serving = duo
    task_id = await task_in_state(initiator, serving, src)
    actor, other = (initiator, serving) if side == "initiator" else (serving, initiator)
    before_actor, before_other = await inbox_seq(actor), await inbox_seq(other)

    resp = await move(actor, task_id, dst)
    expected = _expected(src, dst, side)

    if expected == 200:
        body = ok(resp)
        assert body["state"] == dst and body["task_id"] == task_id
        [event] = (await other.inbox(after=before_other))["events"]
        assert event["type"] == "task.status" and event["task_id"] == task_id
        assert event["from_agent_id"] == actor.agent_id
        assert event["payload"]["state"] == dst and event["payload"]["previous_state"] == src
        assert event["payload"]["task"]["state"] == dst
    elif expected == REPLAY:
        body = ok(resp)
        assert body["state"] == dst and body["task_id"] == task_id
    elif expected == 409:
        body = problem(resp, 409, src, dst)
        assert body["current_state"] == src
        if src in TERMINAL:
            assert "terminal" in body["detail"]
    else:
        problem(resp, 403, "only the serving agent", dst)

    after = ok(await initiator.get(f"/v1/mesh/tasks/{task_id}"))
    assert after["state"] == (dst if expected == 200 else src)
    # The actor never gets an event for its own move; a refused move tells nobody.
    assert await inbox_seq(actor) == before_actor
    assert await inbox_seq(other) == before_other + (1 if expected == 200 else 0)


def test_matrix_covers_every_pair_and_both_outcomes():
    """A guard on the table above: 8×8×2 cases with all four answers present."""
    assert len(MATRIX) == 128
    outcomes = [_expected(*case) for case in MATRIX]
    assert outcomes.count(200) == 13 + 4  # 13 serving moves + 4 initiator cancels
    assert outcomes.count(403) == 9
    assert outcomes.count(REPLAY) == 7  # the serving side repeating its own last move
    assert outcomes.count(409) == 128 - 17 - 9 - 7


async def test_transition_with_message(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "need a password")
    ok(await move(b, task["task_id"], "working"))
    seq = await inbox_seq(a)
    body = ok(await move(b, task["task_id"], "input-required",
                         message=text_message("which branch?", message_id=f"m-q-{uuid.uuid4().hex}")))
    assert body["state"] == "input-required"
    assert body["status_message"]["parts"] == [{"kind": "text", "text": "which branch?"}]
    [event] = (await a.inbox(after=seq))["events"]
    assert event["type"] == "task.status"
    assert event["payload"]["message"]["parts"][0]["text"] == "which branch?"
    assert event["payload"]["message"]["role"] == "agent"
    full = ok(await a.get(f"/v1/mesh/tasks/{task['task_id']}"))
    assert [m["parts"][0]["text"] for m in full["messages"]] == ["need a password",
                                                                 "which branch?"]
    assert full["messages"][1]["seq"] == event["seq"]
    # The initiator answers and the serving agent resumes.
    await a.reply(task["task_id"], "main")
    ok(await move(b, task["task_id"], "working"))
    ok(await move(b, task["task_id"], "completed"))


async def test_status_validation(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "x")
    problem(await move(b, task["task_id"], "done"), 422, "state")
    problem(await b.post(f"/v1/mesh/tasks/{task['task_id']}/status", {}), 422, "state")
    problem(await move(b, "no-such-task", "working"), 404, "no-such-task")


# --- create / read / list ------------------------------------------------------------------

ID_FORMAT = {
    "task_id": r"^t-{agent}-\d{13}-[0-9a-z]{6}$",
    "message_id": r"^m-{agent}-\d{13}-[0-9a-z]{8}$",
}


async def test_create_task_and_the_recipients_event(mesh, db):
    a, b = await mesh.pair()
    task = ok(await a.post("/v1/mesh/tasks", {
        "to_agent_id": b.agent_id,
        "message": {"parts": [{"kind": "text", "text": "review PR 7"},
                              {"kind": "data", "data": {"pr": 7}},
                              {"kind": "file", "file": {"name": "a.txt", "mime_type": "text/plain",
                                                        "bytes": "aGVsbG8="}}],
                    "metadata": {"priority": "high"}}}), 201)
    assert task["state"] == "submitted"
    assert (task["initiator"], task["serving_agent"]) == (a.agent_id, b.agent_id)
    agent = re.escape(a.agent_id)
    assert re.match(ID_FORMAT["task_id"].replace("{agent}", agent), task["task_id"])
    assert re.match(ID_FORMAT["message_id"].replace("{agent}", agent),
                    task["message"]["message_id"])
    assert task["context_id"] and task["created_at"] and task["updated_at"]
    assert task["message"]["role"] == "user"

    events = (await b.inbox())["events"]
    ev = events[-1]
    assert set(ev) == {"seq", "event_id", "type", "task_id", "context_id", "from_agent_id",
                       "created_at", "payload"}
    assert ev["type"] == "task.created" and ev["task_id"] == task["task_id"]
    assert ev["context_id"] == task["context_id"] and ev["from_agent_id"] == a.agent_id
    assert ev["payload"]["message"]["parts"][1] == {"kind": "data", "data": {"pr": 7}}
    assert ev["payload"]["message"]["metadata"] == {"priority": "high"}
    assert ev["payload"]["task"]["state"] == "submitted"
    # One outbox row, keyed by the recipient, carrying the same event.
    rows = await db.fetch("SELECT key, payload FROM outbox_events "
                          "WHERE payload->>'task_id' = $1", task["task_id"])
    assert [r["key"] for r in rows] == [b.agent_id]
    assert rows[0]["payload"]["seq"] == ev["seq"] and rows[0]["payload"]["event_id"] == \
        ev["event_id"]


async def test_explicit_ids_are_kept(mesh):
    a, b = await mesh.pair()
    tid, cid, mid = (f"{p}-{uuid.uuid4().hex}" for p in ("task", "ctx", "msg"))
    task = ok(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id, "task_id": tid,
                                              "context_id": cid,
                                              "message": text_message("x", message_id=mid)}), 201)
    assert (task["task_id"], task["context_id"], task["message"]["message_id"]) == (tid, cid, mid)
    # The same task_id with another message → 409 (the id is taken).
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id, "task_id": tid,
                                            "message": text_message("other")}), 409, tid)


async def test_get_task_with_messages_artifacts_and_receipts(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "first")
    tid = task["task_id"]
    got = ok(await a.get(f"/v1/mesh/tasks/{tid}"))
    [m] = got["messages"]
    assert m["receipt"]["status"] == "queued" and m["receipt"]["delivered_at"] is None

    read = await b.inbox()  # the recipient's daemon fetched it: delivered (batched, ADR 021)

    async def delivered() -> dict | None:
        got = ok(await a.get(f"/v1/mesh/tasks/{tid}"))
        return got if got["messages"][0]["receipt"]["status"] == "delivered" else None

    got = await until(delivered)
    assert got["messages"][0]["receipt"]["delivered_at"]

    ok(await b.post("/v1/mesh/inbox/ack", {"seq": read["next_after"]}))  # processed: acked
    got = ok(await b.get(f"/v1/mesh/tasks/{tid}"))
    assert got["messages"][0]["receipt"]["status"] == "acked"
    assert got["artifacts"] == []


async def test_list_tasks_filters_and_pages(mesh):
    a, b = await mesh.pair()
    ctx = f"ctx-{uuid.uuid4().hex}"
    created = [await a.send(b.agent_id, f"t{i}", context_id=ctx) for i in range(3)]
    other = await b.send(a.agent_id, "the other way")
    ok(await move(a, other["task_id"], "working"))

    page1 = ok(await a.get("/v1/mesh/tasks", params={"limit": 2}))
    assert [t["task_id"] for t in page1["tasks"]] == [other["task_id"], created[2]["task_id"]]
    page2 = ok(await a.get("/v1/mesh/tasks", params={"limit": 2,
                                                     "cursor": page1["next_cursor"]}))
    assert [t["task_id"] for t in page2["tasks"]] == [created[1]["task_id"],
                                                      created[0]["task_id"]]
    assert page2["next_cursor"] is None

    by_ctx = ok(await b.get("/v1/mesh/tasks", params={"context_id": ctx}))["tasks"]
    assert {t["task_id"] for t in by_ctx} == {t["task_id"] for t in created}
    working = ok(await a.get("/v1/mesh/tasks", params={"state": "working"}))["tasks"]
    assert [t["task_id"] for t in working] == [other["task_id"]]
    # A third agent sees none of them.
    c = await (await mesh.owner()).agent("c")
    assert ok(await c.get("/v1/mesh/tasks"))["tasks"] == []

    problem(await a.get("/v1/mesh/tasks", params={"state": "bogus"}), 422, "bogus")
    problem(await a.get("/v1/mesh/tasks", params={"limit": 0}), 422, "limit")
    problem(await a.get("/v1/mesh/tasks", params={"limit": "many"}), 422, "limit")
    problem(await a.get("/v1/mesh/tasks", params={"cursor": "garbage"}), 400, "cursor")
    problem(await a.get("/v1/mesh/tasks", params={"context_id": "a b"}), 422, "context_id")


# --- permissions -------------------------------------------------------------------------

async def test_non_friend_cannot_create_a_task(mesh, db):
    a = await (await mesh.owner()).agent("a")
    b = await (await mesh.owner()).agent("b")
    resp = await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                           "message": text_message("hi")})
    problem(resp, 403, "friend request")
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": "ghost@nobody",
                                            "message": text_message("hi")}), 404, "ghost@nobody")
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": a.agent_id,
                                            "message": text_message("hi")}), 400, "itself")
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1", a.agent_id) == 0
    assert await db.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1",
                             b.agent_id) == 0


async def test_non_participant_gets_404_everywhere(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "secret")
    tid = task["task_id"]
    # Even a friend of both, and the owners' virtual users, are outsiders to this task.
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(c, a)
    await mesh.befriend(c, b)
    for outsider in (c,):
        problem(await outsider.get(f"/v1/mesh/tasks/{tid}"), 404, tid)
        problem(await outsider.post(f"/v1/mesh/tasks/{tid}/messages", text_message("x")), 404)
        problem(await move(outsider, tid, "canceled"), 404)
        problem(await outsider.post(f"/v1/mesh/tasks/{tid}/artifacts",
                                    {"parts": [{"kind": "text", "text": "x"}]}), 404)
    # An unknown task looks exactly the same.
    problem(await c.get("/v1/mesh/tasks/t-does-not-exist"), 404, "t-does-not-exist")
    assert ok(await a.get(f"/v1/mesh/tasks/{tid}"))["state"] == "submitted"


# --- messages ----------------------------------------------------------------------------

async def test_messages_both_ways(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "q")
    tid = task["task_id"]
    before = ok(await a.get(f"/v1/mesh/tasks/{tid}"))["updated_at"]
    seq_a, seq_b = await inbox_seq(a), await inbox_seq(b)

    reply = await b.reply(tid, "answer")
    assert reply["role"] == "agent" and reply["sender"] == b.agent_id
    assert reply["recipient"] == a.agent_id and reply["task_id"] == tid
    [ev] = (await a.inbox(after=seq_a))["events"]
    assert ev["type"] == "task.message" and ev["payload"]["message"]["message_id"] == \
        reply["message_id"]
    follow = await a.reply(tid, "thanks")
    assert follow["role"] == "user"
    assert [e["type"] for e in (await b.inbox(after=seq_b))["events"]] == ["task.message"]

    got = ok(await a.get(f"/v1/mesh/tasks/{tid}"))
    assert [m["parts"][0]["text"] for m in got["messages"]] == ["q", "answer", "thanks"]
    assert got["updated_at"] > before  # every action refreshes updated_at


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
async def test_terminal_tasks_take_no_messages_or_artifacts(duo, terminal, db):
    initiator, serving = duo
    tid = await task_in_state(initiator, serving, terminal)
    count = await db.fetchval("SELECT count(*) FROM task_messages WHERE task_id = $1", tid)
    for who in (initiator, serving):
        problem(await who.post(f"/v1/mesh/tasks/{tid}/messages", text_message("late")), 409,
                "terminal")
    problem(await serving.post(f"/v1/mesh/tasks/{tid}/artifacts",
                               {"parts": [{"kind": "text", "text": "late"}]}), 409, "terminal")
    assert await db.fetchval("SELECT count(*) FROM task_messages WHERE task_id = $1",
                             tid) == count
    assert await db.fetchval("SELECT count(*) FROM task_artifacts WHERE task_id = $1", tid) == 0


# --- artifacts --------------------------------------------------------------------------

async def test_artifacts(mesh, db):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "build it")
    tid = task["task_id"]
    ok(await move(b, tid, "working"))
    seq = await inbox_seq(a)
    art = {"artifact_id": "report-1", "name": "report", "description": "the result",
           "parts": [{"kind": "file", "file": {"name": "r.md", "uri": "https://example.com/r.md"}}],
           "metadata": {"v": 1}}
    created = ok(await b.post(f"/v1/mesh/tasks/{tid}/artifacts", art), 201)
    assert created["artifact_id"] == "report-1" and created["created_by"] == b.agent_id
    [ev] = (await a.inbox(after=seq))["events"]
    assert ev["type"] == "task.artifact" and ev["payload"]["artifact"]["name"] == "report"

    # Same id, same content → 200 with the stored artifact, no new event.
    again = ok(await b.post(f"/v1/mesh/tasks/{tid}/artifacts", art), 200)
    assert again == created
    assert (await a.inbox(after=seq))["events"] == [ev]
    # Same id, other content → 409.
    problem(await b.post(f"/v1/mesh/tasks/{tid}/artifacts", {**art, "name": "other"}), 409,
            "report-1")
    # The initiator may not add artifacts.
    problem(await a.post(f"/v1/mesh/tasks/{tid}/artifacts",
                         {"parts": [{"kind": "text", "text": "mine"}]}), 403, "serving agent")
    # Without an id, one is generated.
    auto = ok(await b.post(f"/v1/mesh/tasks/{tid}/artifacts",
                           {"parts": [{"kind": "data", "data": {"ok": True}}]}), 201)
    assert auto["artifact_id"].startswith("a-")
    got = ok(await a.get(f"/v1/mesh/tasks/{tid}"))
    assert [x["artifact_id"] for x in got["artifacts"]] == ["report-1", auto["artifact_id"]]
    assert await db.fetchval("SELECT count(*) FROM task_artifacts WHERE task_id = $1", tid) == 2


# --- a participant deleted ------------------------------------------------------------

async def test_task_whose_other_participant_was_deleted(mesh, db):
    """Messages to a deleted agent are refused with 404 (nobody would ever read
    them), not a 500; the remaining side can still close the task."""
    alice, bob = await mesh.owner(), await mesh.owner()
    a, b = await alice.agent("a"), await bob.agent("b")
    await mesh.befriend(a, b)
    t1 = await a.send(b.agent_id, "one")
    t2 = await a.send(b.agent_id, "two")
    ok(await move(b, t2["task_id"], "working"))
    assert (await bob.delete(f"/v1/agents/{b.agent_id}")).status_code == 204

    problem(await a.post(f"/v1/mesh/tasks/{t1['task_id']}/messages", text_message("hello?")),
            404, b.agent_id, "no longer exists")
    assert await db.fetchval("SELECT count(*) FROM task_messages WHERE task_id = $1",
                             t1["task_id"]) == 1
    problem(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                            "message": text_message("x")}), 404, b.agent_id)
    seq = await inbox_seq(a)
    assert ok(await move(a, t1["task_id"], "canceled"))["state"] == "canceled"
    assert ok(await move(a, t2["task_id"], "canceled",
                         message=text_message("closing, b is gone")))["state"] == "canceled"
    assert await inbox_seq(a) == seq
    got = ok(await a.get(f"/v1/mesh/tasks/{t2['task_id']}"))
    assert got["messages"][-1]["receipt"]["status"] == "queued"


async def test_list_cursor_is_url_safe(mesh):
    """next_cursor is pasted into URLs by hand (curl): it must need no escaping."""
    a, b = await mesh.pair()
    for i in range(3):
        await a.send(b.agent_id, f"t{i}")
    page = ok(await a.get("/v1/mesh/tasks", params={"limit": 1}))
    cursor = page["next_cursor"]
    assert re.fullmatch(r"[A-Za-z0-9_.~-]+", cursor), cursor
    # Used verbatim in a raw query string, as a shell user would.
    nxt = ok(await a.http.get(f"/v1/mesh/tasks?limit=1&cursor={cursor}", headers=a.headers))
    assert nxt["tasks"][0]["task_id"] != page["tasks"][0]["task_id"]
