"""``mesh daemon``: follow the inbox, run a handler per event, in seq order, once.

The parts: :mod:`meshd.daemon.feed` receives (SSE, long-poll fallback); this module
keeps order and dedup, owns the life cycle (start, presence, token renewal,
acks, shutdown) and the state file; :mod:`meshd.daemon.retries` runs the handler and
posts what it produced. Before the handler runs, the event is claimed at the
gateway (renewed with each heartbeat while it runs), so a remote MCP client of the
same agent never takes it meanwhile; one such a client took first is skipped
(ADR 050). Only after the handler succeeded is the event recorded (cursor +
dedup window, written atomically) and then acked to the gateway. A handler that
keeps failing is given up after ``attempts``: the task it served is set
``failed`` with the error, and the inbox moves on.

SIGTERM/SIGINT: no new event is started; while the running handler may still
finish (``shutdown_grace``) the agent is ``draining`` (``DELETE /v1/mesh/online``);
then the cursor is acked, the agent goes ``inactive`` (``POST /v1/mesh/offline``),
the state is flushed, and the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable

from meshd import tracing
from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.config import state_root
from meshd.daemon.claims import Claims
from meshd.daemon.feed import InboxFeed
from meshd.daemon.handlers import Handler, HandlerError
from meshd.daemon.retries import Outbox, fail_action, reply_action, run_with_retries
from meshd.daemon.run_reports import RunReports
from meshd.daemon.state import DaemonState
from meshd.errors import AuthError, FatalError, MeshConnectionError, MeshError, RateLimitedError, ServerError
from meshd.models import InboxEvent
from meshd.options import DaemonOptions, DaemonStats, Stopped, StopSignal, Transport

__all__ = ["REPLY_TYPES", "Daemon", "DaemonOptions", "DaemonStats", "FatalError", "Transport"]

log = logging.getLogger("meshd.daemon")

# Events whose handler output is posted back on the task as a reply.
REPLY_TYPES = frozenset({"task.created", "task.message"})


class Daemon:
    def __init__(self, client: MeshClient, handler: Handler, options: DaemonOptions | None = None) -> None:
        self.client = client
        self.handler = handler
        self.opt = options or DaemonOptions()
        self.stats = DaemonStats()
        self.agent_id: str = ""
        self.state: DaemonState | None = None
        self._stop = StopSignal()
        self._outbox: Outbox | None = None
        self.reports: RunReports | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._acked: int | None = None
        self._ack_wanted: int | None = None
        self._ack_signal = asyncio.Event()
        self.claims: Claims | None = None

    # -- control -------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop.is_set

    def request_stop(self) -> None:
        if not self._stop.is_set:
            log.info("stop requested: finishing the running handler, then going offline")
            self._stop.set()

    # -- main ----------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        tracing.setup()  # only with OTEL_EXPORTER_OTLP_ENDPOINT set
        if self.opt.install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            try:
                await self._start()
            except Stopped:
                return 0
            return await self._serve()
        except FatalError as e:
            log.error("%s", e)
            return 1
        finally:
            if self.opt.install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            if self.state is not None:
                self.state.unlock()
            tracing.shutdown()

    async def _start(self) -> None:
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        while True:
            try:
                self.agent_id = await self.client.authenticate()
                break
            except AuthError as e:
                raise FatalError(f"the gateway rejected this agent's credentials: {e}") from e
            except (MeshConnectionError, ServerError, RateLimitedError) as e:
                delay = backoff.next()
                log.warning("gateway not reachable (%s); retrying in %.1fs", e, delay)
                await self._stop.sleep(delay)
        folder = self.opt.state_dir or state_root() / self.agent_id
        state = DaemonState(folder, window=self.opt.window)
        state.lock()
        self.state = state
        state.load()
        if state.agent_id and state.agent_id != self.agent_id:
            raise FatalError(
                f"state folder {folder} belongs to {state.agent_id}, not {self.agent_id}; "
                "pass --state-dir for this agent"
            )
        state.agent_id = self.agent_id
        if state.cursor is None:
            with contextlib.suppress(MeshError):
                state.cursor = int((await self.client.me())["acked_seq"])
            log.info("no saved cursor; starting after the gateway's acked seq %s", state.cursor)
        else:
            log.info("resuming after seq %d (state %s)", state.cursor, state.path)
        state.save()
        self._outbox = Outbox(self.client, state, self.agent_id, self.opt, self._stop)
        self.claims = Claims(self.client, state.consumer, self.opt, self._stop)
        # Under the state lock: only this runtime closes the runs its predecessor left open.
        self.reports = RunReports(folder, self.agent_id)
        await self.reports.recover(self.client)

    async def _serve(self) -> int:
        assert self.state is not None
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="meshd-heartbeat")
        refresher = asyncio.create_task(self._token_loop(), name="meshd-token")
        acker = asyncio.create_task(self._ack_loop(), name="meshd-ack")
        reporter = asyncio.create_task(self._report_loop(), name="meshd-run-reports")
        consumer = asyncio.create_task(self._consume(), name="meshd-consumer")
        stop_wait = asyncio.create_task(self._stop.wait())
        code = 0
        try:
            await asyncio.wait({consumer, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if consumer.done() and not self.stopping:
                exc = consumer.exception()
                if isinstance(exc, FatalError):
                    log.error("%s", exc)
                    code = 1
                elif exc is not None:
                    log.error("inbox consumer crashed: %r", exc, exc_info=exc)
                    code = 1
        finally:
            # 1. let the running handler finish, up to the grace period
            if not self._idle.is_set():
                # Draining means "finishing the current work": only while there is some.
                await self._presence(self.client.go_offline, "draining")
                log.info("waiting up to %.0fs for the running handler", self.opt.shutdown_grace)
                try:
                    async with asyncio.timeout(self.opt.shutdown_grace):
                        await self._idle.wait()
                except TimeoutError:
                    log.warning(
                        "handler still running after the grace period; it is stopped "
                        "and its event runs again on the next start"
                    )
            loops = (consumer, heartbeat, refresher, acker, reporter, stop_wait)
            for task in loops:
                task.cancel()
            for task in loops:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            # 2. tell the gateway (the runs' reports, the ack, presence), 3. flush state
            if self.reports is not None and self.reports.pending:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.opt.offline_timeout):
                        await self.reports.send(self.client)
            await self._go_offline()
            self.state.save()
            log.info(
                "stopped: %d handled, %d duplicates skipped, %d taken by other readers, "
                "%d gave up; cursor %s",
                self.stats.handled,
                self.stats.duplicates,
                self.stats.taken_elsewhere,
                self.stats.gave_up,
                self.state.cursor,
            )
        return code

    async def _go_offline(self) -> None:
        assert self.state is not None
        cursor = self.state.cursor
        if cursor is not None and (self._acked is None or self._acked < cursor):
            with contextlib.suppress(MeshError, TimeoutError):
                async with asyncio.timeout(self.opt.offline_timeout):
                    await self.client.ack(cursor)
        await self._presence(self.client.go_inactive, "inactive (stopped)")

    async def _presence(self, call: Callable[[], Awaitable[object]], what: str) -> None:
        try:
            async with asyncio.timeout(self.opt.offline_timeout):
                await call()
            log.info("agent %s is now %s", self.agent_id, what)
        except (MeshError, TimeoutError) as e:
            log.warning("could not tell the gateway this agent is %s: %s", what, e)

    # -- background loops ----------------------------------------------------
    async def _report_loop(self) -> None:
        """Resend the run reports a gateway outage left waiting, with backoff."""
        assert self.reports is not None
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        while True:
            await self.reports.waiting.wait()
            await self._stop.sleep(backoff.next())
            if await self.reports.send(self.client) == 0:
                backoff.reset()

    async def _heartbeat_loop(self) -> None:
        try:
            await self.client.go_online()  # also leaves "draining" after a restart
        except MeshError as e:
            log.warning("could not mark the agent online: %s", e)
        while True:
            try:
                await self.client.heartbeat()
            except MeshError as e:
                log.warning("heartbeat failed: %s", e)
            if self.claims is not None:
                await self.claims.renew()
            await asyncio.sleep(self.opt.heartbeat_interval)

    async def _token_loop(self) -> None:
        auth = self.client.auth
        if not auth.can_refresh:
            return
        while True:
            at = auth.refresh_at
            if at is None:
                return
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            try:
                before = auth.refreshes
                await auth.token()
                if auth.refreshes != before and auth.info is not None:
                    log.info("token renewed (valid for %gs)", auth.info.expires_in)
            except MeshError as e:
                log.warning("token refresh failed (retrying on the next request): %s", e)
                await asyncio.sleep(self.opt.reconnect_initial)

    def _ack(self, seq: int) -> None:
        """Ask the ack loop to acknowledge up to ``seq`` (acks are coalesced)."""
        if self._ack_wanted is None or seq > self._ack_wanted:
            self._ack_wanted = seq
        self._ack_signal.set()

    async def _ack_loop(self) -> None:
        # The local cursor is what guards against re-runs; the gateway's copy
        # (receipts, the resume point of a fresh state) may lag and catches up here.
        while True:
            await self._ack_signal.wait()
            self._ack_signal.clear()
            seq = self._ack_wanted
            if seq is None or (self._acked is not None and seq <= self._acked):
                continue
            try:
                await self.client.ack(seq)
                self._acked = seq
            except MeshError as e:
                log.warning("ack of seq %d failed: %s", seq, e)
                await asyncio.sleep(self.opt.reconnect_initial)
                self._ack_signal.set()

    # -- processing ------------------------------------------------------------
    async def _consume(self) -> None:
        assert self.state is not None and self._outbox is not None
        state = self.state
        feed = InboxFeed(
            self.client, self.opt, self.stats, self._stop, cursor=lambda: state.cursor, process=self._process
        )
        try:
            await self._outbox.flush()  # replies a previous run stored but did not post
            await feed.run()
        except Stopped:
            return

    async def _process(self, event: InboxEvent) -> None:
        """Handle one delivered event, keeping strict seq order."""
        assert self.state is not None
        cursor = self.state.cursor
        if cursor is not None and event.seq > cursor + 1:
            await self._fill_gap(event.seq)
        await self._handle_once(event)

    async def _handle_once(self, event: InboxEvent) -> None:
        """Run the handler unless this event was handled before (by seq or by id)."""
        state = self.state
        assert state is not None
        if state.cursor is not None and event.seq <= state.cursor:
            self.stats.duplicates += 1
            log.debug("seq %d already handled; skipped", event.seq)
            return
        if event.event_id in state.handled:
            # Handled under another seq's cursor (e.g. a cursor restored from an older copy):
            # not again — but the cursor moves past it, so order checks stay exact.
            self.stats.duplicates += 1
            log.info("event %s (seq %d) was handled before; skipped", event.event_id, event.seq)
            state.record(event.seq, event.event_id)
            state.save()
            self._ack(event.seq)
            return
        assert self.claims is not None
        if not await self.claims.take(event.seq):
            # A remote MCP client of this agent took it first: it is that client's.
            self.stats.taken_elsewhere += 1
            log.info("seq %d (%s) was taken by another reader of this agent; skipped",
                     event.seq, event.type)
            state.record(event.seq, event.event_id)
            state.save()
            return
        await self._handle(event)

    async def _fill_gap(self, upto: int) -> None:
        """Fetch and handle the events before ``upto`` that the stream skipped."""
        state = self.state
        assert state is not None
        log.warning("seq jumped from %s to %d; fetching the gap first", state.cursor, upto)
        while state.cursor is not None and state.cursor + 1 < upto:
            page = await self.client.poll_inbox(
                state.cursor, limit=min(self.opt.poll_limit, upto - state.cursor - 1)
            )
            todo = [e for e in page.events if e.seq < upto]
            if not todo:
                log.error(
                    "events %d..%d are not available from the gateway; continuing at %d",
                    state.cursor + 1,
                    upto - 1,
                    upto,
                )
                return
            for e in todo:
                await self._handle_once(e)

    async def _handle(self, event: InboxEvent) -> None:
        state = self.state
        assert state is not None and self._outbox is not None
        if self.stopping:
            raise Stopped
        self._idle.clear()
        ran_for: float | None = None  # the handler's own time, for the claims' pace
        try:
            # The reply is sent inside the span, so it joins the message's trace.
            with tracing.handle(event.traceparent, {"mesh.seq": event.seq,
                                                    "mesh.event_type": event.type}):
                try:
                    started = time.monotonic()
                    reply = await run_with_retries(
                        self.handler, event, self.client, self.agent_id, self.opt, self._stop,
                        self.reports,
                    )
                    ran_for = time.monotonic() - started
                except HandlerError as e:
                    self.stats.gave_up += 1
                    log.error(
                        "handler failed %d times on seq %d (%s); giving up on it",
                        self.opt.attempts,
                        event.seq,
                        event.type,
                    )
                    if event.task_id:
                        state.pending.append(fail_action(event.task_id, e))
                else:
                    if reply is not None and self.opt.reply and event.task_id:
                        if event.type in REPLY_TYPES:
                            state.pending.append(reply_action(self.agent_id, event, reply))
                        else:
                            log.info("handler output for %s event ignored (no reply)", event.type)
                state.record(event.seq, event.event_id)
                state.save()
                self.stats.handled += 1
                await self._outbox.flush()
                self._ack(event.seq)
        finally:
            if self.claims is not None:
                self.claims.done(ran_for)
            self._idle.set()
