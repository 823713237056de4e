"""Agent runs (ADR 046): the runtime reports each run; the owner reads them."""

from __future__ import annotations

from typing import get_args

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.domain.schemas import RunOutcome, RunReport
from app.platform.errors import Problem
from app.responses.runs import RunOut, RunPage, Usage
from app.services import runs
from app.services.principals import Agent, Owner
from app.services.runs import USAGE_DAYS_MAX
from app.web.endpoint import endpoint, json, query_param
from app.web.inputs import body, int_query
from app.web.state import state

OUTCOMES = get_args(RunOutcome)


@endpoint("Report a run of this agent's runtime: when it starts (outcome running) and when "
     "it ends (idempotent on run_id; an ended run keeps its end)", body=RunReport,
     response=RunOut, auth="agent", status=201, replay_status=200, tag="runs")
async def report_run(request: Request, me: Agent) -> Response:
    data = await body(request, RunReport)
    run, created = await runs.report(state(request), me, data)
    return json(run, 201 if created else 200)


@endpoint("The agent's runs, newest first; filter by outcome", response=RunPage, auth="owner",
     tag="runs", params=[
         query_param("outcome", "only runs with this outcome (empty: any)", type_="string",
                     enum=["", *OUTCOMES]),
         query_param("cursor", "the next_cursor of the previous page", type_="string"),
         query_param("limit", "most runs per page (default 50)", minimum=1, maximum=200)])
async def list_runs(request: Request, me: Owner) -> Response:
    q = request.query_params
    outcome = q.get("outcome") or None
    if outcome is not None and outcome not in OUTCOMES:
        raise Problem(422, f"unknown outcome '{outcome}'; one of {', '.join(OUTCOMES)}")
    limit = int_query(request, "limit", default=50, minimum=1, maximum=200)
    assert limit is not None
    return json(await runs.page(state(request).pool, me, request.path_params["agent_id"],
                                limit=limit, outcome=outcome, cursor=q.get("cursor") or None))


@endpoint("The agent's usage per UTC day (runs, turns, cost, failures, p50/p95 duration), "
     "today included", response=Usage, auth="owner", tag="runs", params=[
         query_param("days", "how many days back (default 30)", minimum=1,
                     maximum=USAGE_DAYS_MAX)])
async def usage(request: Request, me: Owner) -> Response:
    days = int_query(request, "days", default=30, minimum=1, maximum=USAGE_DAYS_MAX)
    assert days is not None
    return json(await runs.usage(state(request).pool, me, request.path_params["agent_id"], days))


routes = [
    Route("/v1/mesh/runs", report_run, methods=["POST"]),
    Route("/v1/agents/{agent_id}/runs", list_runs, methods=["GET"]),
    Route("/v1/agents/{agent_id}/usage", usage, methods=["GET"]),
]
