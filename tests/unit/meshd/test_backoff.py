import random

import pytest

from meshd.backoff import Backoff, parse_retry_after


def test_doubles_from_initial_to_the_cap():
    b = Backoff(1, 30, jitter=0)
    assert [b.next() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    b.reset()
    assert b.next() == 1


def test_jitter_stays_within_bounds_and_under_the_cap():
    b = Backoff(1, 30, jitter=0.1, rng=random.Random(7))
    for _ in range(200):
        base = b.peek()
        d = b.next()
        assert base * 0.9 <= d <= min(base * 1.1, 30)


def test_rejects_nonsense():
    with pytest.raises(ValueError):
        Backoff(0, 1)
    with pytest.raises(ValueError):
        Backoff(2, 1)


def test_retry_after_seconds_and_http_date():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
