"""A dependency the request needs is down (Postgres restarting, a refused
connection): ``503`` with ``Retry-After``, not a ``500``.

The request was not applied (its transaction could not commit), so a client
retries it as it is — with the same ids, which makes the retry safe. Worker
processes have their own reconnect loops (app.platform.retry); this is the web side.
"""

from __future__ import annotations

import logging
import time

import asyncpg
from starlette.requests import Request
from starlette.responses import Response

from app.platform.errors import Problem, problem_response, unexpected_response

log = logging.getLogger("mesh.unavailable")

RETRY_AFTER_SECONDS = 2
# Postgres errors that mean "not reachable right now", not "your SQL is wrong".
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,           # connection lost, refused, failed
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, starting up (57P0x)
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.InterfaceError,
)
_LOG_INTERVAL_SECONDS = 5.0
_last_log = [-1e9]


def is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.InterfaceError):
        # Only a closed connection; other interface errors are our bugs.
        return "closed" in str(exc) or "connection" in str(exc).lower()
    return isinstance(exc, UNAVAILABLE)


async def handle_unavailable(request: Request, exc: Exception) -> Response:
    if not is_unavailable(exc):
        return await unexpected_response(request, exc)
    now = time.monotonic()
    if now - _last_log[0] >= _LOG_INTERVAL_SECONDS:
        # One line every few seconds during an outage, not one per request.
        _last_log[0] = now
        log.warning("a dependency is unavailable (%s: %s); answering 503",
                    type(exc).__name__, exc)
    return problem_response(Problem(
        503, "the database is unavailable right now; nothing was applied — retry the "
             f"request as it is in {RETRY_AFTER_SECONDS} s",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)}))
