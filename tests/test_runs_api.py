"""Runs at the gateway: an agent's runtime reports each run, start and end,
idempotently; its owner pages through them, reads usage per day, and sees a
task's cost as the sum of its own agents' runs. Nobody else sees any of it."""

from __future__ import annotations

import uuid

from tests.api_helpers import ok, problem
from tests.support.meshapi import MeshFactory


def run(run_id: str, outcome: str = "ok", **fields: object) -> dict[str, object]:
    return {"run_id": run_id, "outcome": outcome, **fields}


async def test_a_run_is_reported_at_start_and_end_and_an_ended_run_keeps_its_end(
        mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "work")
    rid = f"r-{uuid.uuid4().hex[:12]}"
    started = ok(await b.post("/v1/mesh/runs", run(rid, "running", task_id=task["task_id"],
                                                     event_id="e-1", model="claude-x")), 201)
    assert started["outcome"] == "running" and started["ended_at"] is None
    ended = ok(await b.post("/v1/mesh/runs", run(rid, "ok", turns=3, cost_usd=0.0123,
                                                   duration_ms=4200)), 200)
    assert (ended["outcome"], ended["turns"], ended["cost_usd"]) == ("ok", 3, 0.0123)
    assert ended["task_id"] == task["task_id"] and ended["model"] == "claude-x"
    assert ended["ended_at"] is not None
    # A retried start, and a second end with other figures, change nothing.
    for late in (run(rid, "running"), run(rid, "failed", error="boom", turns=9)):
        again = ok(await b.post("/v1/mesh/runs", late), 200)
        assert again == ended
    # Run ids are per agent: another agent may use the same one.
    assert ok(await a.post("/v1/mesh/runs", run(rid)), 201)["agent_id"] == a.agent_id


async def test_bad_reports_are_refused_with_a_reason(mesh: MeshFactory) -> None:
    a, _ = await mesh.pair()
    bad = [
        {"outcome": "ok"},                                  # no run_id
        run("r-1", "done"),                                 # unknown outcome
        run("r-1", turns=-1),
        run("r-1", cost_usd=-0.5),
        run("r-1", cost_usd="abc"),
        run("r-1", duration_ms=-3),
        run("bad id with spaces"),
        run("r-1", surprise=True),                          # unknown field
        run("r-1", model="m" * 500),
    ]
    for body in bad:
        problem(await a.post("/v1/mesh/runs", body), 422)
    nan = await a.http.post("/v1/mesh/runs", content=b'{"run_id":"r-1","outcome":"ok",'
                            b'"cost_usd":NaN}', headers={**a.headers,
                                                         "Content-Type": "application/json"})
    assert nan.status_code in (400, 422), nan.text
    # A long error text is cut, not refused: the run's report is kept.
    kept = ok(await a.post("/v1/mesh/runs", run("r-long", "failed", error="x" * 10_000)), 201)
    assert len(kept["error"]) == 2000


async def test_the_owner_pages_filters_and_sums_and_nobody_else_sees(mesh: MeshFactory) -> None:
    alice, mallory = await mesh.owner(), await mesh.owner()
    coder = await alice.agent("coder")
    ids = [f"r-{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(25)]
    for i, rid in enumerate(ids):
        outcome = "failed" if i % 5 == 0 else "ok"
        ok(await coder.post("/v1/mesh/runs", run(rid, outcome, turns=2, cost_usd=0.01,
                                                   duration_ms=1000 + i)), 201)
    seen: list[str] = []
    cursor = ""
    while True:
        page = ok(await alice.get(f"/v1/agents/{coder.agent_id}/runs",
                                  params={"limit": 10, "cursor": cursor}))
        seen += [r["run_id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 25  # each exactly once
    failed = ok(await alice.get(f"/v1/agents/{coder.agent_id}/runs",
                                params={"outcome": "failed"}))["runs"]
    assert len(failed) == 5 and {r["outcome"] for r in failed} == {"failed"}

    usage = ok(await alice.get(f"/v1/agents/{coder.agent_id}/usage", params={"days": 7}))
    assert len(usage["days"]) == 7
    today = usage["days"][-1]
    assert (today["runs"], today["turns"], today["failures"]) == (25, 50, 5)
    assert abs(today["cost_usd"] - 0.25) < 1e-9 and abs(usage["total_cost_usd"] - 0.25) < 1e-9
    assert 1000 <= today["p50_duration_ms"] <= today["p95_duration_ms"] <= 1024
    assert all(d["runs"] == 0 for d in usage["days"][:-1])

    # Another owner: the same 404 as for an agent that does not exist.
    for path in (f"/v1/agents/{coder.agent_id}/runs", f"/v1/agents/{coder.agent_id}/usage"):
        problem(await mallory.get(path), 404)
    for params in ({"limit": 0}, {"limit": 201}, {"outcome": "done"}, {"cursor": "%%%"}):
        assert (await alice.get(f"/v1/agents/{coder.agent_id}/runs", params=params)
                ).status_code in (400, 422)
    for days in (0, 367, "x"):
        assert (await alice.get(f"/v1/agents/{coder.agent_id}/usage", params={"days": days})
                ).status_code in (400, 422)


async def test_a_tasks_cost_is_the_sum_of_its_runs_per_owner(mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "price me")
    tid = task["task_id"]
    for i, cost in enumerate((0.25, 0.5)):
        ok(await b.post("/v1/mesh/runs", run(f"rb-{i}-{uuid.uuid4().hex[:6]}", task_id=tid,
                                               turns=i + 1, cost_usd=cost)), 201)
    ok(await a.post("/v1/mesh/runs", run(f"ra-{uuid.uuid4().hex[:6]}", task_id=tid,
                                           turns=7, cost_usd=2.0)), 201)
    # Each side sees what its own owner's agents spent on it, not the other's.
    assert ok(await b.get(f"/v1/mesh/tasks/{tid}"))["usage"] == \
        {"runs": 2, "turns": 3, "cost_usd": 0.75}
    assert ok(await a.get(f"/v1/mesh/tasks/{tid}"))["usage"] == \
        {"runs": 1, "turns": 7, "cost_usd": 2.0}


async def test_a_daily_budget_is_set_shown_with_todays_spend_and_removed(
        mesh: MeshFactory, db) -> None:
    from cron.jobs import update_budget_gauges  # the gauges cron exports (ADR 047)

    alice, mallory = await mesh.owner(), await mesh.owner()
    coder = await alice.agent("coder")
    path = f"/v1/agents/{coder.agent_id}"
    assert ok(await alice.get(path))["daily_budget_usd"] is None  # no budget by default
    assert ok(await alice.patch(path, {"daily_budget_usd": 1.5}))["daily_budget_usd"] == 1.5
    for i, cost in enumerate((0.4, 0.3)):
        ok(await coder.post("/v1/mesh/runs", run(f"rb-{i}-{uuid.uuid4().hex[:6]}",
                                                 cost_usd=cost)), 201)
    # The agent reads it with its instructions; the owner on the agent and the list.
    me = ok(await coder.get("/v1/mesh/me"))
    assert (me["daily_budget_usd"], me["spent_today_usd"]) == (1.5, 0.7)
    listed = {a["agent_id"]: a for a in ok(await alice.get("/v1/agents"))["agents"]}
    assert listed[coder.agent_id]["spent_today_usd"] == 0.7

    # 0.7 of 1.5 is not near it; 0.7 of 0.8 is.
    near_before = await update_budget_gauges(db)
    ok(await alice.patch(path, {"daily_budget_usd": 0.8}))
    assert await update_budget_gauges(db) == near_before + 1

    # A PATCH without the field keeps it; null removes it.
    assert ok(await alice.patch(path, {"description": "x"}))["daily_budget_usd"] == 0.8
    assert ok(await alice.patch(path, {"daily_budget_usd": None}))["daily_budget_usd"] is None
    assert await update_budget_gauges(db) == near_before

    for bad in (-1, "1.5", 10**7, True, [1]):
        body = problem(await alice.patch(path, {"daily_budget_usd": bad}), 422)
        assert "daily_budget_usd" in body["detail"], body
    problem(await mallory.patch(path, {"daily_budget_usd": 5}), 404)
    assert ok(await alice.get(path))["daily_budget_usd"] is None
