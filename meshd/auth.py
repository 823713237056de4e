"""Bearer tokens for the SDK: from an API key (refreshed) or given as-is.

With an API key the token is exchanged at ``POST /v1/auth/token`` and refreshed
at TTL × 2/3 (± 5 % jitter, so a fleet of daemons started together does not
refresh together), and again whenever the gateway answers 401.
A static token (an owner's login token, acting as ``human@{username}``) cannot
be refreshed: a 401 is final.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from meshd.models import TokenInfo

REFRESH_FRACTION = 2 / 3
REFRESH_JITTER = 0.05


def refresh_delay(ttl: float, *, rng: random.Random | None = None) -> float:
    """Seconds after issue at which a token of lifetime ``ttl`` is renewed."""
    r = rng or random
    return ttl * REFRESH_FRACTION * r.uniform(1 - REFRESH_JITTER, 1 + REFRESH_JITTER)


class TokenSource:
    def __init__(
        self,
        fetch: Callable[[], Awaitable[TokenInfo]] | None,
        *,
        static_token: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if fetch is None and static_token is None:
            raise ValueError("TokenSource needs an API key fetcher or a static token")
        self._fetch = fetch
        self._token = static_token
        self._refresh_at: float | None = None
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self.info: TokenInfo | None = None
        self.refreshes = 0

    @property
    def can_refresh(self) -> bool:
        return self._fetch is not None

    @property
    def refresh_at(self) -> float | None:
        return self._refresh_at

    def _due(self) -> bool:
        if self._token is None:
            return True
        return self._refresh_at is not None and self._clock() >= self._refresh_at

    async def token(self) -> str:
        if self._due() and self._fetch is not None:
            async with self._lock:
                if self._due():
                    await self._renew()
        assert self._token is not None
        return self._token

    async def refresh(self, stale: str | None = None) -> str:
        """Renew now — unless another caller already replaced ``stale``."""
        if self._fetch is None:
            assert self._token is not None
            return self._token
        async with self._lock:
            if stale is None or self._token == stale:
                await self._renew()
        assert self._token is not None
        return self._token

    async def _renew(self) -> None:
        assert self._fetch is not None
        info = await self._fetch()
        self.info = info
        self._token = info.access_token
        self.refreshes += 1
        if info.expires_in > 0:
            self._refresh_at = self._clock() + refresh_delay(info.expires_in, rng=self._rng)
        else:
            self._refresh_at = None
