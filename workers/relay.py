"""Outbox relay: Postgres ``outbox_events`` → the bus (Kafka or Redis Streams).

A batch is claimed with ``FOR UPDATE SKIP LOCKED`` inside a transaction,
published, and marked in the same transaction — ``sent`` only for the records
the broker acknowledged, a backed-off retry or the dead letter for the rest.
If the relay dies mid-batch the transaction rolls back and the rows are
claimed again: the bus may then carry a record twice, which the push fan-out
drops by seq. While one batch is published and marked the next is claimed and
encoded (see :meth:`Relay.drain`, ADR 022). Claims run on the relay's own
connection, which begins the next claim's transaction in the round trip that
commits the last (ADR 062); a batch claimed ahead takes one from the pool.

The relay wakes on the commits themselves, so delivery never waits for a poll:
the web processes publish theirs on Redis, in the same pipeline as their commit
notices (ADR 029), and every other writer (cron, scripts) sends a ``NOTIFY`` at
commit. The sweep timer only catches retries that come due and wake-ups lost
while a subscription reconnected.

Run: ``python -m workers.relay`` (the Procfile ``outbox`` process), built and
stopped by :mod:`workers.runtime` like the push worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from app.delivery.redis_follow import Channels, follow
from app.platform import db, tracing
from app.platform.metrics import DEAD_LETTERS, OUTBOX_DISPATCH, OUTBOX_PENDING, RELAY_BATCHES
from app.platform.retry import Backoff, Schedule
from app.platform.settings import Settings
from app.store import outbox as outbox_store
from app.store.events import WAKEUP_CHANNEL, relay_wakeup_channel, relay_wakeup_events
from workers import runtime
from workers.bus import Publisher, PublishError, RecordRejected
from workers.relay_claims import ClaimConnections

log = logging.getLogger("mesh.relay")


class Relay:
    def __init__(self, settings: Settings, pool: asyncpg.Pool, publisher: Publisher, *,
                 clock: Callable[[], float] = time.monotonic,
                 hear_commits: bool = False) -> None:
        self.settings = settings
        # Also wake on the web processes' commits on Redis (ADR 029), as the
        # ``outbox`` process does; LISTEN stays for every other writer.
        self._hear_commits = hear_commits
        self.pool = pool
        self.publisher = publisher
        self._claims = ClaimConnections(pool, settings.database_url)
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopping = False
        self._listener: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        self._hear_task: asyncio.Task[None] | None = None
        self._heard = Channels(relay_wakeup_channel(settings.bus_topic))
        # When the last commit notice came, and how long after the one before it:
        # the relay lingers only while commits come closer together than the linger.
        self._clock = clock
        self._noticed_at = -math.inf
        self._notice_gap = math.inf
        self._notice_events = 1  # the inbox events the last wake-up announced
        self.batches = 0
        self.lingers = 0
        self.lingers_to_next = 0  # lingers that waited only for the next wake-up (ADR 060)
        # False after a batch the bus refused entirely: the loop then pauses (with
        # backoff) instead of claiming the next rows and burning their attempts.
        self.bus_healthy = True

    # --- one batch -----------------------------------------------------------------

    async def relay_batch(self) -> int:
        """Claim, publish and mark one batch; return how many rows it held."""
        batch = await self._claim()
        return 0 if batch is None else await self._finish(batch)

    async def _claim(self) -> _Claimed | None:
        """Lock the next due rows in a transaction of their own and encode them;
        None (nothing left open) when no row is due."""
        conn = await self._claims.open()
        try:
            rows = await outbox_store.claim(conn, self.settings.relay_batch_size,
                                           self.settings.bus_topic)
            if rows:
                return _Claimed(conn, rows, [_bus_value(r) for r in rows])
        except BaseException:
            await self._claims.drop(conn)
            raise
        await self._claims.end(conn, None)
        return None

    @property
    def claim_connection(self) -> asyncpg.Connection | None:
        """The relay's own claim connection, once connected."""
        return self._claims.own

    async def _finish(self, batch: _Claimed) -> int:
        """Publish a claimed batch and mark it in its transaction: ``sent`` only
        for the records the broker acknowledged, a backed-off retry or the dead
        letter for the rest."""
        rows = batch.rows
        try:
            results = await self._publish(rows, batch.values)
            sent: list[int] = []
            failed_ids: list[int] = []
            errors: list[str] = []
            dead: list[bool] = []
            for row, result in zip(rows, results, strict=True):
                if result is None:
                    sent.append(row["id"])
                    continue
                failed_ids.append(row["id"])
                errors.append(_describe(result))
                dead.append(not result.retriable
                            or row["attempts"] + 1 >= self.settings.relay_max_attempts)
            await outbox_store.mark_failed_attempts(batch.conn, failed_ids, errors, dead,
                                                    self.settings.relay_retry_base_seconds)
        except BaseException:
            await self._claims.drop(batch.conn)
            raise
        # Counted before the marks commit: whoever sees a batch's rows sent sees it counted.
        self.batches += 1
        RELAY_BATCHES.inc()
        await self._claims.end(batch.conn, sent)
        self.bus_healthy = bool(sent) or not failed_ids
        n_dead = sum(dead)
        OUTBOX_DISPATCH.labels(result="sent").inc(len(sent))
        if failed_ids:
            OUTBOX_DISPATCH.labels(result="retry").inc(len(failed_ids) - n_dead)
            OUTBOX_DISPATCH.labels(result="failed").inc(n_dead)
            log.warning("relay: %d of %d records not acknowledged (%d dead-lettered): %s",
                        len(failed_ids), len(rows), n_dead, errors[0])
        return len(rows)

    async def _publish(self, rows: list[asyncpg.Record],
                       values: list[bytes | PublishError]) -> list[PublishError | None]:
        """Publish each row's bus value. A row that has none fails for good (it
        can never become publishable) instead of failing the batch; the rest flow on."""
        ok = [(r, v) for r, v in zip(rows, values, strict=True) if isinstance(v, bytes)]
        if not ok:
            return list(values)  # type: ignore[arg-type]  # every one a PublishError
        traces = [r["traceparent"] for r, _ in ok]
        # The batch's span and one in each message's trace (ADR 042).
        with tracing.batch("mesh.relay", traces):
            # The outbox id travels as the record's message id (NATS: Nats-Msg-Id,
            # so the broker itself drops a republished row); the trace as a header.
            published = iter(await self.publisher.publish_batch(
                [(r["key"], v) for r, v in ok], msg_ids=[str(r["id"]) for r, _ in ok],
                traceparents=traces))
        return [next(published) if isinstance(v, bytes) else v for v in values]

    async def drain(self) -> int:
        """Relay until no due row is left (or the bus refuses everything).

        Two batches overlap: while one is published and marked, the next is
        claimed (SKIP LOCKED passes over the rows the first holds) and encoded,
        so the relay's CPU work runs during the broker's and Postgres' round
        trips instead of after them. Publishes stay one after the other, in
        claim order, so records of one key reach the bus in outbox order as
        before. A claimed batch that is not to be published (the bus refused
        the one before, or a stop) is rolled back untouched: no attempt spent.
        """
        total = 0
        full = self.settings.relay_batch_size
        ahead: asyncio.Task[_Claimed | None] | None = asyncio.create_task(self._claim())
        try:
            while ahead is not None and not self._stopping:
                batch, ahead = await ahead, None
                if batch is None:
                    break
                if len(batch.rows) >= full:
                    ahead = asyncio.create_task(self._claim())
                total += await self._finish(batch)
                if not self.bus_healthy:
                    break
        finally:
            if ahead is not None:
                await self._give_back(ahead)
        return total

    async def _give_back(self, ahead: asyncio.Task[_Claimed | None]) -> None:
        try:
            batch = await ahead
        except Exception:  # its claim failed: nothing is held
            return
        if batch is not None:
            with contextlib.suppress(Exception):  # a failed rollback drops the connection
                await self._claims.end(batch.conn, None)

    # --- the loop -------------------------------------------------------------------

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def start(self) -> None:
        if self.settings.relay_wakeup:
            self._listen_task = asyncio.create_task(self._listen(), name="relay-listen")
            if self._hear_commits:
                self._hear_task = asyncio.create_task(self._hear(), name="relay-hear-commits")
        self._task = asyncio.create_task(self._run(), name="relay-loop")
        log.info("relay started: bus=%s batch=%d wakeup=%s", self.settings.bus_kind,
                 self.settings.relay_batch_size, self.settings.relay_wakeup)

    async def stop(self) -> None:
        """Finish the batch in flight (its transaction commits or rolls back), then stop."""
        self._stopping = True
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for listening in (self._listen_task, self._hear_task):
            if listening is not None:
                listening.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listening
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self._claims.close()

    async def _run(self) -> None:
        # Both back off only until a stop request: SIGTERM must not wait 15 s.
        backoff = Backoff("relay_db", stop=self._stop, logger=log)
        # Longer than a reconnect: a broker outage should cost a few claims, not
        # a row's whole attempt budget.
        bus_backoff = Backoff("relay_bus", Schedule(base=0.5, cap=15.0), stop=self._stop,
                              logger=log)
        last_gauge = 0.0
        linger = self.settings.relay_linger_ms / 1000
        while not self._stopping:
            if not self.bus_healthy:
                await bus_backoff.wait("the bus acknowledged none of the last batch")
            else:
                bus_backoff.reset()
            if self._wake.is_set() and self._notice_gap < linger:
                # Another commit is due within the linger: one claim, publish and
                # mark for both instead of a round each (ADR 029).
                self.lingers += 1
                await self._linger(linger)
            # Clear before draining: a NOTIFY that arrives mid-drain sets it again
            # and the next round runs at once, so no commit is ever left waiting.
            self._wake.clear()
            try:
                await self.drain()
                backoff.reset()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                await backoff.wait(f"database unavailable ({exc})")
                continue
            except Exception as exc:
                # Whatever it was, a relay that stops relaying while its process
                # looks alive is the worst outcome: log it, back off, go on.
                log.exception("relay: unexpected error")
                await backoff.wait(f"unexpected error {exc!r}")
                continue
            if self._stopping:
                # A stop that came during the linger or the drain: its wake-up was
                # cleared before the drain, so waiting would last the whole sweep.
                break
            now = time.monotonic()
            if now - last_gauge > 5:
                last_gauge = now
                await self._update_gauges()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.relay_sweep_seconds)

    async def _linger(self, linger: float) -> None:
        """Wait for the commits the linger is for.

        Lone sends about one linger apart (a wake-up that announced one event, at
        least half a linger after the one before) make batches of two at most, so
        the relay claims as soon as the next one is noticed: the first send waits
        one gap instead of the whole linger, and the timer's wake-up is not needed.
        Closer commits, and rounds that announced several events, get the whole
        linger, which is what makes batches large under load (ADR 060)."""
        if self._notice_gap < linger / 2 or self._notice_events > 1:
            # The wake-ups that come meanwhile cannot change the claim: they are
            # read when the linger ends, and set the wake for the next round.
            with self._heard.unread():
                await asyncio.sleep(linger)
            return
        self.lingers_to_next += 1
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), linger)

    async def _update_gauges(self) -> None:
        with contextlib.suppress(Exception):
            pending, failed = await outbox_store.open_counts(self.pool)
            OUTBOX_PENDING.set(pending)
            DEAD_LETTERS.set(failed)

    def _noticed(self, *args: object) -> None:
        """A commit's wake-up (a NOTIFY, called with its payload last, or a web
        process's Redis message, called with its body): wake the loop, and note how
        fast commits arrive and how many events the last one announced."""
        now = self._clock()
        self._notice_gap, self._noticed_at = now - self._noticed_at, now
        body = args[-1] if args else b""
        self._notice_events = relay_wakeup_events(body) if isinstance(body, bytes | str) else 1
        self._wake.set()

    async def _listen(self) -> None:
        """Hold a LISTEN connection; reconnect when Postgres goes away."""
        backoff = Backoff("relay_listen", stop=self._stop, logger=log)
        while not self._stopping:
            lost = asyncio.Event()
            try:
                self._listener = await db.connect(self.settings.database_url)
                self._listener.add_termination_listener(lambda _c, lost=lost: lost.set())
                await self._listener.add_listener(WAKEUP_CHANNEL, self._noticed)
                self._wake.set()  # anything committed while we were not listening
                backoff.reset()
                await lost.wait()
                reason = "LISTEN connection lost"
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                reason = f"LISTEN connection failed ({exc})"
            await backoff.wait(reason)


    async def _hear(self) -> None:
        """Follow the web processes' commits of this topic on Redis (meanwhile
        NOTIFYs and the sweep remain); drain once on every (re)subscription."""
        await follow(self.settings.redis_url, self._heard,
                     Backoff("relay_hear_commits", stop=self._stop, logger=log),
                     on_message=self._noticed, on_subscribed=self._wake.set)


@dataclass(slots=True)
class _Claimed:
    """A claimed batch: its rows stay locked until the transaction open on
    ``conn`` ends (outbox_store.commit_sent or rollback)."""

    conn: asyncpg.Connection
    rows: list[asyncpg.Record]
    values: list[bytes | PublishError]


def _bus_value(row: asyncpg.Record) -> bytes | PublishError:
    try:
        value = outbox_store.bus_value(row)
    except (TypeError, ValueError) as exc:  # a row the serializer cannot encode
        return RecordRejected(f"outbox row {row['id']} cannot be encoded: {exc}")
    if value is None:
        return RecordRejected(f"inbox event {row['raw']} not found; nothing to publish")
    return value


def _describe(error: PublishError) -> str:
    return f"{type(error).__name__}: {error}"[:2000]


# --- the process --------------------------------------------------------------------

async def build(rt: runtime.Runtime) -> Relay:
    """The relay of one ``outbox`` process (or test), from its runtime's resources."""
    return Relay(rt.settings, await rt.pool(), await rt.publisher(), hear_commits=True)


def main() -> None:
    runtime.main(build, "outbox")


if __name__ == "__main__":
    main()
