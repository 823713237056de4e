"""Concurrency and atomicity of the transactional write (§3):
seq gap-free under concurrent writers, compare-and-set transitions under a race,
idempotent retries (also concurrent ones), and a failure injected mid-write —
a real Postgres error, raised by a trigger — leaving nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg

from tests.api_helpers import (
    inbox_rows,
    inbox_seq,
    message_rows,
    move,
    ok,
    outbox_rows,
    problem,
    task_in_state,
    text_message,
)

SENDERS = 20
PER_SENDER = 50


# --- seq: gap-free under concurrent writers ------------------------------------------

async def test_seq_gap_free_under_concurrent_writers(mesh, db):
    """20 agents send 50 tasks each, all at once, to one recipient: its inbox
    holds seqs exactly 1..1000, one outbox row each, and every sender's tasks in
    the order it sent them."""
    owner = await mesh.owner()
    # The recipient is the owner's virtual-user agent: implicitly a friend of the
    # owner's agents, so its inbox holds nothing but the tasks below.
    senders = await asyncio.gather(*(owner.agent(f"s{i}") for i in range(SENDERS)))
    recipient = owner.human
    assert await inbox_seq(owner) == 0

    async def burst(sender) -> list[str]:
        sent = []
        for n in range(PER_SENDER):
            task = await sender.send(recipient, f"{sender.agent_id} #{n}")
            sent.append(task["task_id"])
        return sent

    sent = await asyncio.gather(*(burst(s) for s in senders))
    total = SENDERS * PER_SENDER

    seqs = [r["seq"] for r in await db.fetch(
        "SELECT seq FROM inbox_events WHERE agent_id = $1 ORDER BY seq", recipient)]
    assert seqs == list(range(1, total + 1))
    assert await outbox_rows(db, recipient) == total
    outbox_seqs = sorted(r["s"] for r in await db.fetch(
        "SELECT (payload->>'seq')::bigint AS s FROM outbox_events WHERE key = $1", recipient))
    assert outbox_seqs == seqs
    me = ok(await owner.get("/v1/mesh/me"))
    assert me["inbox_seq"] == total

    # Read it back through the API, page by page.
    events, after = [], 0
    while True:
        page = ok(await owner.get("/v1/mesh/inbox", params={"after": after, "limit": 500}))
        if not page["events"]:
            break
        events += page["events"]
        after = page["next_after"]
    assert [e["seq"] for e in events] == seqs
    order = [e["task_id"] for e in events]
    assert sorted(order) == sorted(t for batch in sent for t in batch)
    for batch in sent:  # each sender's tasks keep the order it sent them in
        positions = [order.index(t) for t in batch]
        assert positions == sorted(positions)


async def test_two_way_traffic_does_not_deadlock_or_gap(mesh, db):
    a, b = await mesh.pair()
    base_a, base_b = await inbox_seq(a), await inbox_seq(b)
    n = 40
    await asyncio.gather(*(a.send(b.agent_id, f"a{i}") for i in range(n)),
                         *(b.send(a.agent_id, f"b{i}") for i in range(n)))
    for agent, base in ((a, base_a), (b, base_b)):
        seqs = [r["seq"] for r in await db.fetch(
            "SELECT seq FROM inbox_events WHERE agent_id = $1 AND seq > $2 ORDER BY seq",
            agent.agent_id, base)]
        assert seqs == list(range(base + 1, base + n + 1))


# --- compare-and-set under a race ---------------------------------------------------------

async def _wait_for_lock_waiters(db: asyncpg.Pool, query_prefix: str, n: int,
                                 timeout: float = 60.0) -> None:
    """Poll until ``n`` backends are blocked on a lock running ``query_prefix``."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE $1", query_prefix + "%")
        if waiting >= n:
            return
        assert time.monotonic() < deadline, f"only {waiting} of {n} requests reached the lock"
        await asyncio.sleep(0.01)


async def test_cas_race_exactly_one_transition_wins(mesh, db):
    """Two different transitions from 'working' (the serving agent completes, the
    initiator cancels) both pass the legality check and reach the UPDATE; a row
    lock held by the test makes them queue there, so the compare-and-set itself
    decides: exactly one 200, the other 409, one event."""
    a, b = await mesh.pair()
    tid = await task_in_state(a, b, "working")
    base_a, base_b = await inbox_seq(a), await inbox_seq(b)

    async with db.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        try:
            await holder.execute("SELECT 1 FROM tasks WHERE task_id = $1 FOR UPDATE", tid)
            complete = asyncio.create_task(move(b, tid, "completed"))
            cancel = asyncio.create_task(move(a, tid, "canceled"))
            await _wait_for_lock_waiters(db, "UPDATE tasks SET state", 2)
        finally:
            await tx.rollback()
        results = {"completed": await complete, "canceled": await cancel}

    codes = sorted(r.status_code for r in results.values())
    assert codes == [200, 409], {k: (r.status_code, r.text) for k, r in results.items()}
    [winner] = [state for state, r in results.items() if r.status_code == 200]
    [loser] = [r for r in results.values() if r.status_code == 409]
    body = problem(loser, 409, "concurrently")
    assert body["current_state"] == winner
    assert ok(await a.get(f"/v1/mesh/tasks/{tid}"))["state"] == winner
    new_events = (await a.inbox(after=base_a))["events"] + (await b.inbox(after=base_b))["events"]
    assert [(e["type"], e["payload"]["state"]) for e in new_events] == [("task.status", winner)]


async def test_concurrent_transitions_without_orchestration(mesh):
    """The same race, left to the scheduler, many times: never two winners. (All
    three moves end the task, so even one after another only the first is legal;
    with submitted→working vs canceled, both could rightly succeed in turn.)"""
    a, b = await mesh.pair()
    for _ in range(8):
        tid = await task_in_state(a, b, "working")
        r1, r2, r3 = await asyncio.gather(move(b, tid, "completed"), move(b, tid, "failed"),
                                          move(a, tid, "canceled"))
        assert sorted(r.status_code for r in (r1, r2, r3)).count(200) == 1
        for r in (r1, r2, r3):
            assert r.status_code in (200, 409), r.text
        final = ok(await a.get(f"/v1/mesh/tasks/{tid}"))["state"]
        [winner] = [r for r in (r1, r2, r3) if r.status_code == 200]
        assert winner.json()["state"] == final


# --- idempotent retries --------------------------------------------------------------------

async def test_create_retry_same_id_same_content_is_200_without_new_rows(mesh, db):
    a, b = await mesh.pair()
    mid = f"m-retry-{uuid.uuid4().hex}"
    body = {"to_agent_id": b.agent_id, "message": text_message("once", message_id=mid,
                                                                metadata={"k": 1})}
    first = await a.post("/v1/mesh/tasks", body)
    created = ok(first, 201)
    tid = created["task_id"]
    for _ in range(3):
        again = ok(await a.post("/v1/mesh/tasks", body), 200)
        assert again == created
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1", a.agent_id) == 1
    assert await message_rows(db, tid) == 1
    assert await inbox_rows(db, b.agent_id, tid) == 1
    assert await outbox_rows(db, b.agent_id, tid) == 1

    # Same id, other content → 409 and still nothing new.
    other = {**body, "message": text_message("different", message_id=mid, metadata={"k": 1})}
    problem(await a.post("/v1/mesh/tasks", other), 409, mid, "different content")
    meta = {**body, "message": text_message("once", message_id=mid, metadata={"k": 2})}
    problem(await a.post("/v1/mesh/tasks", meta), 409, mid)
    assert await inbox_rows(db, b.agent_id, tid) == 1
    assert await outbox_rows(db, b.agent_id, tid) == 1


async def test_create_retry_with_explicit_task_id(mesh, db):
    a, b = await mesh.pair()
    tid, mid = f"t-x-{uuid.uuid4().hex}", f"m-x-{uuid.uuid4().hex}"
    body = {"to_agent_id": b.agent_id, "task_id": tid, "message": text_message("x", message_id=mid)}
    created = ok(await a.post("/v1/mesh/tasks", body), 201)
    assert ok(await a.post("/v1/mesh/tasks", body), 200) == created
    assert await inbox_rows(db, b.agent_id, tid) == 1
    assert await outbox_rows(db, b.agent_id, tid) == 1


async def test_message_id_of_another_sender_is_its_own_not_a_replay(mesh, db):
    """A retry is only a retry from the same sender: another agent presenting the
    same message_id and content must not be handed the stored record."""
    a, b = await mesh.pair()
    c = await (await mesh.owner()).agent("c")
    await mesh.befriend(c, b)
    mid = f"m-mine-{uuid.uuid4().hex}"
    body = {"to_agent_id": b.agent_id, "message": text_message("same", message_id=mid)}
    mine = ok(await a.post("/v1/mesh/tasks", body), 201)
    # Message ids are scoped to their sender (ADR 019): c's message is its own,
    # a new task, and nothing about a's is revealed or handed over.
    theirs = ok(await c.post("/v1/mesh/tasks", body), 201)
    assert theirs["task_id"] != mine["task_id"] and a.agent_id not in str(theirs)
    assert ok(await c.post("/v1/mesh/tasks", body), 200) == theirs


async def test_concurrent_identical_creates_make_one_task(mesh, db):
    a, b = await mesh.pair()
    mid = f"m-race-{uuid.uuid4().hex}"
    body = {"to_agent_id": b.agent_id, "message": text_message("race", message_id=mid)}
    results = await asyncio.gather(*(a.post("/v1/mesh/tasks", body) for _ in range(6)))
    codes = sorted(r.status_code for r in results)
    assert codes == [200] * 5 + [201], [r.text for r in results]
    assert len({r.json()["task_id"] for r in results}) == 1
    tid = results[0].json()["task_id"]
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1", a.agent_id) == 1
    assert await inbox_rows(db, b.agent_id, tid) == 1
    assert await outbox_rows(db, b.agent_id, tid) == 1


async def test_message_retry_is_200_without_new_rows(mesh, db):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "q")
    tid = task["task_id"]
    mid = f"m-reply-{uuid.uuid4().hex}"
    body = text_message("answer", message_id=mid)
    first = ok(await b.post(f"/v1/mesh/tasks/{tid}/messages", body), 201)
    inbox_before, outbox_before = await inbox_rows(db, a.agent_id, tid), \
        await outbox_rows(db, a.agent_id, tid)
    assert ok(await b.post(f"/v1/mesh/tasks/{tid}/messages", body), 200) == first
    results = await asyncio.gather(*(b.post(f"/v1/mesh/tasks/{tid}/messages", body)
                                     for _ in range(4)))
    assert [r.status_code for r in results] == [200] * 4
    assert all(r.json() == first for r in results)
    assert await message_rows(db, tid) == 2
    assert await inbox_rows(db, a.agent_id, tid) == inbox_before
    assert await outbox_rows(db, a.agent_id, tid) == outbox_before

    problem(await b.post(f"/v1/mesh/tasks/{tid}/messages", text_message("edited", message_id=mid)),
            409, mid)
    # The other participant's ids are its own (ADR 019): the same id is a new message
    # of a's, not a replay of b's.
    assert ok(await a.post(f"/v1/mesh/tasks/{tid}/messages", body), 201)["sender"] == a.agent_id
    # A retry stays a retry after the task finished (the record exists already).
    ok(await move(b, tid, "working"))
    ok(await move(b, tid, "completed"))
    assert ok(await b.post(f"/v1/mesh/tasks/{tid}/messages", body), 200) == first


async def test_concurrent_distinct_messages_on_one_task(mesh, db):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "q")
    tid = task["task_id"]
    base = await inbox_seq(a)
    results = await asyncio.gather(*(b.reply(tid, f"r{i}") for i in range(15)))
    assert len({r["message_id"] for r in results}) == 15
    seqs = [e["seq"] for e in (await a.inbox(after=base))["events"]]
    assert seqs == list(range(base + 1, base + 16))


# --- atomicity: a real failure mid-write -------------------------------------------------

@contextlib.asynccontextmanager
async def failing_outbox_for(db: asyncpg.Pool, agent_id: str) -> AsyncIterator[None]:
    """A BEFORE INSERT trigger on outbox_events that raises for rows keyed by
    ``agent_id``: the LAST insert of the transactional write fails for real."""
    name = f"mesh_test_fail_{uuid.uuid4().hex[:12]}"
    quoted = agent_id.replace("'", "''")
    await db.execute(f"""
        CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'injected outbox failure for %', NEW.key; END $$;
        CREATE TRIGGER {name} BEFORE INSERT ON outbox_events FOR EACH ROW
            WHEN (NEW.key = '{quoted}') EXECUTE FUNCTION {name}();
    """)
    try:
        yield
    finally:
        await db.execute(f"DROP TRIGGER IF EXISTS {name} ON outbox_events; "
                         f"DROP FUNCTION IF EXISTS {name}();")


async def _snapshot(db: asyncpg.Pool, agent_id: str) -> dict[str, int]:
    return {
        "inbox_seq": await db.fetchval("SELECT inbox_seq FROM agents WHERE agent_id = $1",
                                       agent_id),
        "inbox": await inbox_rows(db, agent_id),
        "outbox": await outbox_rows(db, agent_id),
    }


async def test_failed_create_leaves_nothing_and_retry_succeeds(mesh, db):
    a, b = await mesh.pair()
    tid, mid = f"t-atom-{uuid.uuid4().hex}", f"m-atom-{uuid.uuid4().hex}"
    body = {"to_agent_id": b.agent_id, "task_id": tid,
            "message": text_message("all or nothing", message_id=mid)}
    before = await _snapshot(db, b.agent_id)

    async with failing_outbox_for(db, b.agent_id):
        resp = await a.post("/v1/mesh/tasks", body)
        problem(resp, 500, "not applied", "retried")
        assert "injected" not in resp.text
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE task_id = $1", tid) == 0
    assert await db.fetchval("SELECT count(*) FROM task_messages WHERE message_id = $1", mid) == 0
    assert await _snapshot(db, b.agent_id) == before
    problem(await a.get(f"/v1/mesh/tasks/{tid}"), 404)

    # The client retries the same request: it is new (201), and the seq has no gap.
    created = ok(await a.post("/v1/mesh/tasks", body), 201)
    assert created["task_id"] == tid
    [event] = (await b.inbox(after=before["inbox_seq"]))["events"]
    assert event["seq"] == before["inbox_seq"] + 1 and event["task_id"] == tid
    assert await outbox_rows(db, b.agent_id, tid) == 1


async def test_failed_message_status_artifact_leave_nothing(mesh, db):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "q")
    tid = task["task_id"]
    ok(await move(b, tid, "working"))
    stamp = await db.fetchval("SELECT updated_at FROM tasks WHERE task_id = $1", tid)
    messages = await message_rows(db, tid)
    before_a = await _snapshot(db, a.agent_id)
    mid = f"m-atom-{uuid.uuid4().hex}"

    async with failing_outbox_for(db, a.agent_id):  # a is the recipient of each write
        problem(await b.post(f"/v1/mesh/tasks/{tid}/messages",
                             text_message("lost?", message_id=mid)), 500)
        problem(await move(b, tid, "completed",
                           message=text_message("done", message_id=f"{mid}-s")), 500)
        problem(await b.post(f"/v1/mesh/tasks/{tid}/artifacts",
                             {"artifact_id": "art-1", "parts": [{"kind": "text", "text": "r"}]}),
                500)

    assert await message_rows(db, tid) == messages
    assert await db.fetchval("SELECT count(*) FROM task_artifacts WHERE task_id = $1", tid) == 0
    row = await db.fetchrow("SELECT state, status_message, updated_at FROM tasks "
                            "WHERE task_id = $1", tid)
    assert (row["state"], row["status_message"], row["updated_at"]) == ("working", None, stamp)
    assert await _snapshot(db, a.agent_id) == before_a

    # Everything goes through once the fault is gone, with gap-free seqs.
    ok(await b.post(f"/v1/mesh/tasks/{tid}/messages", text_message("lost?", message_id=mid)), 201)
    ok(await b.post(f"/v1/mesh/tasks/{tid}/artifacts",
                    {"artifact_id": "art-1", "parts": [{"kind": "text", "text": "r"}]}), 201)
    ok(await move(b, tid, "completed", message=text_message("done", message_id=f"{mid}-s")))
    events = (await a.inbox(after=before_a["inbox_seq"]))["events"]
    assert [(e["seq"], e["type"]) for e in events] == [
        (before_a["inbox_seq"] + 1, "task.message"),
        (before_a["inbox_seq"] + 2, "task.artifact"),
        (before_a["inbox_seq"] + 3, "task.status")]


async def test_failed_friend_request_leaves_nothing(mesh, db):
    a = await (await mesh.owner()).agent("a")
    b = await (await mesh.owner()).agent("b")
    before = await _snapshot(db, b.agent_id)
    async with failing_outbox_for(db, b.agent_id):
        problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 500)
    assert await db.fetchval("SELECT count(*) FROM friendships WHERE requester = $1",
                             a.agent_id) == 0
    assert await _snapshot(db, b.agent_id) == before
    ok(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}), 201)


async def test_crossing_friend_requests_make_one_friendship(mesh):
    """a asks b while b asks a: whichever commits second accepts the first (the
    rule for a request to an agent that already asked you), never a 409."""
    alice, bob = await mesh.owner(), await mesh.owner()
    pairs = [(await alice.agent(f"a{i}"), await bob.agent(f"b{i}")) for i in range(6)]
    for a, b in pairs:
        r1, r2 = await asyncio.gather(
            a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id}),
            b.post("/v1/mesh/friends/requests", {"to_agent_id": a.agent_id}))
        assert sorted((r1.status_code, r2.status_code)) == [200, 201], (r1.text, r2.text)
        assert r1.json()["request_id"] == r2.json()["request_id"]
        friends = ok(await a.get("/v1/mesh/friends"))["friends"]
        assert b.agent_id in {f["agent_id"] for f in friends}
