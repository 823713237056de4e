"""The password KDF (argon2) off the event loop, a bounded number at a time.

argon2 is deliberately slow (~0.5 s of a core). In a thread it no longer stalls
the event loop, but a few login loops would still take every core and slow
every other agent's requests; so at most ``concurrency`` hashes run at once per
web process, and callers past ``queue`` waiting are told to come back (503 +
Retry-After) instead of piling up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from app.platform.errors import Problem
from app.platform.settings import Settings
from app.services import security

T = TypeVar("T")


class Kdf:
    def __init__(self, concurrency: int = 1, queue: int = 64) -> None:
        if concurrency < 1 or queue < 0:
            raise ValueError("KDF concurrency must be >= 1 and its queue >= 0")
        self._slots = asyncio.Semaphore(concurrency)
        self.queue = queue
        self._waiting = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Kdf:
        return cls(settings.kdf_concurrency, settings.kdf_queue)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._waiting >= self.queue:
            raise Problem(503, "too many logins and registrations in progress on this server; "
                               "retry in a second", headers={"Retry-After": "1"})
        self._waiting += 1
        try:
            async with self._slots:
                return await asyncio.to_thread(fn, *args)
        finally:
            self._waiting -= 1

    async def hash_password(self, password: str) -> str:
        return await self._run(security.hash_password, password)

    async def verify_password(self, password_hash: str | None, password: str) -> bool:
        return await self._run(security.verify_password, password_hash, password)
