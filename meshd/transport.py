"""How the SDK talks to the gateway: bearer auth, retries, problem bodies.

Transient failures are retried with backoff: a connection that could not be
opened, 502/503/504, and 429 (after its ``Retry-After``). A request that may
have reached the server before the connection broke is retried only when it is
idempotent — reads, acks, heartbeats, and writes that carry a client-generated
``message_id``/``task_id``, which the gateway recognises on a retry (same id and
content → the stored record). A 401 renews the token once and repeats the
request (:class:`BearerAuth`, for plain calls and the SSE stream alike).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from meshd import tracing
from meshd.auth import TokenSource
from meshd.backoff import Backoff, parse_retry_after
from meshd.errors import AuthError, MeshConnectionError, MeshError, MeshHTTPError, error_class
from meshd.models import TokenInfo

log = logging.getLogger("meshd.client")

USER_AGENT = "meshd/0.1.0"
# Sent but maybe not processed: retry only idempotent calls.
_AMBIGUOUS = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
# Never reached the server: always safe to retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_RETRY_ALWAYS = frozenset({429, 503})
_RETRY_IF_IDEMPOTENT = frozenset({502, 504})


def problem_from_response(resp: httpx.Response, method: str, path: str) -> MeshHTTPError:
    """The exception for an error response: the gateway's problem body, or what a proxy said."""
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict):
        title = str(body.get("title") or resp.reason_phrase or "error")
        detail = str(body.get("detail") or "")
        ptype = str(body.get("type") or "about:blank")
    else:  # not from the gateway: a proxy or load balancer in between
        body = {}
        title = resp.reason_phrase or "error"
        detail = resp.text[:500] if resp.content else ""
        ptype = "about:blank"
    return error_class(resp.status_code)(
        resp.status_code,
        title,
        detail,
        type=ptype,
        problem=body,
        method=method,
        path=path,
        retry_after=parse_retry_after(resp.headers.get("retry-after")),
    )


class BearerAuth(httpx.Auth):
    """Puts the current token on a request; on a 401 renews it once and sends the request again."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self.source.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401 or not self.source.can_refresh:
            return
        await response.aread()  # frees the connection before the token request
        log.info("401 from %s %s: renewing the token", request.method, request.url.path)
        request.headers["Authorization"] = f"Bearer {await self.source.refresh(stale=token)}"
        yield request


class GatewayTransport:
    """One httpx client to the gateway with this agent's credentials and retry policy."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        token: str | None,
        timeout: float,
        max_attempts: int,
        retry_initial: float,
        retry_max: float,
        max_retry_after: float,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.base_url = base_url
        self.timeout = timeout
        self.http = httpx.AsyncClient(
            base_url=base_url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            transport=transport,
        )
        self._max_attempts = max(1, max_attempts)
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._max_retry_after = max_retry_after
        self._api_key = api_key
        self.auth = TokenSource(self._fetch_token if api_key else None, static_token=token)
        self._bearer = BearerAuth(self.auth)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _fetch_token(self) -> TokenInfo:
        try:
            body = await self.call("POST", "/v1/auth/token", json={"api_key": self._api_key}, auth=False)
        except AuthError as e:
            raise AuthError(
                e.status,
                e.title,
                (e.detail or "the API key was rejected")
                + " — check MESH_API_KEY; the key may be revoked or its agent deleted",
                type=e.type,
                problem=e.problem,
                method=e.method,
                path=e.path,
            ) from None
        return TokenInfo.model_validate(body)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool = True,
        auth: bool = True,
        request_timeout: float | None = None,
    ) -> Any:
        """The decoded JSON body of a successful response (None for 204), after retries."""
        backoff = Backoff(self._retry_initial, self._retry_max, jitter=0.2)
        if params:
            params = {k: v for k, v in params.items() if v is not None}
        attempts = 0
        while True:
            attempts += 1
            error: MeshError
            try:
                resp = await self.http.request(
                    method,
                    path,
                    json=json,
                    params=params,
                    headers=tracing.current_headers() or None,
                    auth=self._bearer if auth else None,
                    timeout=httpx.USE_CLIENT_DEFAULT if request_timeout is None else request_timeout,
                )
            except _NOT_SENT as e:
                error = MeshConnectionError(f"cannot reach the gateway at {self.base_url}: {e!r}")
                retryable = True
            except _AMBIGUOUS as e:
                error = MeshConnectionError(f"{method} {path}: connection lost: {e!r}")
                retryable = idempotent
            else:
                if resp.status_code < 400:
                    return resp.json() if resp.content else None
                error = problem_from_response(resp, method, path)
                status = resp.status_code
                retryable = status in _RETRY_ALWAYS or (idempotent and status in _RETRY_IF_IDEMPOTENT)
            if not retryable or attempts >= self._max_attempts:
                raise error
            delay = backoff.next()
            if isinstance(error, MeshHTTPError) and error.retry_after is not None:
                delay = min(max(error.retry_after, 0.0), self._max_retry_after)
            log.info("%s %s failed (%s); retry %d in %.2fs", method, path, error, attempts, delay)
            await asyncio.sleep(delay)

    @asynccontextmanager
    async def open_stream(
        self, path: str, *, headers: dict[str, str], params: dict[str, str], read_timeout: float
    ) -> AsyncIterator[httpx.Response]:
        """A streaming GET that the gateway accepted (an error status raises), not retried."""
        timeout = httpx.Timeout(self.timeout, read=read_timeout)
        async with self.http.stream(
            "GET", path, headers=headers, params=params, timeout=timeout, auth=self._bearer
        ) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise problem_from_response(resp, "GET", path)
            yield resp
