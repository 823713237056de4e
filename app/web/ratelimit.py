"""Per-agent token bucket in Redis: default 50 req/s, burst 100.

One Lua script does read-refill-take-write atomically, so any number of web
processes share one bucket per agent without races. The requests that meet on
one web process take their tokens in one script call (app.platform.coalescer):
one round trip while another is out, not one each. The script reads the clock
with Redis ``TIME``: every process then measures refill on the same clock, and
a web host whose clock is skewed cannot mint or withhold tokens.

A route listed in ``settings.ratelimit_routes`` (key ``"METHOD /path/template"``)
gets its own bucket with its own rate and burst; every other route draws from
the agent's default bucket.

If Redis cannot be reached the limiter fails OPEN (see
``docs/decisions/003-rate-limiting.md``): the request is allowed and a warning
is logged at most once every few seconds.

The HTTP layer calls :func:`enforce` from middleware (it returns the 429
response to send) or :func:`require` from a handler dependency (it raises the
429 as an ``app.platform.errors.Problem``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.responses import Response

from app.delivery.protocol import CACHE_EPOCH_KEY
from app.platform.coalescer import Coalescer
from app.platform.errors import Problem, problem_response
from app.platform.metrics import RATELIMIT_REJECTED
from app.platform.settings import Settings
from app.platform.token_bucket import TOKEN_BUCKET_LUA, bucket_args

log = logging.getLogger(__name__)

KEY_PREFIX = "mesh:rl:"

# Takes that meet go in one script call of at most this many buckets.
MAX_TAKES_PER_CALL = 64

# Fail-open warnings are repeated at most this often per limiter.
FAIL_OPEN_LOG_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    # Seconds until one token is available (0 when allowed).
    retry_after: float
    # Whole tokens left in the bucket after this request.
    remaining: int
    # The bucket's burst and refill rate, for RateLimit-* headers.
    limit: int
    rate: float
    # Redis server clock (Unix seconds) when the bucket decided; 0 if it did not.
    server_time: float = 0.0
    # True when Redis was unreachable and the request was let through unchecked.
    fail_open: bool = False
    # The cache epoch read with the bucket (app.delivery.protocol.CACHE_EPOCH_KEY); -1: unknown.
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class _Take:
    key: str
    rate: float
    burst: int


def route_key(method: str, path_template: str) -> str:
    """The key ``settings.ratelimit_routes`` is looked up by: ``"POST /v1/mesh/tasks"``.

    Pass the route *template* (``/v1/mesh/tasks/{task_id}``), not the raw path,
    so one override covers every task and ids cannot create buckets.
    """
    return f"{method.upper()} {path_template}"


class RateLimiter:
    def __init__(self, redis: aioredis.Redis, settings: Settings, *,
                 timeout: float = 1.0) -> None:
        self.enabled = settings.ratelimit_enabled
        self.default = _checked("default", settings.ratelimit_rate, settings.ratelimit_burst)
        self.routes = {
            route: _checked(route, float(rate), int(burst))
            for route, (rate, burst) in settings.ratelimit_routes.items()
        }
        # A Redis that hangs must not hang every request with it.
        self.timeout = timeout
        # register_script: EVALSHA, and a transparent SCRIPT LOAD after a Redis
        # restart or failover empties the script cache (NOSCRIPT).
        self._script = redis.register_script(TOKEN_BUCKET_LUA)
        self._takes: Coalescer[_Take, Decision] = Coalescer(
            self._take, max_batch=MAX_TAKES_PER_CALL, in_flight=1)
        self._last_warning = -math.inf

    @property
    def takes_per_call(self) -> list[int]:
        """How many buckets the latest script calls took from, oldest first."""
        return list(self._takes.sizes)

    def limits_for(self, route: str) -> tuple[float, int, str]:
        """(rate, burst, bucket key suffix) for a route key."""
        if route in self.routes:
            rate, burst = self.routes[route]
            return rate, burst, ":" + route
        rate, burst = self.default
        return rate, burst, ""

    async def hit(self, agent_id: str, route: str) -> Decision:
        """Take one token from the agent's bucket for ``route`` (see :func:`route_key`)."""
        rate, burst, suffix = self.limits_for(route)
        if not self.enabled:
            return Decision(True, 0.0, burst, burst, rate)
        try:
            async with asyncio.timeout(self.timeout):
                decision = await self._takes.submit(_Take(KEY_PREFIX + agent_id + suffix,
                                                          rate, burst))
        except (RedisError, OSError, TimeoutError) as exc:
            self._warn_fail_open(exc)
            return Decision(True, 0.0, burst, burst, rate, fail_open=True)
        if not decision.allowed:
            RATELIMIT_REJECTED.inc()
        return decision

    async def _take(self, takes: list[_Take]) -> list[Decision]:
        """One token from each bucket, in order, in one script call."""
        args = [a for take in takes for a in bucket_args(take.rate, take.burst, 1)]
        async with asyncio.timeout(self.timeout):  # a hung call must free the slot
            raw = await self._script(keys=[take.key for take in takes] + [CACHE_EPOCH_KEY],
                                     args=args)
        now_us, epoch, *each = (int(v) for v in raw)
        return [
            Decision(allowed=bool(each[3 * i]), retry_after=each[3 * i + 1] / 1e6,
                     remaining=each[3 * i + 2], limit=take.burst, rate=take.rate,
                     server_time=now_us / 1e6, epoch=epoch)
            for i, take in enumerate(takes)
        ]

    def _warn_fail_open(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_warning >= FAIL_OPEN_LOG_INTERVAL_SECONDS:
            self._last_warning = now
            log.warning("rate limiter cannot reach Redis (%s: %s); allowing requests "
                        "unlimited until it is back", type(exc).__name__, exc)


def _checked(name: str, rate: float, burst: int) -> tuple[float, int]:
    if not rate > 0 or burst < 1:
        raise ValueError(f"rate limit {name!r}: rate must be > 0 and burst >= 1, "
                         f"got rate={rate} burst={burst}")
    return rate, burst


# --- HTTP shaping (pure) ----------------------------------------------------------


def retry_after_header(decision: Decision) -> str:
    """``Retry-After`` value: whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3)."""
    return str(max(1, math.ceil(decision.retry_after)))


def ratelimit_headers(decision: Decision) -> dict[str, str]:
    headers = {"RateLimit-Limit": str(decision.limit),
               "RateLimit-Remaining": str(max(0, decision.remaining))}
    if not decision.allowed:
        headers["Retry-After"] = retry_after_header(decision)
    return headers


def too_many_requests_problem(decision: Decision, *, instance: str | None = None) -> Problem:
    """The 429 as a :class:`~app.platform.errors.Problem`: raise it from a handler or dependency."""
    extra: dict[str, object] = {"retry_after": decision.retry_after}
    if instance is not None:
        extra["instance"] = instance
    return Problem(
        429,
        f"rate limit of {decision.rate:g} requests/s (burst {decision.limit}) exceeded; "
        f"retry after {decision.retry_after:.3f} s",
        headers=ratelimit_headers(decision), **extra,
    )


def too_many_requests(decision: Decision, *, instance: str | None = None) -> Response:
    """The 429 ``application/problem+json`` response, for middleware that answers directly."""
    return problem_response(too_many_requests_problem(decision, instance=instance))


async def enforce(limiter: RateLimiter, agent_id: str, method: str, path_template: str,
                  *, instance: str | None = None) -> Response | None:
    """For middleware: None to go on, or the 429 response to return instead.

    ``instance`` is the request path for the problem body, if wanted.
    """
    decision = await limiter.hit(agent_id, route_key(method, path_template))
    if decision.allowed:
        return None
    return too_many_requests(decision, instance=instance)


async def require(limiter: RateLimiter, agent_id: str, method: str, path_template: str,
                  *, instance: str | None = None) -> Decision:
    """For a handler dependency: the decision if allowed, else raises the 429 Problem."""
    decision = await limiter.hit(agent_id, route_key(method, path_template))
    if not decision.allowed:
        raise too_many_requests_problem(decision, instance=instance)
    return decision
