"""Scenario 9: what a remote MCP tool call costs next to the REST call it stands for (ADR 040).

Open loop at a fixed rate (a slow answer never delays the next call), half reads
and half sends, taking turns: over ``/mcp`` a JSON-RPC ``tools/call`` of
``mesh_whoami`` / ``mesh_send_message`` (protocol 2026-07-28: the version in the
``MCP-Protocol-Version`` header and in ``params._meta``, the method and tool name
in ``Mcp-Method`` / ``Mcp-Name``, stateless, JSON answers); over REST the same
work as ``GET /v1/mesh/me`` / ``POST /v1/mesh/tasks``. One sitting: REST, MCP,
REST again, so the difference of the two REST runs is the machine's drift.

MCP runs twice, once per bearer: the agent's API key (what a remote client is
configured with; each call looks the key up and marks it used — a committed
UPDATE) and the agent's access token from ``/v1/auth/token`` (what the REST runs
carry), so the key look-up's share of the difference is its own figure.

Latency = answer read − request written, per call kind; a call counts only if it
succeeded (REST: 200/201; MCP: HTTP 200 with a JSON-RPC ``result`` whose
``isError`` is not set). The CPU meter is the latency scenario's
(``bench.cpu``): per component over the run, divided by the calls.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.client import Client, HttpError, Response, now
from bench.cpu import CpuMeter, Interval, Measure
from bench.load import TEXT, Agent, Cast, new_message_id, send
from bench.scenarios.tracing import cpu_ms_per_send
from bench.stats import Dist

PROTOCOL = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": {}}
KINDS = ("read", "send")
TOOLS = {"read": "mesh_whoami", "send": "mesh_send_message"}
REST = {"read": "GET /v1/mesh/me", "send": "POST /v1/mesh/tasks"}
# How a run calls: REST, MCP with the API key as bearer, MCP with the access token.
OVER = ("rest", "mcp", "mcp-token")


def mcp_headers(agent: Agent, tool: str, *, api_key: bool = True) -> dict[str, str]:
    """``api_key``: the API key as bearer; otherwise the agent's access token."""
    auth = {"Authorization": f"Bearer {agent.api_key}"} if api_key else agent.headers
    return {**auth, "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": "tools/call", "Mcp-Name": tool,
            "Accept": "application/json, text/event-stream"}


def tools_call(call_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": META}}


def mcp_failure(resp: Response) -> str | None:
    """Why an MCP answer is not a successful tool call, or None if it is."""
    if resp.status != 200:
        return f"HTTP {resp.status}: {resp.body[:200]!r}"
    try:
        body = resp.json()
    except ValueError:
        return f"not JSON: {resp.body[:200]!r}"
    if "result" not in body:
        return f"JSON-RPC error: {json.dumps(body.get('error'))[:200]}"
    if body["result"].get("isError"):
        return f"tool error: {json.dumps(body['result'])[:200]}"
    return None


@dataclass
class CallRun:
    over: str           # one of OVER
    rate: float
    seconds: float
    offered: int = 0
    ok: int = 0
    errors: list[str] = field(default_factory=list)
    latency: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    send_lag: list[float] = field(default_factory=list)   # start − schedule (open-loop honesty)
    cpu: Interval | None = None

    def dist(self, kind: str | None = None) -> Dist:
        """Latency of one call kind, or of all calls (None)."""
        values = self.latency[kind] if kind else [v for k in KINDS for v in self.latency[k]]
        return Dist.of_seconds(values)

    def cpu_ms(self, names: Sequence[str]) -> float:
        """CPU milliseconds per successful call of the components ``names`` together."""
        return math.nan if self.cpu is None else cpu_ms_per_send(self.cpu, self.ok, names)


class _Calls:
    """Who calls whom next: senders and recipients in turn, reads and sends alternating."""

    def __init__(self, cast: Cast) -> None:
        self._pairs: Iterator[tuple[Agent, Agent]] = itertools.cycle(
            [(s, r) for s in cast.senders for r in cast.recipients])
        self._kinds = itertools.cycle(KINDS)
        self._ids = itertools.count(1)

    def next(self) -> tuple[str, Agent, Agent, int]:
        sender, recipient = next(self._pairs)
        return next(self._kinds), sender, recipient, next(self._ids)


async def _mcp(client: Client, kind: str, me: Agent, to: Agent, call_id: int, *,
               api_key: bool = True) -> Response:
    tool = TOOLS[kind]
    args = {} if kind == "read" else {"to_agent_id": to.agent_id, "text": TEXT}
    return await client.request("POST", "/mcp", mcp_headers(me, tool, api_key=api_key),
                                tools_call(call_id, tool, args))


async def _mcp_token(client: Client, kind: str, me: Agent, to: Agent, call_id: int) -> Response:
    return await _mcp(client, kind, me, to, call_id, api_key=False)


async def _rest(client: Client, kind: str, me: Agent, to: Agent, call_id: int) -> Response:
    if kind == "read":
        return await client.request("GET", "/v1/mesh/me", me.headers)
    return await send(client, me, to.agent_id, new_message_id())


def _rest_failure(resp: Response) -> str | None:
    return None if resp.status in (200, 201) else f"HTTP {resp.status}: {resp.body[:200]!r}"


async def run(cast: Cast, client: Client, *, over: str, rate: float, seconds: float,
              meter: CpuMeter | None = None) -> CallRun:
    """One open-loop run of ``rate`` calls/s for ``seconds`` over ``over`` (one of OVER)."""
    call = {"rest": _rest, "mcp": _mcp, "mcp-token": _mcp_token}[over]
    failure = _rest_failure if over == "rest" else mcp_failure
    result = CallRun(over, rate, seconds)
    calls = _Calls(cast)

    async def one(kind: str, me: Agent, to: Agent, call_id: int) -> None:
        try:
            resp = await call(client, kind, me, to, call_id)
        except HttpError as exc:
            result.errors.append(str(exc))
            return
        why = failure(resp)
        if why is not None:
            result.errors.append(f"{kind}: {why}")
            return
        result.ok += 1
        result.latency[kind].append(resp.latency)

    tasks: list[asyncio.Task[None]] = []
    measure = Measure(meter) if meter is not None else None
    if measure is not None:
        measure.__enter__()
    start = now() + 0.05
    for i in range(math.floor(rate * seconds)):
        due = start + i / rate
        delay = due - now()
        if delay > 0:
            await asyncio.sleep(delay)
        result.send_lag.append(now() - due)
        tasks.append(asyncio.create_task(one(*calls.next())))
        result.offered += 1
    await asyncio.gather(*tasks)
    if measure is not None:
        measure.__exit__(None, None, None)
        result.cpu = measure.result
    return result

