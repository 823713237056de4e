"""The one way to write inbox events: a unit of work that wakes the relay after commit.

Every code path that appends inbox events or re-queues outbox rows — HTTP
handlers, cron, admin, whatever comes next — opens ``async with writes(pool,
wakeup) as tx`` and appends through ``tx``. The unit of work records that the
outbox changed and, only once the transaction has committed, wakes the relay:

* through ``wakeup`` (the web process's coalescing :class:`app.delivery.after_commit.AfterCommit`),
  so a burst of commits costs a handful of rounds, not one each. It is also told
  which agents received events, and publishes their commit notices (ADR 021): a
  long-poll parked on any web process answers from Postgres right after the
  commit instead of after relay → bus → push worker. It is handed the committed
  inbox rows too (up to :data:`CARRY_MAX_EVENTS` per unit of work), whose events
  the notices carry to the recipients' open streams (ADR 065);
* or, where no such waker runs (cron, scripts), with one direct NOTIFY on the same
  connection, outside the transaction (a NOTIFY inside it would serialise commits
  on Postgres's notification lock — see app.delivery.after_commit). No commit notice then:
  long-polls wake from the push worker's notice, as before.

Other effects that must follow a commit (telling open streams a key was
revoked) are registered with ``tx.after_commit(effect)`` and run the same way.
A write that is one statement (a task's create: task, message, inbox event and
outbox row in one CTE) opens ``writes(..., one_statement=True)``: no BEGIN/COMMIT
round trips, the statement is its own transaction (ADR 028).

A transaction that rolls back (an error, a :class:`app.services.replay.Replay`)
wakes nothing and runs no effect. A wake-up or effect that fails after the commit is
logged, never raised:
the write is durable, and the relay's sweep is the safety net.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from app.platform import tracing
from app.store import events as events_store
from app.store import outbox as outbox_store
from app.store import tasks as tasks_store
from app.store.events import NewEvent, RecipientMissing
from app.store.tasks import NewTask

log = logging.getLogger("mesh.writes")

__all__ = ["Effect", "NewEvent", "NewTask", "RecipientMissing", "Wakeup", "Writes", "writes"]


# The most committed events one unit of work hands its waker to carry: a write to
# many recipients at once (a broadcast) is announced without them, and its
# readers read the stream the push worker writes.
CARRY_MAX_EVENTS = 64


class Wakeup(Protocol):
    def wake(self, recipients: Collection[str] = (),
             written: Sequence[Mapping[str, Any]] = ()) -> None:
        """Non-blocking: the outbox changed; ``recipients`` received inbox events,
        ``written`` are committed inbox rows (:data:`events_store.WRITTEN`) whose
        events the waker may hand their readers."""


Effect = Callable[[], Awaitable[None]]


class Writes:
    """An open write transaction: its connection, and what must happen after commit."""

    def __init__(self, conn: asyncpg.Connection, topic: str | None) -> None:
        self.conn = conn
        self.topic = topic
        self.outbox_changed = False
        self.recipients: set[str] = set()
        # The inbox rows written (:data:`events_store.WRITTEN`), up to
        # CARRY_MAX_EVENTS, for the waker once committed.
        self.written: list[Mapping[str, Any]] = []
        self.effects: list[Effect] = []

    async def append(self, events: Sequence[NewEvent], *, skip_missing: bool = False,
                     message_id: str | None = None) -> list[dict[str, Any]]:
        """``events_store.append`` in this transaction (see there for the arguments)."""
        written = await events_store.append(self.conn, events, topic=self._topic(),
                                            skip_missing=skip_missing, message_id=message_id)
        self._wrote(written)
        return written

    async def create_tasks(self, tasks: Sequence[NewTask]) -> list[int | None]:
        """``tasks_store.create_with_events`` (see there): tasks, their first messages
        and each one's event for its serving agent. Returns each event's seq, None
        where that agent does not exist or the task's context is not the creator's."""
        rows = await tasks_store.create_with_events(self.conn, tasks, topic=self._topic())
        self._wrote(row for row in rows if row is not None)
        return [None if row is None else row["seq"] for row in rows]

    async def add_message(self, event: NewEvent, *, message_id: str, role: str,
                          parts: list[dict[str, Any]], metadata: dict[str, Any] | None,
                          content_hash: str, created_at: datetime) -> int | None:
        """``tasks_store.append_message_with_event`` (see there): a message on an
        open task and ``event`` for its recipient. Returns the event's seq, None if
        nothing was written."""
        row = await tasks_store.append_message_with_event(
            self.conn, event, message_id=message_id, role=role, parts=parts, metadata=metadata,
            content_hash=content_hash, created_at=created_at, topic=self._topic())
        if row is None:
            return None
        self._wrote([row])
        return int(row["seq"])

    def _topic(self) -> str:
        if self.topic is None:
            raise ValueError("this unit of work was opened without a bus topic to append to")
        return self.topic

    def _wrote(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.outbox_changed = True
            self.recipients.add(row["agent_id"])
            if len(self.written) < CARRY_MAX_EVENTS:
                self.written.append(row)

    def requeued(self) -> None:
        """Outbox rows were put back to pending (an admin retry): the relay must look."""
        self.outbox_changed = True

    def after_commit(self, effect: Effect) -> None:
        """Run ``effect`` once this transaction has committed (never on a rollback),
        e.g. telling open streams that a key was revoked."""
        self.effects.append(effect)


@contextlib.asynccontextmanager
async def writes(pool: asyncpg.Pool, *, topic: str | None = None, wakeup: Wakeup | None = None,
                 one_statement: bool = False) -> AsyncIterator[Writes]:
    """``one_statement``: the caller runs exactly one statement through ``tx``, which
    autocommit makes atomic on its own (no transaction block is opened)."""
    async with pool.acquire() as conn:
        tx = Writes(conn, topic)
        with tracing.span("mesh.transaction"):
            if one_statement:
                yield tx
            else:
                async with conn.transaction():
                    yield tx
        if tx.outbox_changed:
            await _wake(conn, wakeup, tx)
    # Outside the connection: an effect (a Redis publish) need not hold one.
    for effect in tx.effects:
        try:
            await effect()
        except Exception as exc:  # the write is durable: a failed effect must not undo a 2xx
            log.warning("an after-commit effect failed (%s: %s); the write stands",
                        type(exc).__name__, exc)


async def _wake(conn: asyncpg.Connection, wakeup: Wakeup | None, tx: Writes) -> None:
    if wakeup is not None:
        try:
            wakeup.wake(tx.recipients, tx.written)
        except Exception as exc:  # the write is durable; the sweep and re-reads catch up
            log.warning("could not wake after a commit (%s: %s)", type(exc).__name__, exc)
        return
    try:
        await outbox_store.wake_relay(conn)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        log.warning("could not wake the relay after a commit (%s); its sweep will find the "
                    "rows", exc)
