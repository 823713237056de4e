"""Scenario 9: do parked blocking A2A SendMessage calls starve other requests? (ADR 036)

The latency scenario's open loop (``bench.scenarios.latency.run``, its stats
and CPU meter) twice in one sitting on a web process whose blocking window
(``a2a_blocking_seconds``) outlasts the scenario: first alone (the baseline),
then while ``callers × per_caller`` blocking ``SendMessage`` calls are parked —
raw JSON-RPC on their own connections, each caller to agents that have no
reader, so nothing ever settles the task and every call that got a slot waits
out the whole window. A call refused a slot answers at once, so "parked" is
counted from the client side: calls still without an answer when the loaded
run starts and when it ends.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field

from bench.client import Client, HttpError
from bench.env import Env
from bench.load import Agent, Cast, inbox_seqs, make_cast
from bench.scenarios import latency
from bench.topology import Topology

A2A_HEADERS = {"A2A-Version": "1.0"}


def send_message_body() -> dict[str, object]:
    """A JSON-RPC SendMessage without ``returnImmediately``: it blocks."""
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": f"m-bench-a2a-{uuid.uuid4().hex}",
                                   "role": "ROLE_USER", "parts": [{"text": "x"}]}}}


@dataclass
class Parked:
    """Blocking calls in flight; ``answers`` holds (status, seconds after start) of each
    call that has answered (a refused slot, an error) — the others are parked."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    answers: list[tuple[int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)   # first few early answers

    @property
    def open(self) -> int:
        return sum(1 for t in self.tasks if not t.done())


async def park(client: Client, callers: list[Agent], recipients: list[Agent],
               per_caller: int) -> Parked:
    """Start ``per_caller`` blocking calls from each caller, to the recipients in turn."""
    out = Parked()
    targets = itertools.cycle(recipients)
    t0 = time.monotonic()

    async def one(caller: Agent, to: str) -> None:
        try:
            resp = await client.request("POST", f"/a2a/{to}", caller.headers | A2A_HEADERS,
                                        send_message_body())
        except HttpError as exc:
            out.errors.append(str(exc))
            return
        out.answers.append((resp.status, time.monotonic() - t0))
        if len(out.bodies) < 3:
            out.bodies.append(resp.body[:300])

    for caller in callers:
        for _ in range(per_caller):
            out.tasks.append(asyncio.create_task(one(caller, next(targets).agent_id)))
    return out


async def written(database_url: str, recipients: list[Agent], before: dict[str, int],
                  want: int, timeout: float = 30.0) -> int:
    """Poll until the recipients' inboxes grew by ``want`` events (each call's message
    is written after its slot is taken, before it waits) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        now = await inbox_seqs(database_url, [r.agent_id for r in recipients])
        got = sum(now[k] - before[k] for k in before)
        if got >= want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


@dataclass
class BlockingRuns:
    baseline: latency.LatencyRun
    loaded: latency.LatencyRun
    calls: int
    written: int            # messages the calls wrote before the loaded run
    open_at_start: int      # calls without an answer when the loaded run began
    open_at_end: int        # … and when it ended
    parked: Parked
    window: float


async def run(env: Env, topo: Topology, cast: Cast, *, rate: float, seconds: float,
              callers: int, per_caller: int, window: float) -> BlockingRuns:
    db = env.settings.database_url
    await topo.restart(env, "web", env.variant(a2a_blocking_seconds=window))
    parked_client: Client | None = None
    parked: Parked | None = None
    try:
        # Callers and 4 recipients nobody reads: no task they are sent ever settles.
        waiters = await make_cast(topo.urls[0], callers, 4)
        client = Client(topo.urls)
        try:
            await client.prewarm(16)
            # Warm-up (connections, prepared statements): not measured.
            await latency.run(topo.urls, db, cast, client, rate=rate, seconds=2.0, settle=5.0)
            base = await latency.run(topo.urls, db, cast, client, rate=rate, seconds=seconds,
                                     settle=15.0, meter=env.meter(topo.named()))
            before = await inbox_seqs(db, [r.agent_id for r in waiters.recipients])
            parked_client = Client(topo.urls)
            parked = await park(parked_client, waiters.senders, waiters.recipients, per_caller)
            calls = len(parked.tasks)
            got = await written(db, waiters.recipients, before, calls)
            await asyncio.sleep(0.5)   # let an answer to the last written calls arrive
            open_at_start = parked.open
            loaded = await latency.run(topo.urls, db, cast, client, rate=rate, seconds=seconds,
                                       settle=15.0, meter=env.meter(topo.named()))
            open_at_end = parked.open
        finally:
            client.close()
        return BlockingRuns(base, loaded, calls, got, open_at_start, open_at_end, parked, window)
    finally:
        if parked is not None:
            for t in parked.tasks:
                t.cancel()
            await asyncio.gather(*parked.tasks, return_exceptions=True)
        if parked_client is not None:
            parked_client.close()
        # The parked waits end with the process; the next scenario gets the bench's web.
        await topo.restart(env, "web", None)
