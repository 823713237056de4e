"""The SSE stream loop (app.services.inbox_stream) with a fake clock: no
services, no sleeps. The source, the credential check and the receipt
recorder are stand-ins; the hub is the real one (never started: its waiters
are woken by hand, as a Redis notice would)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from app.delivery import protocol as delivery
from app.delivery.inbox_hub import InboxHub, Waiter
from app.domain.event_wire import WireEvent
from app.platform.settings import Settings
from app.services.inbox_stream import KEEP_ALIVE, InboxStream, Recheck, StreamItem
from app.services.principals import Agent

AGENT = "b@bob"
SETTINGS = Settings(sse_keepalive_seconds=15, sse_recheck_seconds=30,
                    sse_auth_recheck_seconds=300)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_800_000_000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.wall

    async def wait(self, waiter: Waiter, timeout: float) -> bool:
        """Woken already → True at once; else the whole timeout passes."""
        self.waits.append(timeout)
        if await waiter.wait(0):
            return True
        self.now += timeout
        self.wall += timeout
        return False


class FakeSource:
    def __init__(self) -> None:
        self.last = 0
        self.more = False  # what the next read says of itself (InboxReader.more)
        self.says_more: list[bool] = []  # ... for the reads after that, in turn
        self.pending: list[WireEvent] = []
        self.reads: list[bool] = []  # from_postgres of each read
        self.offers: list[list[WireEvent] | None] = []  # what each read was offered
        # Runs after the next read comes back empty: what "meanwhile" means here,
        # since the fake clock's wait never suspends.
        self.after_empty_read: Callable[[], None] | None = None

    def add(self, n: int) -> None:
        for _ in range(n):
            seq = self.last + len(self.pending) + 1
            self.pending.append(WireEvent(seq, "task.message", b'{"seq":%d}' % seq))

    async def next_batch(self, *, from_postgres: bool = False,
                         offered: list[WireEvent] | None = None,
                         announced: int = 0) -> list[WireEvent]:
        self.reads.append(from_postgres)
        self.offers.append(offered)
        self.more = self.says_more.pop(0) if self.says_more else False
        out, self.pending = self.pending, []
        if out:
            self.last = out[-1].seq
        elif self.after_empty_read is not None:
            hook, self.after_empty_read = self.after_empty_read, None
            hook()
        return out


class Harness:
    def __init__(self, *, expires_in: float | None = None) -> None:
        self.clock = FakeClock()
        self.source = FakeSource()
        self.hub = InboxHub("redis://unused")
        self.valid = True
        self.auth_checks = 0
        self.delivered: list[list[int]] = []
        expires_at = None if expires_in is None else self.clock.wall + expires_in
        self.stream = InboxStream(self.source, self.hub, SETTINGS,
                                  Agent(AGENT, 1, "normal", "k1", expires_at=expires_at),
                                  still_valid=self.still_valid, delivered=self.record,
                                  clock=self.clock)
        self.items: AsyncIterator[StreamItem] = self.stream.items()

    async def still_valid(self) -> bool:
        self.auth_checks += 1
        return self.valid

    async def record(self, batch: list[WireEvent]) -> None:
        self.delivered.append([e.seq for e in batch])

    async def next(self) -> StreamItem:
        return await anext(self.items)

    async def rest(self) -> list[StreamItem]:
        return [item async for item in self.items]


async def test_events_in_order_then_receipts_for_the_batch() -> None:
    h = Harness()
    h.source.add(3)
    assert [(await h.next()).seq for _ in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
    assert h.delivered == []  # recorded once the batch is handed over, not before
    assert await h.next() is KEEP_ALIVE
    assert h.delivered == [[1, 2, 3]]
    await h.items.aclose()
    assert h.hub.watching() == 0  # the waiter is gone with the stream


async def test_a_drained_read_waits_for_the_next_notice_instead_of_reading_again() -> None:
    h = Harness()
    h.source.add(1)
    assert (await h.next()).seq == 1  # type: ignore[union-attr]
    assert await h.next() is KEEP_ALIVE
    assert h.source.reads == [False]  # no second read that finds nothing

    h.source.add(1)  # an event and its notice
    h.hub.wake(AGENT)
    assert (await h.next()).seq == 2  # type: ignore[union-attr]
    h.source.add(1)  # the next one, announced while the second is handed over
    h.hub.wake(AGENT)
    assert (await h.next()).seq == 3  # type: ignore[union-attr]
    assert h.source.reads == [False] * 3  # one read per event
    assert h.clock.now == 1015  # only the idle tick passed: the last wait returned at once
    assert h.delivered == [[1], [2]]  # the third is recorded once handed over
    await h.items.aclose()


async def test_a_read_that_may_have_left_events_is_followed_by_another_at_once() -> None:
    h = Harness()
    h.source.add(2)
    h.source.says_more = [True]  # e.g. a full batch: the next read comes before any wait
    assert [(await h.next()).seq for _ in range(2)] == [1, 2]  # type: ignore[union-attr]
    assert await h.next() is KEEP_ALIVE
    assert h.source.reads == [False, False]
    assert h.clock.waits == [15]  # the one wait came after the second (drained) read
    await h.items.aclose()


async def test_the_events_a_notice_carried_are_offered_to_the_next_read() -> None:
    h = Harness()
    assert await h.next() is KEEP_ALIVE
    carried = delivery.parse_notice(delivery.event_notice_carrying(
        AGENT, [WireEvent(1, "task.message", b'{"seq":1}')])).carried
    h.source.add(1)
    h.hub.wake(AGENT, carried=carried)
    assert (await h.next()).seq == 1  # type: ignore[union-attr]
    assert h.source.offers == [None, [WireEvent(1, "task.message", b'{"seq":1}')]]
    await h.items.aclose()


async def test_a_notice_wakes_the_stream_without_a_keep_alive() -> None:
    h = Harness()
    assert await h.next() is KEEP_ALIVE  # idle: one tick passed

    h.source.add(1)  # meanwhile: an event, and its notice
    h.hub.wake(AGENT)
    assert await h.next() == WireEvent(1, "task.message", b'{"seq":1}')
    assert h.clock.waits == [15, 15]
    assert h.clock.now == 1015  # the second wait returned at once (woken)
    await h.items.aclose()


async def test_a_stream_reads_postgres_only_when_the_recheck_says_it_is_behind() -> None:
    h = Harness()
    for _ in range(4):  # 4 ticks of 15 s: no read at all after the catch-up
        assert await h.next() is KEEP_ALIVE
    assert h.source.reads == [False]

    h.source.add(1)  # in Postgres only: no notice, no Redis copy
    h.stream.reread_postgres()  # what the re-check timer does on finding it behind
    assert (await h.next()).seq == 1  # type: ignore[union-attr]
    assert h.source.reads[-1] is True  # read from Postgres, at once (no keep-alive first)
    assert h.clock.now == 1000 + 4 * 15
    await h.items.aclose()


async def test_one_recheck_round_wakes_only_the_streams_postgres_is_ahead_of() -> None:
    asked: list[list[str]] = []

    async def newest(agent_ids: list[str]) -> dict[str, int]:
        asked.append(agent_ids)
        return {AGENT: 5}

    recheck = Recheck(None, 30, newest=newest)
    behind, current = Harness(), Harness()
    behind.source.last, current.source.last = 4, 5
    for h in (behind, current):
        h.stream.recheck = recheck
        assert await h.next() is KEEP_ALIVE  # both idle, registered with the re-check
    await recheck.check()
    assert asked == [[AGENT]]  # one statement for both streams of the agent
    assert behind.stream._reread and not current.stream._reread
    for h in (behind, current):
        await h.items.aclose()
    assert len(recheck._streams) == 0


async def test_the_stream_ends_when_the_token_expires() -> None:
    h = Harness(expires_in=40)
    assert await h.rest() == [KEEP_ALIVE, KEEP_ALIVE, KEEP_ALIVE]
    assert h.clock.waits == [15, 15, 10]  # never waits past the expiry


async def test_a_revocation_notice_ends_the_stream_at_once() -> None:
    h = Harness()
    assert await h.next() is KEEP_ALIVE
    assert h.auth_checks == 0
    h.valid = False
    h.hub.wake(AGENT, auth=True)
    assert await h.rest() == []
    assert h.auth_checks == 1


async def test_a_notice_for_another_agent_is_not_ours() -> None:
    h = Harness()

    def other_agent_event() -> None:
        h.source.add(1)  # not announced to us: only the re-check timer finds it
        h.hub.wake("other@bob")

    h.source.after_empty_read = other_agent_event
    assert await h.next() is KEEP_ALIVE
    assert h.clock.now == 1015  # the whole tick passed
    assert await h.next() is KEEP_ALIVE  # a tick alone reads nothing
    assert h.source.reads == [False]
    h.stream.reread_postgres()
    assert (await h.next()).seq == 1  # type: ignore[union-attr]
    await h.items.aclose()


async def test_credentials_are_rechecked_without_a_notice() -> None:
    h = Harness()
    ticks = 0
    while h.auth_checks == 0:
        assert await h.next() is KEEP_ALIVE
        ticks += 1
    assert ticks * 15 > 300  # after sse_auth_recheck_seconds, not before
    h.valid = False
    assert await h.rest() == [KEEP_ALIVE] * 20  # the next re-check, 300 s later, ends it


async def test_shutdown_ends_the_stream_at_its_next_turn() -> None:
    h = Harness()
    assert await h.next() is KEEP_ALIVE
    h.stream.stop()
    assert await h.rest() == []
    assert h.hub.watching() == 0


async def test_a_client_that_leaves_ends_the_stream_without_a_receipt() -> None:
    h = Harness()

    class LeavingClient:
        """Its waits are the clock's until the client leaves (then None, as
        app.web.sse_response.Client returns on http.disconnect)."""

        gone = False

        async def wait(self, waiter: Waiter, timeout: float) -> bool | None:
            return None if self.gone else await h.clock.wait(waiter, timeout)

    client = LeavingClient()
    h.items = h.stream.items(client)
    assert await h.next() is KEEP_ALIVE

    client.gone = True  # the client leaves as an event arrives
    h.source.add(1)
    h.hub.wake(AGENT)
    assert await h.rest() == []  # nothing handed over, so no receipt recorded
    assert h.delivered == []
    assert h.hub.watching() == 0
