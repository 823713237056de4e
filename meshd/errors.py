"""Exceptions raised by the SDK.

Every HTTP error becomes a :class:`MeshHTTPError` subclass chosen by status code,
carrying the server's ``application/problem+json`` fields so callers can show
``detail`` — the sentence that says what was wrong.
"""

from __future__ import annotations

from typing import Any


class MeshError(Exception):
    """Base class of every meshd error."""


class ConfigError(MeshError):
    """Missing or unusable configuration (no URL, no API key, unreadable config file)."""


class FatalError(MeshError):
    """The daemon cannot go on (credentials rejected, agent gone, state of another agent)."""


class MeshConnectionError(MeshError):
    """The gateway could not be reached (after retries, when the call retries)."""


class MeshHTTPError(MeshError):
    """The gateway answered with an error status."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        *,
        type: str = "about:blank",
        problem: dict[str, Any] | None = None,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.problem = problem or {}
        self.method = method
        self.path = path
        self.retry_after = retry_after
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" ({self.method} {self.path})" if self.method else ""
        text = f"{self.status} {self.title}"
        if self.detail and self.detail != self.title:
            text += f": {self.detail}"
        return text + where


class ValidationError(MeshHTTPError):
    """400/422: the request was malformed; ``detail`` says which field."""


class AuthError(MeshHTTPError):
    """401: the API key or token is wrong, expired or revoked."""


class ForbiddenError(MeshHTTPError):
    """403: no relationship with that agent (not friends, no shared group)."""


class NotFoundError(MeshHTTPError):
    """404: unknown agent, task or group — or one this agent may not see."""


class ConflictError(MeshHTTPError):
    """409: a state conflict (illegal task transition, terminal task, id reused)."""


class PayloadTooLargeError(MeshHTTPError):
    """413: the body is over the gateway's limit."""


class RateLimitedError(MeshHTTPError):
    """429: too many requests; ``retry_after`` is the server's hint in seconds."""


class ServerError(MeshHTTPError):
    """5xx from the gateway."""


_BY_STATUS: dict[int, type[MeshHTTPError]] = {
    400: ValidationError,
    401: AuthError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
}


def error_class(status: int) -> type[MeshHTTPError]:
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return ServerError
    return MeshHTTPError
