import asyncio
import random

from meshd.auth import TokenSource, refresh_delay
from meshd.models import TokenInfo


def test_refresh_at_two_thirds_of_ttl_within_five_percent():
    rng = random.Random(1)
    delays = [refresh_delay(900, rng=rng) for _ in range(1000)]
    assert all(600 * 0.95 <= d <= 600 * 1.05 for d in delays)
    assert max(delays) - min(delays) > 30  # spread, not a constant


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_token_renewed_when_due_and_fetched_once_under_concurrency():
    clock = Clock()
    fetched = []

    async def fetch() -> TokenInfo:
        fetched.append(clock.now)
        await asyncio.sleep(0)
        return TokenInfo.from_json({"access_token": f"t{len(fetched)}", "expires_in": 90})

    src = TokenSource(fetch, clock=clock, rng=random.Random(3))
    tokens = await asyncio.gather(*(src.token() for _ in range(20)))
    assert set(tokens) == {"t1"} and len(fetched) == 1
    assert 60 * 0.95 <= src.refresh_at - clock.now <= 60 * 1.05

    clock.now += 50
    assert await src.token() == "t1"
    clock.now += 15
    assert await src.token() == "t2"


async def test_refresh_after_401_renews_once_for_concurrent_callers():
    n = 0

    async def fetch() -> TokenInfo:
        nonlocal n
        n += 1
        return TokenInfo.from_json({"access_token": f"t{n}", "expires_in": 3600})

    src = TokenSource(fetch)
    stale = await src.token()
    results = await asyncio.gather(*(src.refresh(stale) for _ in range(5)))
    assert set(results) == {"t2"} and n == 2


async def test_static_token_is_never_refreshed():
    src = TokenSource(None, static_token="owner-token")
    assert not src.can_refresh
    assert await src.token() == "owner-token"
    assert await src.refresh("owner-token") == "owner-token"
