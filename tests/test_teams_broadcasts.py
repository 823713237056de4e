"""Broadcasts with a wait policy: exactly one
``broadcast.completed`` per broadcast, whether the policy is met by a task's
status change, can no longer be met, or the deadline passes (cron, with ``now``
passed in instead of waiting). Each test has a database of its own, so cron's
counts are exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from app.platform.settings import Settings
from app.services.mesh import Mesh
from cron import jobs
from tests.api_helpers import move, ok, problem, text_message
from tests.support.isolated import db_now, wait_until
from tests.support.meshapi import AgentHandle, MeshFactory
from tests.support.procs import MeshProcess
from tests.support.servers import serve_app

TIMEOUT = 600


@pytest.fixture
async def mesh(iso: Settings) -> AsyncIterator[MeshFactory]:
    async with serve_app(iso) as url, MeshFactory.connect(url) as factory:
        yield factory


@pytest.fixture
async def cron_mesh(iso: Settings, pool: asyncpg.Pool) -> AsyncIterator[Mesh]:
    """What cron's startup builds: the services' context on the ``iso`` database."""
    redis = aioredis.from_url(iso.redis_url)
    yield Mesh(pool, iso, redis)
    await redis.aclose()


async def team(mesh: MeshFactory, size: int) -> tuple[AgentHandle, list[AgentHandle]]:
    """A sender and ``size`` recipients of other owners, each a friend of the sender."""
    sender = await (await mesh.owner()).agent("lead")
    others = []
    for i in range(size):
        other = await (await mesh.owner()).agent(f"r{i}")
        await mesh.befriend(sender, other)
        others.append(other)
    return sender, others


async def broadcast(sender: AgentHandle, to: list[AgentHandle], policy: str = "all",
                    **extra: Any) -> dict[str, Any]:
    body = {"to_agent_ids": [a.agent_id for a in to], "message": text_message("vote?"),
            "policy": policy, "timeout_seconds": TIMEOUT, **extra}
    return ok(await sender.post("/v1/mesh/broadcasts", body), 201)  # type: ignore[no-any-return]


def settled_count() -> float:
    return sum(REGISTRY.get_sample_value("agent_mesh_broadcasts_settled_total",
                                         {"outcome": o}) or 0.0
               for o in ("met", "unmet", "timeout"))


def task_of(out: dict[str, Any], agent: AgentHandle) -> str:
    return next(r["task_id"] for r in out["recipients"] if r["agent_id"] == agent.agent_id)


async def finish(agent: AgentHandle, task_id: str, state: str = "completed",
                 answer: str = "yes") -> None:
    ok(await move(agent, task_id, "working"))
    ok(await move(agent, task_id, state, message=text_message(answer)))


async def completions(agent: AgentHandle) -> list[dict[str, Any]]:
    events, after = [], 0
    while page := (await agent.inbox(after=after))["events"]:
        events += page
        after = page[-1]["seq"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    return [e["payload"]["broadcast"] for e in events if e["type"] == "broadcast.completed"]


async def test_all_with_one_silent_recipient_settles_once_at_the_timeout(
        mesh: MeshFactory, cron_mesh: Mesh, pool: asyncpg.Pool) -> None:
    sender, (a, b, silent) = await team(mesh, 3)
    out = await broadcast(sender, [a, b, silent])
    assert out["status"] == "open" and out["n"] == 3 and len(out["task_ids"]) == 3
    assert {r["state"] for r in out["recipients"]} == {"submitted"}
    for agent in (a, b, silent):  # one task each, in the shared context
        [created] = [e for e in (await agent.inbox())["events"] if e["type"] == "task.created"]
        assert created["context_id"] == out["context_id"]
        assert created["payload"]["broadcast_id"] == out["broadcast_id"]
    await finish(a, task_of(out, a))
    await finish(b, task_of(out, b), answer="no")
    progress = ok(await sender.get(f"/v1/mesh/broadcasts/{out['broadcast_id']}"))
    assert progress["status"] == "open" and progress["completed"] == 2
    assert await completions(sender) == []

    t0 = await db_now(pool)
    assert await jobs.settle_broadcasts(cron_mesh, now=t0 + timedelta(seconds=60)) == []
    late = t0 + timedelta(seconds=TIMEOUT + 1)
    assert await jobs.settle_broadcasts(cron_mesh, now=late) == [out["broadcast_id"]]
    # A cron restart (another run, another process) finds nothing left to do.
    assert await jobs.settle_broadcasts(cron_mesh, now=late) == []
    [done] = await completions(sender)
    assert done["status"] == "timeout" and done["broadcast_id"] == out["broadcast_id"]
    by_agent = {r["agent_id"]: r for r in done["recipients"]}
    assert by_agent[silent.agent_id]["timed_out"] is True
    assert by_agent[silent.agent_id]["last_message"] is None
    assert by_agent[a.agent_id]["timed_out"] is False
    assert by_agent[b.agent_id]["state"] == "completed"
    assert by_agent[b.agent_id]["last_message"]["parts"][0]["text"] == "no"

    # A late answer lands on its own task; the broadcast stays settled, no new event.
    await finish(silent, task_of(out, silent), answer="sorry, late")
    task = ok(await sender.get(f"/v1/mesh/tasks/{task_of(out, silent)}"))
    assert task["state"] == "completed" and task["messages"][-1]["parts"][0]["text"] == \
        "sorry, late"
    assert len(await completions(sender)) == 1
    progress = ok(await sender.get(f"/v1/mesh/broadcasts/{out['broadcast_id']}"))
    assert progress["status"] == "timeout" and progress["completed"] == 3


async def test_any_settles_at_the_first_completion(mesh: MeshFactory) -> None:
    sender, (a, b) = await team(mesh, 2)
    out = await broadcast(sender, [a, b], "any")
    ok(await move(a, task_of(out, a), "working"))
    assert await completions(sender) == []
    await finish(b, task_of(out, b), answer="first")
    [done] = await completions(sender)
    assert done["status"] == "met" and done["completed"] == 1
    ok(await move(a, task_of(out, a), "completed"))
    assert len(await completions(sender)) == 1


async def test_n_of_three_and_unmet(mesh: MeshFactory) -> None:
    sender, (a, b, c) = await team(mesh, 3)
    out = await broadcast(sender, [a, b, c], "n", n=2)
    await finish(a, task_of(out, a))
    ok(await move(b, task_of(out, b), "rejected"))  # an answer, but not a completion
    assert await completions(sender) == []
    await finish(c, task_of(out, c))
    [done] = await completions(sender)
    assert (done["status"], done["completed"], done["n"]) == ("met", 2, 2)

    # 'all' with a refusal can never be met: it settles at once as unmet.
    out = await broadcast(sender, [a, b], "all")
    await finish(a, task_of(out, a))
    ok(await move(b, task_of(out, b), "rejected"))
    assert [d["status"] for d in await completions(sender)] == ["met", "unmet"]


async def test_racing_completions_emit_exactly_once(mesh: MeshFactory, cron_mesh: Mesh,
                                                    pool: asyncpg.Pool) -> None:
    sender, agents = await team(mesh, 5)
    settled_before = settled_count()
    rounds = []
    for policy, extra in (("all", {}), ("any", {}), ("n", {"n": 3})):
        out = await broadcast(sender, agents, policy, **extra)
        for a in agents:
            ok(await move(a, task_of(out, a), "working"))
        await asyncio.gather(*(move(a, task_of(out, a), "completed") for a in agents))
        rounds.append(out["broadcast_id"])
    # …and a completion racing the deadline: one of them settles it, never both.
    out = await broadcast(sender, agents[:1])
    ok(await move(agents[0], task_of(out, agents[0]), "working"))
    late = await db_now(pool) + timedelta(seconds=TIMEOUT + 1)
    await asyncio.gather(jobs.settle_broadcasts(cron_mesh, now=late),
                         move(agents[0], task_of(out, agents[0]), "completed"))
    rounds.append(out["broadcast_id"])
    done = await completions(sender)
    assert [d["broadcast_id"] for d in done] == rounds
    assert await pool.fetchval("SELECT count(*) FROM inbox_events WHERE agent_id = $1 AND "
                               "type = 'broadcast.completed'", sender.agent_id) == 4
    # The gateway runs in this process: the counter moved once per broadcast.
    assert settled_count() - settled_before == 4


async def test_refused_up_front_naming_the_recipients(mesh: MeshFactory,
                                                      pool: asyncpg.Pool) -> None:
    sender, (friend,) = await team(mesh, 1)
    stranger = await (await mesh.owner()).agent("stranger")
    body = {"to_agent_ids": [friend.agent_id, stranger.agent_id, "ghost@nobody"],
            "message": text_message("hi"), "timeout_seconds": 60}
    # Unknown and unreachable: one answer, naming both (ADR 030).
    refused = problem(await sender.post("/v1/mesh/broadcasts", body), 403, "ghost@nobody",
                      stranger.agent_id)
    assert refused["agent_ids"] == [stranger.agent_id, "ghost@nobody"]
    body["to_agent_ids"] = body["to_agent_ids"][:2]
    refused = problem(await sender.post("/v1/mesh/broadcasts", body), 403, stranger.agent_id)
    assert refused["agent_ids"] == [stranger.agent_id]
    assert await pool.fetchval("SELECT count(*) FROM tasks") == 0  # nothing was sent
    problem(await sender.post("/v1/mesh/broadcasts", {**body, "to_agent_ids": [friend.agent_id],
                                                      "policy": "n", "n": 2}), 422, "n=2")
    problem(await sender.post("/v1/mesh/broadcasts", {**body, "policy": "n"}), 422)
    problem(await sender.post("/v1/mesh/broadcasts", {**body, "group_id": "g-x-y"}), 422)
    # GET: only the sender sees a broadcast.
    out = await broadcast(sender, [friend])
    problem(await friend.get(f"/v1/mesh/broadcasts/{out['broadcast_id']}"), 404, "sent by you")


async def test_broadcast_to_a_group(mesh: MeshFactory) -> None:
    owner = await mesh.owner()
    lead, a, b = [await owner.agent(n) for n in ("lead", "a", "b")]
    outsider = await (await mesh.owner()).agent("outsider")
    ok(await owner.post("/v1/groups", {"group_id": "g-team-1", "name": "Team"}), 201)
    for member in (lead, a, b):
        ok(await owner.post("/v1/groups/g-team-1/members", {"agent_id": member.agent_id}), 201)
    body = {"group_id": "g-team-1", "message": text_message("standup"), "policy": "any",
            "timeout_seconds": 60}
    problem(await outsider.post("/v1/mesh/broadcasts", body), 403, "not a member")
    problem(await lead.post("/v1/mesh/broadcasts", {**body, "group_id": "g-none-1"}), 404)
    out = ok(await lead.post("/v1/mesh/broadcasts", body), 201)
    assert out["group_id"] == "g-team-1"
    assert sorted(r["agent_id"] for r in out["recipients"]) == sorted([a.agent_id, b.agent_id])
    await finish(b, task_of(out, b))
    [done] = await completions(lead)
    assert done["status"] == "met"


@pytest.mark.faults
async def test_two_real_cron_processes_and_a_restart_settle_once(
        mesh: MeshFactory, iso: Settings, pool: asyncpg.Pool) -> None:
    """Real ``arq cron.worker.WorkerSettings`` processes on the database clock: two run
    the deadline job at start-up on the same due broadcast, one is restarted, and
    the sender still has exactly one broadcast.completed."""
    sender, (a, b) = await team(mesh, 2)
    out = await broadcast(sender, [a, b], timeout_seconds=1)
    await finish(a, task_of(out, a))
    await wait_until(lambda: pool.fetchval(
        "SELECT deadline < now() FROM broadcasts WHERE broadcast_id = $1", out["broadcast_id"]),
        "the broadcast's deadline to pass", 30)
    # DEBUG: the test waits for arq's per-job lines, which cron logs only at DEBUG.
    procs = [MeshProcess("cron", iso, log_level="DEBUG"),
             MeshProcess("cron", iso, log_level="DEBUG")]
    try:
        await asyncio.gather(*(p.start() for p in procs))
        await wait_until(lambda: pool.fetchval(
            "SELECT outcome FROM broadcasts WHERE broadcast_id = $1", out["broadcast_id"]),
            "cron to settle the broadcast", 60)
        assert await procs[0].terminate(timeout=30) == 0
        seen = procs[1].tail(200_000).count("← cron:broadcast_timeout")
        procs[0] = MeshProcess("cron", iso, log_level="DEBUG")
        await procs[0].start()
        # The restart's start-up run of the job executes in whichever process takes
        # it off the shared queue (arq: one job id per tick), so look at both.
        await wait_until(lambda: "← cron:broadcast_timeout" in procs[0].tail(200_000)
                         or procs[1].tail(200_000).count("← cron:broadcast_timeout") > seen,
                         "a deadline run after the restart", 60)
    finally:
        for p in procs:
            p.stop_quietly()
    [done] = await completions(sender)
    assert done["status"] == "timeout"
    assert [r["timed_out"] for r in done["recipients"]] == \
        [r["agent_id"] == b.agent_id for r in done["recipients"]]
