"""The runtime's claim on the event its handler runs (ADR 050).

Before a handler starts, the event is claimed at the gateway under the runtime's
own id (``consumer``, kept in ``state.json``), so a remote MCP client of the same
agent, which takes the events after the acked cursor, never takes this one; an
event such a client took first comes back ``claimed: false`` and is skipped. The
heartbeat renews the claim while a long handler runs. A gateway that takes no
claims (404) is used without them.
"""

from __future__ import annotations

import logging

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.errors import MeshConnectionError, MeshError, NotFoundError, RateLimitedError, ServerError
from meshd.options import DaemonOptions, StopSignal

log = logging.getLogger("meshd.daemon")


class Claims:
    def __init__(self, client: MeshClient, consumer: str, opt: DaemonOptions, stop: StopSignal) -> None:
        self.client = client
        self.consumer = consumer
        self.opt = opt
        self._stop = stop
        self._enabled = True
        self.holding: int | None = None  # the claimed event whose handler runs

    async def take(self, seq: int) -> bool:
        """Claim ``seq`` (True: run it); retried while the gateway is away."""
        if not self._enabled:
            return True
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        while True:
            try:
                claimed = await self.client.claim(seq, self.consumer)
                self.holding = seq if claimed else None
                return claimed
            except NotFoundError:
                log.info("the gateway takes no claims on events; handling without them")
                self._enabled = False
                return True
            except (MeshConnectionError, ServerError, RateLimitedError) as e:
                delay = backoff.next()
                log.warning("claiming seq %d failed (%s); retrying in %.1fs", seq, e, delay)
                await self._stop.sleep(delay)

    def done(self) -> None:
        """The handler ended; its ack (after it) is what frees the event."""
        self.holding = None

    async def renew(self) -> None:
        """Keep a long-running handler's claim from lapsing (each heartbeat)."""
        seq = self.holding
        if seq is None:
            return
        try:
            if not await self.client.claim(seq, self.consumer):
                log.warning("the claim on seq %d lapsed and another reader took it", seq)
        except MeshError as e:
            log.warning("renewing the claim on seq %d failed: %s", seq, e)
