"""The runtime's claim on the events its handler runs (ADR 050).

Before a handler starts, the event is claimed at the gateway under the runtime's
own id (``consumer``, kept in ``state.json``), so a remote MCP client of the same
agent, which takes the events after the acked cursor, never takes this one; an
event such a client took first comes back ``claimed: false`` and is skipped.
While handlers are quick (under ``QUICK_SECONDS``), one claim covers up to
``AHEAD`` events from the one at hand, as far as the inbox goes: a runtime working
through a backlog asks once per run of events, and a remote client waits at most
that run (a few seconds). A slow handler (a model run) claims its event alone, so
remote clients can take the ones after it meanwhile. The range is trusted for half
its lifetime; the heartbeat renews the claim while a long handler runs. A gateway
that takes no claims (404) is used without them.
"""

from __future__ import annotations

import logging
import time

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.errors import MeshConnectionError, MeshError, NotFoundError, RateLimitedError, ServerError
from meshd.options import DaemonOptions, StopSignal

log = logging.getLogger("meshd.daemon")

# Events one claim covers at most, while the last handler took under QUICK_SECONDS.
AHEAD = 32
QUICK_SECONDS = 0.1


class Claims:
    def __init__(self, client: MeshClient, consumer: str, opt: DaemonOptions, stop: StopSignal) -> None:
        self.client = client
        self.consumer = consumer
        self.opt = opt
        self._stop = stop
        self._enabled = True
        self.holding: int | None = None  # the claimed event whose handler runs
        # The last seq this runtime's claim covers, and until when (monotonic) it is
        # trusted without asking again.
        self._through = -1
        self._trusted_until = 0.0
        self._quick = False  # the last handler ended within QUICK_SECONDS

    async def take(self, seq: int) -> bool:
        """Claim ``seq`` (True: run it); retried while the gateway is away."""
        if not self._enabled:
            return True
        if seq <= self._through and time.monotonic() < self._trusted_until:
            self.holding = seq  # inside the range this runtime holds
            return True
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        while True:
            try:
                asked = time.monotonic()
                answer = await self.client.claim(seq, self.consumer, AHEAD if self._quick else 1)
                break
            except NotFoundError:
                log.info("the gateway takes no claims on events; handling without them")
                self._enabled = False
                return True
            except (MeshConnectionError, ServerError, RateLimitedError) as e:
                delay = backoff.next()
                log.warning("claiming seq %d failed (%s); retrying in %.1fs", seq, e, delay)
                await self._stop.sleep(delay)
        if not answer.get("claimed"):
            self.holding = None
            return False
        self.holding = seq
        self._through = max(seq, int(answer.get("through") or seq))
        self._trusted_until = asked + float(answer.get("lapses_in") or 0.0) / 2
        return True

    def done(self, ran_for: float | None) -> None:
        """The handler ended after ``ran_for`` seconds (None: it failed); its ack
        (after it) is what frees the event."""
        self._quick = ran_for is not None and ran_for < QUICK_SECONDS
        self.holding = None

    async def renew(self) -> None:
        """Keep a long-running handler's claim from lapsing (each heartbeat)."""
        seq = self.holding
        if seq is None:
            return
        try:
            answer = await self.client.claim(seq, self.consumer)
            if not answer.get("claimed"):
                self._through = -1
                log.warning("the claim on seq %d lapsed and another reader took it", seq)
        except MeshError as e:
            log.warning("renewing the claim on seq %d failed: %s", seq, e)
