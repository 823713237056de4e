"""Where the relay's claims run, and how each one's transaction ends.

A claim locks its rows in a transaction that lasts until the batch is marked.
The relay's own connection carries its claims: when a batch on it ends, the same
round trip begins the next claim's transaction (ADR 062), so a batch at a trickle
costs two round trips — the claim, and the mark with the ``COMMIT`` and the next
``BEGIN``. A batch claimed while the one before is still being published (ADR 022)
takes a pool connection instead, and ends its transaction as before.
"""

from __future__ import annotations

import contextlib

import asyncpg

from app.platform import db
from app.store import outbox as outbox_store

# How the relay's own claim connection shows in pg_stat_activity (operators leave
# it out of alerts on long idle transactions: it waits with a claim's begun).
CLAIMS_APPLICATION_NAME = "mesh-relay-claims"


class ClaimConnections:
    def __init__(self, pool: asyncpg.Pool, database_url: str) -> None:
        self.pool = pool
        self._url = database_url
        # Free between batches with the next claim's transaction begun (every claim
        # on it ends that way); None until the first claim, and again after a claim
        # on it failed.
        self._own: asyncpg.Connection | None = None
        self._busy = False

    @property
    def own(self) -> asyncpg.Connection | None:
        """The relay's own claim connection, once connected (its session's
        statistics — prepared statements, plans — are the claims')."""
        return self._own

    async def open(self) -> asyncpg.Connection:
        """A connection with a claim's transaction begun: the relay's own when it
        is free (connected on first use), else one of the pool."""
        if self._busy:
            conn = await self.pool.acquire()
        elif self._own is not None:
            self._busy = True
            return self._own  # begun as its last claim ended
        else:
            self._busy = True
            try:
                self._own = conn = await db.connect(self._url, CLAIMS_APPLICATION_NAME)
            except BaseException:
                self._busy = False
                raise
        try:
            await outbox_store.begin_claim(conn)
        except BaseException:
            await self.drop(conn)
            raise
        return conn

    async def end(self, conn: asyncpg.Connection, sent: list[int] | None) -> None:
        """Commit the claim with ``sent`` marked, or roll it back (None). On the
        relay's own connection the same round trip begins the next claim's
        transaction; a relay that stops ends it by closing the connection."""
        own = conn is self._own
        try:
            if sent is None:
                await outbox_store.rollback(conn, begin_next=own)
            else:
                await outbox_store.commit_sent(conn, sent, begin_next=own)
        except BaseException:
            await self.drop(conn)
            raise
        if own:
            self._busy = False
        else:
            await self.pool.release(conn)

    async def drop(self, conn: asyncpg.Connection) -> None:
        """A claim that failed: its rows are claimable again once its transaction
        is gone. The own connection is closed (the next claim connects anew); a
        pool connection is rolled back and released (the pool drops one that
        broke, which ends its transaction just the same)."""
        if conn is self._own:
            self._own, self._busy = None, False
            conn.terminate()
            return
        with contextlib.suppress(Exception):
            await outbox_store.rollback(conn)
        await self.pool.release(conn)

    async def close(self) -> None:
        """Close the own connection, which ends the transaction begun for a next claim."""
        own, self._own = self._own, None
        if own is not None:
            with contextlib.suppress(Exception):
                await own.close()
