"""Throttling the unauthenticated doors: register, login, API keys.

Every way in meets the same buckets: the API's login and the console's sign-in
form, the token exchange and A2A's ``X-API-Key`` (app.services.accounts'
``login_at``, ``register_at`` and ``agent_by_key``, ADR 032).

The per-agent limiter (app.web.ratelimit) runs after authentication; these routes
are before it, so anyone could try passwords or keys as fast as the gateway
answers (and every login costs an argon2 hash). Buckets here, in Redis so all
web processes share them, keyed by what the caller cannot choose freely:

- ``register`` and ``login`` and ``token``: every attempt, per client address;
- ``login_failures``: failed logins per (username, address) — the back-off an
  attacker at one address runs into, while the owner at another address still
  logs in;
- ``login_failures_account``: failed logins per username from anywhere, a
  looser cap against many addresses guessing one account;
- ``token_failures``: wrong API keys per address, whether sent to the token
  exchange or as A2A's ``X-API-Key``.

Failure buckets are *peeked* before the check (an empty one refuses without
spending a hash) and *taken* from only when the check failed, so an owner who
types the right password is never slowed by the attempts of others beyond the
address buckets. Like app.web.ratelimit, the buckets fail open when Redis is down
(ADR 003): a Redis outage must not lock every owner out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from app.platform.errors import Problem
from app.platform.metrics import AUTH_THROTTLED
from app.platform.settings import Settings
from app.platform.token_bucket import TOKEN_BUCKET_LUA, bucket_args

log = logging.getLogger(__name__)

KEY_PREFIX = "mesh:auth:"

# (rate per second, burst). Failures are what a guesser produces, so their buckets
# are tight. Successful traffic from one address is often many legitimate clients
# (a NAT, a CI runner or test suite creating owners and agents, meshd's token
# refresh), so the per-address buckets only cap a flood: every attempt still costs
# a bounded argon2 hash (app.services.kdf), which is what protects other agents'
# latency. Deployments without open sign-up turn registration off instead.
DEFAULT_LIMITS: dict[str, tuple[float, int]] = {
    "register": (1.0, 30),
    "login": (5.0, 50),
    "login_failures": (1 / 60, 5),
    "login_failures_account": (1 / 10, 30),
    "token": (10.0, 200),
    "token_failures": (0.2, 20),
}


FAIL_OPEN_LOG_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Refusal:
    bucket: str
    retry_after: float


def _digest(value: str) -> str:
    # Usernames and addresses are the caller's input: hashed, they cannot shape
    # key names, and a key's length stays fixed.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class AuthThrottle:
    def __init__(self, redis: aioredis.Redis, settings: Settings, *,
                 timeout: float = 1.0) -> None:
        self.enabled = settings.auth_throttle_enabled
        self.limits = DEFAULT_LIMITS | {k: (float(r), int(b))
                                        for k, (r, b) in settings.auth_limits.items()}
        for name, (rate, burst) in self.limits.items():
            if not rate > 0 or burst < 1:
                raise ValueError(f"auth limit {name!r}: rate must be > 0 and burst >= 1")
        self.timeout = timeout
        self._script = redis.register_script(TOKEN_BUCKET_LUA)
        self._last_warning = -math.inf

    async def _bucket(self, name: str, who: str, cost: int) -> Refusal | None:
        if not self.enabled:
            return None
        rate, burst = self.limits[name]
        try:
            async with asyncio.timeout(self.timeout):
                _, _, allowed, retry_us, _ = await self._script(
                    keys=[f"{KEY_PREFIX}{name}:{_digest(who)}"], args=bucket_args(rate, burst, cost))
        except (RedisError, OSError, TimeoutError) as exc:
            self._warn_fail_open(exc)
            return None
        if int(allowed):
            return None
        return Refusal(name, int(retry_us) / 1e6)

    async def attempt(self, name: str, address: str) -> None:
        """One attempt at ``register``/``login``/``token`` from ``address``."""
        _raise(await self._bucket(name, address, 1))

    async def before_login(self, username: str, address: str) -> None:
        """Refuse (without hashing) while this account is backing off."""
        _raise(await self._bucket("login_failures", f"{username}\n{address}", 0)
               or await self._bucket("login_failures_account", username, 0))

    async def login_failed(self, username: str, address: str) -> None:
        await self._bucket("login_failures", f"{username}\n{address}", 1)
        await self._bucket("login_failures_account", username, 1)

    async def before_token(self, address: str) -> None:
        _raise(await self._bucket("token_failures", address, 0))

    async def token_failed(self, address: str) -> None:
        await self._bucket("token_failures", address, 1)

    def _warn_fail_open(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_warning >= FAIL_OPEN_LOG_INTERVAL_SECONDS:
            self._last_warning = now
            log.warning("auth throttle cannot reach Redis (%s: %s); not throttling logins "
                        "until it is back", type(exc).__name__, exc)


WHY = {
    "register": "too many registrations from your address",
    "login": "too many login attempts from your address",
    "login_failures": "too many failed logins for this account from your address",
    "login_failures_account": "too many failed logins for this account",
    "token": "too many API-key exchanges from your address",
    "token_failures": "too many failed API-key attempts from your address",
}


def _raise(refusal: Refusal | None) -> None:
    if refusal is None:
        return
    AUTH_THROTTLED.labels(bucket=refusal.bucket).inc()
    retry = max(1, math.ceil(refusal.retry_after))
    raise Problem(429, f"{WHY[refusal.bucket]}; retry after {retry} s",
                  headers={"Retry-After": str(retry)}, retry_after=retry)
