"""What the daemon does with one event once it is due: run the handler, then post its results.

The handler is tried ``attempts`` times with backoff. Its reply, or the failure of
the task after the last attempt, becomes a *pending action* stored in the state
file together with the event's progress, and is posted from there
(:class:`Outbox`): so a crash neither re-runs a handler that succeeded nor
loses or doubles its reply. Posting is idempotent — a reply's ``message_id`` is
derived from the event — so an action is simply posted again after a restart.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from meshd.backoff import Backoff
from meshd.client import MeshClient
from meshd.daemon.handlers import Handler, HandlerContext, HandlerError, Reply
from meshd.daemon.run_reports import RunReports
from meshd.daemon.state import DaemonState
from meshd.errors import (
    AuthError,
    ConflictError,
    FatalError,
    MeshConnectionError,
    MeshHTTPError,
    NotFoundError,
    RateLimitedError,
    ServerError,
)
from meshd.ids import derived_message_id
from meshd.models import InboxEvent, Part, Task, text_part
from meshd.options import DaemonOptions, StopSignal

log = logging.getLogger("meshd.daemon")


async def run_with_retries(
    handler: Handler,
    event: InboxEvent,
    client: MeshClient,
    agent_id: str,
    opt: DaemonOptions,
    stop: StopSignal,
    reports: RunReports | None = None,
) -> Reply:
    """The handler's reply; after ``opt.attempts`` failures, the last :class:`HandlerError`."""
    backoff = Backoff(opt.retry_initial, opt.retry_max)
    for attempt in range(1, opt.attempts + 1):
        try:
            return await handler(event, HandlerContext(client=client, agent_id=agent_id,
                                                       attempt=attempt, reports=reports))
        except HandlerError as e:
            if attempt == opt.attempts:
                raise
            delay = backoff.next()
            log.warning(
                "handler failed on seq %d (attempt %d/%d): %s; retrying in %.1fs",
                event.seq,
                attempt,
                opt.attempts,
                e,
                delay,
            )
            await stop.sleep(delay)
    raise AssertionError("attempts must be at least 1")


def reply_action(agent_id: str, event: InboxEvent, reply: str | list[Part]) -> dict[str, Any]:
    parts = [text_part(reply)] if isinstance(reply, str) else reply
    # The same event always yields the same reply id: a re-run after a crash in
    # the instant between handler and state write is recognised by the gateway.
    unix_ms = int(datetime.fromisoformat(event.created_at).timestamp() * 1000)
    return {
        "kind": "reply",
        "task_id": event.task_id,
        "message_id": derived_message_id(agent_id, event.event_id, unix_ms=unix_ms),
        "parts": parts,
        "seq": event.seq,
    }


def fail_action(task_id: str, error: HandlerError) -> dict[str, Any]:
    return {"kind": "fail", "task_id": task_id, "error": str(error)[:4000]}


async def set_failed(
    client: MeshClient,
    task: Task,
    message: str | None = None,
    *,
    parts: list[Part] | None = None,
    message_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> None:
    """Move ``task``, which we serve, to ``failed``: through ``working`` where the direct move is illegal."""
    # `submitted → failed` is not a legal move; `input-required → failed` neither.
    if task.state in ("submitted", "input-required"):
        await client.set_status(task.task_id, "working")
    await client.set_status(task.task_id, "failed", message, parts=parts, message_id=message_id,
                            metadata=metadata)


class Outbox:
    """Posts the pending actions in ``state``, oldest first, until none is left."""

    def __init__(
        self, client: MeshClient, state: DaemonState, agent_id: str, opt: DaemonOptions, stop: StopSignal
    ) -> None:
        self.client = client
        self.state = state
        self.agent_id = agent_id
        self.opt = opt
        self.stop = stop

    async def flush(self) -> None:
        backoff = Backoff(self.opt.reconnect_initial, self.opt.reconnect_max)
        pending = self.state.pending
        while pending:
            action = pending[0]
            try:
                await self._deliver(action)
            except (MeshConnectionError, ServerError, RateLimitedError) as e:
                delay = backoff.next()
                log.warning("could not deliver %s (%s); retrying in %.1fs", action["kind"], e, delay)
                await self.stop.sleep(delay)
                continue
            except AuthError as e:
                raise FatalError(f"the gateway rejected this agent's credentials: {e}") from e
            except MeshHTTPError as e:
                log.error("dropped %s on task %s: %s", action["kind"], action["task_id"], e)
            # Not saved right away: delivery is idempotent (same message_id), so if this
            # pop is lost to a crash the reply is just sent again and recognised.
            pending.pop(0)

    async def _deliver(self, action: dict[str, Any]) -> None:
        if action["kind"] == "reply":
            try:
                await self.client.reply(
                    action["task_id"], parts=action["parts"], message_id=action["message_id"]
                )
            except ConflictError as e:  # the task ended meanwhile, or a re-run answered differently
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
        if task.serving_agent != self.agent_id:
            log.warning("not failing task %s: %s serves it, not us", task_id, task.serving_agent)
            return
        try:
            await set_failed(self.client, task, f"handler failed: {error}")
            log.info("task %s set to failed", task_id)
        except ConflictError as e:
            log.warning("could not fail task %s: %s", task_id, e)
