"""What a stream's waiter keeps of the events notices carried (app.delivery.inbox_hub):
all of them in order while every wake-up carried some, nothing once one did not."""

from __future__ import annotations

from app.delivery import protocol as delivery
from app.delivery.inbox_hub import LONG_POLL, OFFER_MAX_BYTES, InboxHub, Waiter
from app.domain.event_wire import WireEvent

AGENT = "b@bob"


def ev(seq: int) -> WireEvent:
    return WireEvent(seq, "task.message", b'{"seq":%d}' % seq)


def test_events_of_several_notices_wait_for_the_next_read_in_order() -> None:
    waiter = Waiter(AGENT, takes_offers=True)
    assert waiter.take_offered() is None  # no notice: the source says what is new
    waiter.wake(events=[ev(1), ev(2)])
    waiter.wake(events=[ev(3)])
    assert waiter.take_offered() == [ev(1), ev(2), ev(3)]
    assert waiter.take_offered() is None  # taken


def test_a_wake_up_that_carried_nothing_makes_the_reader_read() -> None:
    waiter = Waiter(AGENT, takes_offers=True)
    waiter.wake(events=[ev(1)])
    waiter.wake()  # a large event's plain notice, a re-check, a resubscription
    waiter.wake(events=[ev(3)])
    assert waiter.take_offered() is None  # event 2 is known only to the source

    big = WireEvent(1, "task.message", b"x" * (OFFER_MAX_BYTES // 2))
    waiter.wake(events=[big])
    waiter.wake(events=[WireEvent(2, "task.message", big.data)])
    waiter.wake(events=[WireEvent(3, "task.message", b"{}")])  # past what a waiter keeps
    assert waiter.take_offered() is None


async def test_the_hub_hands_carried_events_to_the_readers_that_take_them() -> None:
    hub = InboxHub("redis://unused")  # never started: woken by hand, as by a notice
    carried = delivery.parse_notice(
        delivery.event_notice_carrying(AGENT, [ev(1), ev(2)])).carried
    async with hub.watch(AGENT, takes_offers=True) as stream, \
            hub.watch(AGENT) as other, hub.watch(AGENT, LONG_POLL) as poll:
        hub.wake(AGENT, carried=carried)
        assert stream.take_offered() == [ev(1), ev(2)]
        assert stream.take_woken() and other.take_woken() and poll.take_woken()
        # A reader of Postgres keeps nothing it would not take.
        assert other._offered is None and poll._offered is None

        hub.wake(AGENT, carried=b"not what a notice carries")
        assert stream.take_offered() is None  # unreadable: a plain notice


def test_a_waiter_keeps_the_highest_seq_the_notices_announced() -> None:
    """A large event's notice carries only its seq; the reader reads up to it."""
    head_only = delivery.parse_notice(
        delivery.event_notice_carrying(AGENT, [WireEvent(7, "task.message", b"x" * (
            delivery.CARRY_MAX_BYTES + 1))]))
    assert (head_only.seq, head_only.carried) == (7, b"")
    assert delivery.parse_notice(delivery.event_notice_carrying(AGENT, [ev(1), ev(2)])).seq == 2
    assert delivery.parse_notice(delivery.commit_notice(AGENT)).seq == 0
    assert delivery.parse_notice(f"{AGENT} \u00b2".encode()).seq == 0  # a digit, not a seq

    waiter = Waiter(AGENT, takes_offers=True)
    assert waiter.take_announced() == 0
    waiter.wake(seq=head_only.seq)
    waiter.wake(seq=3)  # notices from two processes may cross
    waiter.wake()
    assert waiter.take_announced() == 7
    assert waiter.take_announced() == 0  # taken
