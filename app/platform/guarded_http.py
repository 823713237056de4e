"""An httpx transport that applies the webhook target rule at every request.

Used for calls the mesh makes on an owner's behalf to a URL the owner chose
(an A2A remote's card and endpoints, ADR 041). Each request's host is resolved
and every address checked (app.platform.webhook_target); the request then goes to the
first checked address itself, with the original ``Host`` and, for https, the
original name as SNI and for certificate checks — so a DNS answer that changes
after the check cannot aim a request at the mesh's own network. Redirects are
not followed and proxies from the environment are ignored (the client's
settings, :func:`client`).
"""

from __future__ import annotations

import ssl

import httpx

from app.platform.webhook_target import TargetRefused, checked_addresses, literal, parse


class GuardedTransport(httpx.AsyncBaseTransport):
    def __init__(self, *, allow_private: bool, verify: ssl.SSLContext) -> None:
        self.allow_private = allow_private
        self._inner = httpx.AsyncHTTPTransport(verify=verify, trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = parse(str(request.url))
        address = (await checked_addresses(target, allow_private=self.allow_private))[0]
        extensions = dict(request.extensions)
        if target.scheme == "https" and literal(target.host) is None:
            extensions["sni_hostname"] = target.host
        headers = httpx.Headers(request.headers)
        headers["host"] = target.host_header
        pinned = httpx.Request(request.method, target.url_for(address), headers=headers,
                               stream=request.stream, extensions=extensions)
        return await self._inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self._inner.aclose()


_SSL = ssl.create_default_context()


def client(*, allow_private: bool, headers: dict[str, str] | None = None,
           timeout: float = 10.0) -> httpx.AsyncClient:
    """A client for one remote; ``TargetRefused`` is raised for a refused host."""
    return httpx.AsyncClient(transport=GuardedTransport(allow_private=allow_private,
                                                        verify=_SSL),
                             headers=headers, follow_redirects=False, trust_env=False,
                             timeout=httpx.Timeout(timeout, read=None))


__all__ = ["GuardedTransport", "TargetRefused", "client"]
