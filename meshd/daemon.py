"""``mesh daemon``: follow the inbox, run a handler per event, in seq order, once.

Delivery: SSE first; when it fails, HTTP long-poll, and SSE again after a
backoff (1 s → 30 s); both resume from the persisted cursor. Each event runs
the handler; only after the handler succeeded is the event recorded (cursor +
dedup window, written atomically) and then acked to the gateway. A reply the
handler produced is written to the state file with the event, and posted from
there, so neither a crash nor an outage makes a handler run twice or lose its
reply. A handler that keeps failing is given up after ``attempts``: the task it
served is set ``failed`` with the error, and the inbox moves on.

SIGTERM/SIGINT: no new event is started, the running handler may finish
(``shutdown_grace``), the agent goes ``draining`` (``DELETE /v1/mesh/online``),
the state is flushed, and the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.config import state_root
from meshd.errors import (
    AuthError,
    ConflictError,
    ForbiddenError,
    MeshConnectionError,
    MeshError,
    MeshHTTPError,
    NotFoundError,
    RateLimitedError,
    ServerError,
)
from meshd.handlers import Handler, HandlerContext, HandlerError, Reply
from meshd.ids import derived_message_id
from meshd.models import InboxEvent, text_part
from meshd.state import DaemonState

log = logging.getLogger("meshd.daemon")

Transport = Literal["auto", "sse", "poll"]
# Events whose handler output is posted back on the task as a reply.
REPLY_TYPES = frozenset({"task.created", "task.message"})


@dataclass
class DaemonOptions:
    state_dir: Path | None = None
    window: int = 500
    transport: Transport = "auto"
    heartbeat_interval: float = 30.0
    reconnect_initial: float = 1.0
    reconnect_max: float = 30.0
    poll_wait: float = 25.0
    poll_limit: int = 100
    sse_read_timeout: float = 60.0
    # A stream that delivered an event or stayed up this long resets the SSE backoff.
    sse_healthy_after: float = 5.0
    attempts: int = 3
    retry_initial: float = 1.0
    retry_max: float = 30.0
    shutdown_grace: float = 15.0
    offline_timeout: float = 3.0
    reply: bool = True
    install_signal_handlers: bool = True


@dataclass
class DaemonStats:
    handled: int = 0
    duplicates: int = 0
    attempts_failed: int = 0
    gave_up: int = 0
    sse_sessions: int = 0
    polls: int = 0
    mode: str = "starting"
    extra: dict[str, Any] = field(default_factory=dict)


class _Stop(Exception):
    """Raised inside the consumer when a stop was requested between steps."""


class FatalError(MeshError):
    """The daemon cannot go on (credentials rejected, agent gone)."""


class Daemon:
    def __init__(self, client: MeshClient, handler: Handler, options: DaemonOptions | None = None) -> None:
        self.client = client
        self.handler = handler
        self.opt = options or DaemonOptions()
        self.stats = DaemonStats()
        self.agent_id: str = ""
        self.state: DaemonState | None = None
        self._stop = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._acked: int | None = None
        self._ack_wanted: int | None = None
        self._ack_signal = asyncio.Event()

    # -- control -------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        if not self._stop.is_set():
            log.info("stop requested: finishing the running handler, then going offline")
            self._stop.set()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, or raise :class:`_Stop` as soon as a stop is requested."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, seconds)):
                await self._stop.wait()
        if self.stopping:
            raise _Stop

    def _set_mode(self, mode: str, message: str, *args: Any) -> None:
        if mode != self.stats.mode:
            log.info("inbox: " + message, *args)
        self.stats.mode = mode

    # -- main ----------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        if self.opt.install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_stop)
        try:
            try:
                await self._start()
            except _Stop:
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
                await self._sleep(delay)
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
                acked = (await self.client.me()).get("acked_seq")
                if isinstance(acked, int):
                    state.cursor = acked
            log.info("no saved cursor; starting after the gateway's acked seq %s", state.cursor)
        else:
            log.info("resuming after seq %d (state %s)", state.cursor, state.path)
        self._acked = None
        state.save()

    async def _serve(self) -> int:
        assert self.state is not None
        heartbeat = asyncio.create_task(self._heartbeat_loop(), name="meshd-heartbeat")
        refresher = asyncio.create_task(self._token_loop(), name="meshd-token")
        acker = asyncio.create_task(self._ack_loop(), name="meshd-ack")
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
                log.info("waiting up to %.0fs for the running handler", self.opt.shutdown_grace)
                try:
                    async with asyncio.timeout(self.opt.shutdown_grace):
                        await self._idle.wait()
                except TimeoutError:
                    log.warning(
                        "handler still running after the grace period; it is stopped "
                        "and its event runs again on the next start"
                    )
            for task in (consumer, heartbeat, refresher, acker, stop_wait):
                task.cancel()
            for task in (consumer, heartbeat, refresher, acker, stop_wait):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            # 2. tell the gateway, 3. flush state
            await self._go_offline()
            self.state.save()
            log.info(
                "stopped: %d handled, %d duplicates skipped, %d gave up; cursor %s",
                self.stats.handled,
                self.stats.duplicates,
                self.stats.gave_up,
                self.state.cursor,
            )
        return code

    async def _go_offline(self) -> None:
        assert self.state is not None
        try:
            async with asyncio.timeout(self.opt.offline_timeout):
                cursor = self.state.cursor
                if cursor is not None and (self._acked is None or self._acked < cursor):
                    with contextlib.suppress(MeshError):
                        await self.client.ack(cursor)
                await self.client.go_offline()
            log.info("agent %s is now draining", self.agent_id)
        except (MeshError, TimeoutError) as e:
            log.warning("could not tell the gateway we are going offline: %s", e)

    # -- background loops ----------------------------------------------------
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

    # -- receiving -----------------------------------------------------------
    async def _consume(self) -> None:
        try:
            await self._flush_pending()
            await self._consume_loop()
        except _Stop:
            return

    async def _consume_loop(self) -> None:
        assert self.state is not None
        sse_backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        net_backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        next_sse = 0.0
        while not self.stopping:
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
                    await self._sleep(delay)
                    continue
                delay = sse_backoff.next()
                next_sse = time.monotonic() + delay
                self._set_mode(
                    "poll", "SSE unavailable (%s); long-polling, SSE again in %.1fs", reason, delay
                )
            await self._poll_round(next_sse, net_backoff)

    async def _sse_session(self) -> tuple[bool, bool, str]:
        """One SSE connection. Returns (closed cleanly, was healthy, reason)."""
        assert self.state is not None
        started = time.monotonic()
        got_event = False
        self.stats.sse_sessions += 1
        stream = self.client.stream(
            self.state.cursor,
            read_timeout=self.opt.sse_read_timeout,
            on_open=lambda: self._set_mode("sse", "following the SSE stream after seq %s", self.state.cursor),
        )
        try:
            async for event in stream:
                got_event = True
                await self._process(event)
                if self.stopping:
                    raise _Stop
            reason, clean = "closed by the gateway", True
        except (AuthError, ForbiddenError) as e:
            raise FatalError(f"the gateway refused this agent's inbox: {e}") from e
        except MeshHTTPError as e:
            reason, clean = str(e), False
        except MeshConnectionError as e:
            reason, clean = str(e), False
        except ValueError as e:  # a malformed event on the stream
            reason, clean = f"bad event on the stream: {e}", False
        finally:
            await stream.aclose()
        healthy = got_event or time.monotonic() - started >= self.opt.sse_healthy_after
        return clean, healthy, reason

    async def _poll_round(self, next_sse: float, backoff: Backoff) -> None:
        assert self.state is not None
        wait = self.opt.poll_wait
        if self.opt.transport == "auto":
            wait = min(wait, max(1.0, next_sse - time.monotonic()))
        self.stats.polls += 1
        try:
            page = await self.client.poll_inbox(
                self.state.cursor, wait=round(wait), limit=self.opt.poll_limit
            )
        except (AuthError, ForbiddenError) as e:
            raise FatalError(f"the gateway refused this agent's inbox: {e}") from e
        except MeshError as e:
            delay = backoff.next()
            self._set_mode("down", "gateway unreachable (%s); retrying in %.1fs", e, delay)
            await self._sleep(delay)
            return
        backoff.reset()
        if self.stats.mode != "poll":
            self._set_mode("poll", "long-polling after seq %s", self.state.cursor)
        for event in page.events:
            await self._process(event)
            if self.stopping:
                raise _Stop

    # -- processing ------------------------------------------------------------
    async def _process(self, event: InboxEvent) -> None:
        """Handle one delivered event, keeping strict seq order."""
        state = self.state
        assert state is not None
        if state.cursor is not None and event.seq > state.cursor + 1:
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
        assert state is not None
        if self.stopping:
            raise _Stop
        self._idle.clear()
        try:
            reply = await self._run_handler(event)
            if reply is not None and self.opt.reply and event.task_id:
                if event.type in REPLY_TYPES:
                    state.pending.append(self._reply_action(event, reply))
                else:
                    log.info("handler output for %s event ignored (no reply)", event.type)
            state.record(event.seq, event.event_id)
            state.save()
            self.stats.handled += 1
            await self._flush_pending()
            self._ack(event.seq)
        finally:
            self._idle.set()

    async def _run_handler(self, event: InboxEvent) -> Reply:
        backoff = Backoff(self.opt.retry_initial, self.opt.retry_max)
        error: HandlerError | None = None
        for attempt in range(1, self.opt.attempts + 1):
            ctx = HandlerContext(client=self.client, agent_id=self.agent_id, attempt=attempt)
            try:
                return await self.handler(event, ctx)
            except HandlerError as e:
                error = e
                self.stats.attempts_failed += 1
                if attempt < self.opt.attempts:
                    delay = backoff.next()
                    log.warning(
                        "handler failed on seq %d (attempt %d/%d): %s; retrying in %.1fs",
                        event.seq,
                        attempt,
                        self.opt.attempts,
                        e,
                        delay,
                    )
                    await self._sleep(delay)
        assert error is not None
        self.stats.gave_up += 1
        log.error(
            "handler failed %d times on seq %d (%s); giving up on it",
            self.opt.attempts,
            event.seq,
            event.type,
        )
        if event.task_id:
            assert self.state is not None
            self.state.pending.append({"kind": "fail", "task_id": event.task_id, "error": str(error)[:4000]})
        return None

    def _reply_action(self, event: InboxEvent, reply: Reply) -> dict[str, Any]:
        parts = [text_part(reply)] if isinstance(reply, str) else reply
        # The same event always yields the same reply id: a re-run after a crash in
        # the instant between handler and state write is recognised by the gateway.
        message_id = derived_message_id(self.agent_id, event.event_id, unix_ms=_unix_ms(event.created_at))
        return {
            "kind": "reply",
            "task_id": event.task_id,
            "message_id": message_id,
            "parts": parts,
            "seq": event.seq,
        }

    # -- outgoing --------------------------------------------------------------
    async def _flush_pending(self) -> None:
        """Deliver the replies/failures recorded in the state file, oldest first."""
        state = self.state
        assert state is not None
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        while state.pending:
            action = state.pending[0]
            try:
                await self._deliver(action)
            except (MeshConnectionError, ServerError, RateLimitedError) as e:
                delay = backoff.next()
                log.warning("could not deliver %s (%s); retrying in %.1fs", action["kind"], e, delay)
                await self._sleep(delay)
                continue
            except AuthError as e:
                raise FatalError(f"the gateway rejected this agent's credentials: {e}") from e
            except MeshHTTPError as e:
                log.error("dropped %s on task %s: %s", action["kind"], action.get("task_id"), e)
            # Not saved right away: delivery is idempotent (same message_id), so if this
            # pop is lost to a crash the reply is just sent again and recognised.
            state.pending.pop(0)

    async def _deliver(self, action: dict[str, Any]) -> None:
        if action["kind"] == "reply":
            try:
                await self.client.reply(
                    action["task_id"], parts=action["parts"], message_id=action["message_id"]
                )
            except ConflictError as e:
                log.warning("reply to task %s not stored: %s", action["task_id"], e)
        elif action["kind"] == "fail":
            await self._fail_task(action["task_id"], action["error"])

    async def _fail_task(self, task_id: str, error: str) -> None:
        try:
            task = await self.client.get_task(task_id)
        except NotFoundError:
            return
        if task.terminal:
            return
        if task.serving_agent and task.serving_agent != self.agent_id:
            log.warning("not failing task %s: %s serves it, not us", task_id, task.serving_agent)
            return
        note = f"handler failed: {error}"
        try:
            if task.state in ("submitted", "input-required"):
                await self.client.set_status(task_id, "working")
            await self.client.set_status(task_id, "failed", note)
            log.info("task %s set to failed", task_id)
        except ConflictError as e:
            log.warning("could not fail task %s: %s", task_id, e)

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


def _unix_ms(created_at: str | None) -> int:
    if not created_at:
        return 0
    try:
        return int(datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0
