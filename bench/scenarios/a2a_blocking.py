"""Scenario 9: do parked blocking A2A SendMessage calls starve other requests? (ADR 036)

The latency scenario's open loop (``bench.scenarios.latency.run``, its stats
and CPU meter) three times in one sitting on a web process whose blocking
window (``a2a_blocking_seconds``) outlasts the loaded run: alone (the
baseline), while ``callers × per_caller`` blocking ``SendMessage`` calls are
parked — raw JSON-RPC on their own connections, each caller to agents that
have no reader, so nothing ever settles the task and every call that got a
slot waits out the whole window — alone again on a fresh web process (the
machine's drift), and parked once more with the waits' quiet re-read (every
``longpoll_recheck_seconds``) pushed past the run, to see what those cost. A
call refused a slot answers at once, so "parked" is counted from the client
side: calls still without an answer when a parked run starts and when it ends.
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
    client: Client | None = None

    @property
    def open(self) -> int:
        return sum(1 for t in self.tasks if not t.done())


async def park(client: Client, callers: list[Agent], recipients: list[Agent],
               per_caller: int) -> Parked:
    """Start ``per_caller`` blocking calls from each caller, to the recipients in turn."""
    out = Parked(client=client)
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
class ParkedRun:
    run: latency.LatencyRun
    calls: int
    written: int            # messages the calls wrote before the measured run
    open_at_start: int      # calls without an answer when the measured run began
    open_at_end: int        # … and when it ended
    parked: Parked


@dataclass
class BlockingRuns:
    baseline: latency.LatencyRun
    loaded: ParkedRun
    again: latency.LatencyRun   # none parked again: the machine's drift meanwhile
    quiet: ParkedRun            # parked with the waits' quiet re-check off (a diagnosis)
    window: float
    quiet_recheck: float


async def _measured(env: Env, topo: Topology, cast: Cast, client: Client, *, rate: float,
                    seconds: float) -> latency.LatencyRun:
    return await latency.run(topo.urls, env.settings.database_url, cast, client, rate=rate,
                             seconds=seconds, settle=15.0, meter=env.meter(topo.named()))


async def _warm(env: Env, topo: Topology, cast: Cast, rate: float) -> Client:
    """A client with open connections after a 2 s unmeasured run (connections,
    prepared statements)."""
    client = Client(topo.urls)
    await client.prewarm(16)
    await latency.run(topo.urls, env.settings.database_url, cast, client, rate=rate,
                      seconds=2.0, settle=5.0)
    return client


async def _with_parked(env: Env, topo: Topology, cast: Cast, client: Client, waiters: Cast,
                       *, per_caller: int, rate: float, seconds: float) -> ParkedRun:
    """Park the calls, wait until their messages are written, then one measured run.
    The calls stay open: the caller ends them (``_unpark``) and restarts the web."""
    db = env.settings.database_url
    before = await inbox_seqs(db, [r.agent_id for r in waiters.recipients])
    parked = await park(Client(topo.urls), waiters.senders, waiters.recipients, per_caller)
    calls = len(parked.tasks)
    got = await written(db, waiters.recipients, before, calls)
    await asyncio.sleep(0.5)   # let an answer to the last written calls arrive
    open_at_start = parked.open
    measured = await _measured(env, topo, cast, client, rate=rate, seconds=seconds)
    return ParkedRun(measured, calls, got, open_at_start, parked.open, parked)


async def run(env: Env, topo: Topology, cast: Cast, *, rate: float, seconds: float,
              callers: int, per_caller: int, window: float,
              quiet_recheck: float = 300.0) -> BlockingRuns:
    """None parked, parked, none parked again on a fresh web process (a closed
    connection does not end a server-side wait; a restart does), then parked once
    more on a web process whose waits re-read only every ``quiet_recheck`` s: the
    difference to the first parked run is what the waits' quiet re-reads cost."""
    patient = env.variant(a2a_blocking_seconds=window)
    quiet = env.variant(a2a_blocking_seconds=window, longpoll_recheck_seconds=quiet_recheck)
    held: list[Parked] = []
    try:
        await topo.restart(env, "web", patient)
        # Callers and 4 recipients nobody reads: no task they are sent ever settles.
        waiters = await make_cast(topo.urls[0], callers, 4)
        runs: list[latency.LatencyRun | ParkedRun] = []
        for settings, parking in ((None, False), (None, True), (patient, False),
                                  (quiet, True)):
            if settings is not None:
                await _unpark(held)
                await topo.restart(env, "web", settings)
            client = await _warm(env, topo, cast, rate)
            try:
                if parking:
                    pr = await _with_parked(env, topo, cast, client, waiters,
                                            per_caller=per_caller, rate=rate, seconds=seconds)
                    held.append(pr.parked)
                    runs.append(pr)
                else:
                    runs.append(await _measured(env, topo, cast, client, rate=rate,
                                                seconds=seconds))
            finally:
                client.close()
        base, loaded, again, quieted = runs
        assert isinstance(base, latency.LatencyRun) and isinstance(again, latency.LatencyRun)
        assert isinstance(loaded, ParkedRun) and isinstance(quieted, ParkedRun)
        return BlockingRuns(base, loaded, again, quieted, window, quiet_recheck)
    finally:
        await _unpark(held)
        # The next scenario gets the bench's web process.
        await topo.restart(env, "web", None)


async def _unpark(held: list[Parked]) -> None:
    for parked in held:
        for t in parked.tasks:
            t.cancel()
        await asyncio.gather(*parked.tasks, return_exceptions=True)
        if parked.client is not None:
            parked.client.close()
    held.clear()
