"""A bounded in-process cache for facts that rarely change, dropped by notices.

Entries are evicted least-recently-used past ``max_entries`` and expire after
``ttl`` seconds (a safety net: the notices are what keeps entries right). Each
entry carries a tag (the agent it is about) so one notice drops only its own.

An entry lives a random share of the TTL, between half of it and all of it: the
entries loaded together (every sender's first request after a start, or after a
quiet minute) would otherwise expire together and be loaded again together — a
burst of Postgres look-ups, every TTL, in the middle of the traffic. The TTL
stays the bound on how long a lost notice can leave an entry wrong.

Loads race with invalidations: a lookup reads Postgres, a notice arrives
while it waits, then the lookup would store what it read before the change.
So every invalidation bumps a generation counter, a load notes the generation
before it reads (:meth:`BoundedCache.generation`), and :meth:`BoundedCache.put`
stores nothing when it moved meanwhile. ``enabled()`` false (the notice
subscription is down, so notices may be lost) bypasses the cache entirely.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _always() -> bool:
    return True


# An entry's lifetime is ttl * (1 - SPREAD * u), u uniform in [0, 1).
SPREAD = 0.5


class BoundedCache(Generic[K, V]):
    def __init__(self, max_entries: int, ttl: float, *,
                 enabled: Callable[[], bool] = _always,
                 clock: Callable[[], float] = time.monotonic,
                 uniform: Callable[[], float] = random.random) -> None:
        self._max = max_entries
        self._ttl = ttl
        self._enabled = enabled
        self._clock = clock
        self._uniform = uniform
        # key -> (value, expires at, tag)
        self._entries: OrderedDict[K, tuple[V, float, str]] = OrderedDict()
        self._by_tag: dict[str, set[K]] = {}
        self._generation = 0

    @property
    def active(self) -> bool:
        return self._max > 0 and self._ttl > 0 and self._enabled()

    def generation(self) -> int:
        """Note this before reading the source; hand it to :meth:`put`."""
        return self._generation

    def get(self, key: K) -> V | None:
        if not self.active:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, expires, _tag = entry
        if self._clock() >= expires:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, generation: int, *, tag: str,
            ttl: float | None = None) -> None:
        """Store ``value`` unless an invalidation came after ``generation`` was
        noted (the value may predate it). ``ttl`` (a token's own expiry) shortens
        the entry's lifetime."""
        if generation != self._generation or not self.active:
            return
        lifetime = self._ttl * (1 - SPREAD * self._uniform())
        if ttl is not None:
            lifetime = min(ttl, lifetime)
        if lifetime <= 0:
            return
        self._remove(key)
        self._entries[key] = (value, self._clock() + lifetime, tag)
        self._by_tag.setdefault(tag, set()).add(key)
        while len(self._entries) > self._max:
            self._remove(next(iter(self._entries)))

    def drop_tag(self, tag: str) -> None:
        self._generation += 1
        for key in self._by_tag.pop(tag, ()):
            self._entries.pop(key, None)

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._by_tag.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _remove(self, key: K) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        keys = self._by_tag.get(entry[2])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_tag[entry[2]]
