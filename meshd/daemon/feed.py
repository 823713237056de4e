"""How the daemon receives its inbox: SSE first, HTTP long-poll when SSE fails.

A failed or refused stream switches to long-poll and SSE is tried again after
its own backoff (reset by a stream that delivered or stayed up); the poll wait
is cut to the next SSE try. A healthy stream the gateway closed cleanly is
reopened at once. Both paths resume after the daemon's cursor and hand every
event to ``process`` in the order received; ordering and dedup are the caller's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.errors import AuthError, FatalError, ForbiddenError, MeshConnectionError, MeshError, MeshHTTPError
from meshd.models import InboxEvent
from meshd.options import DaemonOptions, DaemonStats, Stopped, StopSignal

log = logging.getLogger("meshd.daemon")


class InboxFeed:
    def __init__(
        self,
        client: MeshClient,
        opt: DaemonOptions,
        stats: DaemonStats,
        stop: StopSignal,
        *,
        cursor: Callable[[], int | None],
        process: Callable[[InboxEvent], Awaitable[None]],
    ) -> None:
        self.client = client
        self.opt = opt
        self.stats = stats
        self.stop = stop
        self._cursor = cursor
        self._process = process

    def _set_mode(self, mode: str, message: str, *args: Any) -> None:
        if mode != self.stats.mode:
            log.info("inbox: " + message, *args)
        self.stats.mode = mode

    async def _deliver(self, event: InboxEvent) -> None:
        await self._process(event)
        if self.stop.is_set:
            raise Stopped

    async def run(self) -> None:
        """Receive until stopped (raises :class:`Stopped`) or refused (:class:`FatalError`)."""
        sse_backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        net_backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        next_sse = 0.0
        while not self.stop.is_set:
            if self.opt.transport != "poll" and time.monotonic() >= next_sse:
                clean, healthy, reason = await self._sse_session()
                if healthy:
                    sse_backoff.reset()
                    net_backoff.reset()
                if clean and healthy:
                    continue  # the gateway closed a working stream: just reconnect
                if self.opt.transport == "sse":
                    delay = net_backoff.next()
                    log.warning("inbox stream failed (%s); reconnecting in %.1fs", reason, delay)
                    await self.stop.sleep(delay)
                    continue
                delay = sse_backoff.next()
                next_sse = time.monotonic() + delay
                self._set_mode(
                    "poll", "SSE unavailable (%s); long-polling, SSE again in %.1fs", reason, delay
                )
            await self._poll_round(next_sse, net_backoff)

    async def _sse_session(self) -> tuple[bool, bool, str]:
        """One SSE connection. Returns (closed cleanly, was healthy, reason)."""
        started = time.monotonic()
        got_event = False
        after = self._cursor()
        stream = self.client.stream(
            after,
            read_timeout=self.opt.sse_read_timeout,
            on_open=lambda: self._set_mode("sse", "following the SSE stream after seq %s", after),
        )
        try:
            async for event in stream:
                got_event = True
                await self._deliver(event)
            reason, clean = "closed by the gateway", True
        except (AuthError, ForbiddenError) as e:
            raise FatalError(f"the gateway refused this agent's inbox: {e}") from e
        except (MeshHTTPError, MeshConnectionError) as e:
            reason, clean = str(e), False
        except ValueError as e:  # a malformed event on the stream
            reason, clean = f"bad event on the stream: {e}", False
        finally:
            await stream.aclose()
        healthy = got_event or time.monotonic() - started >= self.opt.sse_healthy_after
        return clean, healthy, reason

    async def _poll_round(self, next_sse: float, backoff: Backoff) -> None:
        wait = self.opt.poll_wait
        if self.opt.transport == "auto":
            wait = min(wait, max(1.0, next_sse - time.monotonic()))
        try:
            page = await self.client.poll_inbox(self._cursor(), wait=round(wait), limit=self.opt.poll_limit)
        except (AuthError, ForbiddenError) as e:
            raise FatalError(f"the gateway refused this agent's inbox: {e}") from e
        except MeshError as e:
            delay = backoff.next()
            self._set_mode("down", "gateway unreachable (%s); retrying in %.1fs", e, delay)
            await self.stop.sleep(delay)
            return
        backoff.reset()
        if self.stats.mode != "poll":
            self._set_mode("poll", "long-polling after seq %s", self._cursor())
        for event in page.events:
            await self._deliver(event)
