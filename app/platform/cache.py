"""A bounded in-process cache for facts that rarely change, dropped by notices.

Entries are evicted least-recently-used past ``max_entries`` and expire after
``ttl`` seconds (a safety net: the notices are what keeps entries right). Each
entry carries a tag (the agent it is about) so one notice drops only its own.

Loads race with invalidations: a lookup reads Postgres, a notice arrives
while it waits, then the lookup would store what it read before the change.
So every invalidation bumps a generation counter, a load notes the generation
before it reads (:meth:`BoundedCache.generation`), and :meth:`BoundedCache.put`
stores nothing when it moved meanwhile. ``enabled()`` false (the notice
subscription is down, so notices may be lost) bypasses the cache entirely.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _always() -> bool:
    return True


class BoundedCache(Generic[K, V]):
    def __init__(self, max_entries: int, ttl: float, *,
                 enabled: Callable[[], bool] = _always,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_entries
        self._ttl = ttl
        self._enabled = enabled
        self._clock = clock
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
        noted (the value may predate it). ``ttl`` shortens the default one."""
        if generation != self._generation or not self.active:
            return
        lifetime = self._ttl if ttl is None else min(ttl, self._ttl)
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
