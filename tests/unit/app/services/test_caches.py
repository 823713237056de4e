"""The web path caches (app.platform.cache, app.services.principal_cache, reach_cache) on
their own: bounds, expiry on a hand-moved clock, notices, and the race of an
invalidation against a lookup in flight. The loaders are the caches' own
seam (what Postgres would answer), counted to see what was served from memory."""

from __future__ import annotations

import asyncio
import time

from app.delivery.protocol import Notice, parse_notice, reach_notice
from app.domain.ids import is_valid_id
from app.domain.permissions import Relationship
from app.platform.cache import BoundedCache
from app.services.principal_cache import PrincipalCache
from app.services.principals import Agent, Owner
from app.services.reach_cache import ReachCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bounded_by_size_least_recently_used_goes_first() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2, 60)
    cache.put("a", 1, cache.generation(), tag="x")
    cache.put("b", 2, cache.generation(), tag="x")
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3, cache.generation(), tag="y")
    assert len(cache) == 2
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3


def test_entries_expire_after_the_ttl_or_a_shorter_one() -> None:
    clock = Clock()
    cache: BoundedCache[str, int] = BoundedCache(10, 60, clock=clock)
    cache.put("long", 1, cache.generation(), tag="t")
    cache.put("short", 2, cache.generation(), tag="t", ttl=5)
    clock.now += 5
    assert cache.get("short") is None and cache.get("long") == 1
    clock.now += 55
    assert cache.get("long") is None and len(cache) == 0


def test_entries_loaded_together_expire_spread_over_the_second_half_of_the_ttl() -> None:
    clock = Clock()
    draws = iter([0.0, 0.5, 0.999])
    cache: BoundedCache[str, int] = BoundedCache(10, 60, clock=clock, uniform=lambda: next(draws))
    for key in ("full", "three-quarters", "half"):
        cache.put(key, 1, cache.generation(), tag="t")
    clock.now += 29.9  # no entry lives less than half the TTL
    assert len([k for k in ("full", "three-quarters", "half") if cache.get(k)]) == 3
    clock.now += 0.2
    assert cache.get("half") is None and cache.get("three-quarters") == 1
    clock.now += 15
    assert cache.get("three-quarters") is None and cache.get("full") == 1
    clock.now += 15  # and none outlives the TTL: the bound on a lost notice
    assert cache.get("full") is None


def test_a_tokens_own_expiry_shortens_the_spread_lifetime_never_lengthens_it() -> None:
    clock = Clock()
    cache: BoundedCache[str, int] = BoundedCache(10, 60, clock=clock, uniform=lambda: 0.999)
    cache.put("token", 1, cache.generation(), tag="t", ttl=3600)
    clock.now += 30.1
    assert cache.get("token") is None


def test_drop_tag_drops_only_that_tag_and_disabled_serves_nothing() -> None:
    up = True
    cache: BoundedCache[str, int] = BoundedCache(10, 60, enabled=lambda: up)
    cache.put("a1", 1, cache.generation(), tag="a")
    cache.put("b1", 2, cache.generation(), tag="b")
    cache.drop_tag("a")
    assert cache.get("a1") is None and cache.get("b1") == 2
    up = False  # the hub lost its subscription: notices may be missed
    assert cache.get("b1") is None
    cache.put("c1", 3, cache.generation(), tag="c")
    up = True
    assert cache.get("c1") is None and cache.get("b1") == 2


def test_zero_entries_or_ttl_is_no_cache() -> None:
    for cache in (BoundedCache[str, int](0, 60), BoundedCache[str, int](10, 0)):
        cache.put("a", 1, cache.generation(), tag="a")
        assert cache.get("a") is None


AGENT = Agent("a@alice", 7, "normal", "k1", expires_at=time.time() + 3600)


class Loader:
    """What Postgres would answer, counted; ``gate`` holds a lookup in flight."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.calls = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self) -> object:
        self.calls += 1
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        return self.value


class PairLoader(Loader):
    """The reach cache's loader: one answer per pair asked, the pairs kept."""

    def __init__(self, value: Relationship) -> None:
        super().__init__(value)
        self.asked: list[list[tuple[str, str]]] = []

    async def __call__(self, pairs: list[tuple[str, str]]) -> list[Relationship]:  # type: ignore[override]
        self.asked.append(pairs)
        return [await super().__call__()] * len(pairs)


async def test_a_resolved_token_is_served_from_memory_until_its_agent_is_noticed() -> None:
    cache = PrincipalCache(100, 600)
    load = Loader(AGENT)
    assert await cache.resolve("tok", load) == AGENT
    assert await cache.resolve("tok", load) == AGENT
    assert load.calls == 1
    cache.notice(Notice("b@bob", "auth"))  # someone else's credentials
    cache.notice(Notice("a@alice", "event"))  # an event notice, not a credential one
    await cache.resolve("tok", load)
    assert load.calls == 1
    cache.notice(parse_notice(b"a@alice auth"))
    await cache.resolve("tok", load)
    assert load.calls == 2


async def test_an_expired_token_is_not_served_from_memory() -> None:
    """An entry lives no longer than its token (whatever the TTL): one already
    past its ``exp`` is not kept, so the full check words the 401 each time."""
    cache = PrincipalCache(100, 600)
    load = Loader(Agent("a@alice", 7, "normal", "k1", expires_at=time.time() - 1))
    await cache.resolve("tok", load)
    await cache.resolve("tok", load)
    assert load.calls == 2


async def test_a_notice_during_a_lookup_keeps_the_stale_answer_out() -> None:
    """The lookup read the key as live, the revocation's notice came before it
    returned: what it read must not be cached."""
    cache = PrincipalCache(100, 600)
    load = Loader(AGENT)
    load.gate = asyncio.Event()
    lookup = asyncio.create_task(cache.resolve("tok", load))
    await load.entered.wait()
    cache.notice(Notice("a@alice", "auth"))
    load.gate.set()
    assert await lookup == AGENT  # this request began before the revocation
    load.gate = None
    await cache.resolve("tok", load)
    assert load.calls == 2  # …but the next one asks again


async def test_a_resubscribe_drops_everything() -> None:
    rel = Relationship(friends=True, shares_group=False, same_owner=False,
                       either_virtual_user=False)
    load_rel = PairLoader(rel)
    principals, reach = PrincipalCache(100, 600), ReachCache(100, 600, load_rel)
    owner = Owner(1, "alice", False, expires_at=time.time() + 3600)
    load_owner = Loader(owner)
    await principals.resolve("owner-token", load_owner)
    await reach.relationship("a", "b")
    principals.reset()
    reach.reset()
    await principals.resolve("owner-token", load_owner)
    await reach.relationship("a", "b")
    assert (load_owner.calls, load_rel.calls) == (2, 2)


async def test_relationships_are_dropped_by_a_reach_or_credential_notice() -> None:
    load = PairLoader(Relationship(friends=True, shares_group=False, same_owner=False,
                                   either_virtual_user=False))
    reach = ReachCache(100, 600, load)
    await reach.relationship("a", "b")
    await reach.relationship("a", "b")
    assert load.calls == 1
    reach.notice(Notice("a", "event"))  # an event for a: nothing changed
    await reach.relationship("a", "b")
    assert load.calls == 1
    reach.notice(parse_notice(reach_notice().encode()))
    await reach.relationship("a", "b")
    assert load.calls == 2
    reach.notice(Notice("zz", "auth"))  # an agent deleted: it may have been anyone's peer
    await reach.relationship("a", "b")
    assert load.calls == 3


async def test_a_pair_with_a_missing_agent_is_not_kept() -> None:
    load = PairLoader(Relationship(friends=False, shares_group=False, same_owner=False,
                                   either_virtual_user=False, both_exist=False))
    reach = ReachCache(100, 600, load)
    await reach.relationship("a", "later")
    await reach.relationship("a", "later")
    assert load.calls == 2


async def test_misses_that_meet_share_one_query_and_a_change_keeps_them_out() -> None:
    load = PairLoader(Relationship(friends=True, shares_group=False, same_owner=False,
                                   either_virtual_user=False))
    reach = ReachCache(100, 600, load)
    load.gate = asyncio.Event()
    first = asyncio.create_task(reach.relationship("s0", "r"))
    await load.entered.wait()  # the first miss is asked alone, at once
    rest = [asyncio.create_task(reach.relationship(f"s{i}", "r")) for i in range(1, 40)]
    await asyncio.sleep(0)
    # A reach change while the misses wait: their answers may predate it.
    reach.notice(parse_notice(reach_notice().encode()))
    load.gate.set()
    await asyncio.gather(first, *rest)
    assert sorted(len(pairs) for pairs in load.asked) == [1, 1, 38]  # two slots, then one query
    assert [p for pairs in load.asked for p in pairs] == [(f"s{i}", "r") for i in range(40)]
    load.gate = None
    await asyncio.gather(*(reach.relationship(f"s{i}", "r") for i in range(40)))
    assert sum(len(pairs) for pairs in load.asked) == 80  # none of them was kept…
    await asyncio.gather(*(reach.relationship(f"s{i}", "r") for i in range(40)))
    assert sum(len(pairs) for pairs in load.asked) == 80  # …the answers after it are


def test_the_reach_notice_wakes_no_agent() -> None:
    notice = parse_notice(reach_notice().encode())
    assert notice.kind == "reach"
    assert not is_valid_id(notice.agent_id)
