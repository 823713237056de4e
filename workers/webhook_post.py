"""One webhook POST, the safe way (ADR 035).

The URL's host is resolved at every attempt and every address is checked by
app.platform.webhook_target's rule; the request then goes to the first checked address
itself (with the original ``Host`` and, for https, the original name as SNI and
for certificate verification), so a DNS answer that changes after the check
cannot aim the request elsewhere. Redirects are not followed, proxies from the
environment are ignored, and at most ``MESH_WEBHOOK_RESPONSE_MAX_BYTES`` of a
response are read. The whole exchange, resolution included, has one deadline.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Literal

import httpcore

from app.platform.metrics import WEBHOOK_ATTEMPTS, WEBHOOK_FAILURES, WEBHOOK_LATENCY
from app.platform.settings import Settings
from app.platform.webhook_target import TargetRefused, checked_addresses, literal, parse

Reason = Literal["ok", "status", "timeout", "connect", "refused"]
USER_AGENT = "agent-mesh-webhooks/1"
_ERROR_BODY_CHARS = 200


@dataclass(frozen=True, slots=True)
class Outcome:
    reason: Reason
    # For the owner (GET …/webhook, the console): what went wrong, never a secret.
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


class Poster:
    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.webhook_timeout_seconds
        self.allow_private = settings.webhook_allow_private
        self.max_bytes = settings.webhook_response_max_bytes
        self._ssl = ssl.create_default_context()  # built once, shared by every client

    def client(self) -> httpcore.AsyncConnectionPool:
        """A connection pool for one agent's run of deliveries: its connections are
        keyed by the checked address, so they are never shared with another agent's
        host name on the same address (another SNI, another certificate). httpcore,
        the transport under httpx, directly: a webhook POST needs none of httpx's
        client layer (cookies, auth flows, redirects, URL models), and that layer
        was a measurable share of this worker's CPU per POST."""
        return httpcore.AsyncConnectionPool(ssl_context=self._ssl, max_connections=1,
                                            max_keepalive_connections=1)

    async def post(self, client: httpcore.AsyncConnectionPool, url: str, headers: dict[str, str],
                   body: bytes) -> Outcome:
        WEBHOOK_ATTEMPTS.inc()
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.timeout):
                outcome = await self._exchange(client, url, headers, body)
        except TimeoutError:
            outcome = Outcome("timeout", f"no answer within {self.timeout:g} s")
        except TargetRefused as exc:
            outcome = Outcome("refused", f"refused: {exc}")
        except httpcore.TimeoutException:
            outcome = Outcome("timeout", f"no answer within {self.timeout:g} s")
        except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
                httpcore.ConnectionNotAvailable) as exc:
            outcome = Outcome("connect", f"{type(exc).__name__}: {exc}"[:300])
        except OSError as exc:
            outcome = Outcome("connect", f"{type(exc).__name__}: {exc}"[:300])
        WEBHOOK_LATENCY.observe(time.monotonic() - started)
        if not outcome.ok:
            WEBHOOK_FAILURES.labels(reason=outcome.reason).inc()
        return outcome

    async def _exchange(self, client: httpcore.AsyncConnectionPool, url: str,
                        headers: dict[str, str], body: bytes) -> Outcome:
        target = parse(url)
        address = (await checked_addresses(target, allow_private=self.allow_private))[0]
        extensions: dict[str, object] = {"timeout": {"connect": self.timeout, "read": self.timeout,
                                                     "write": self.timeout, "pool": self.timeout}}
        if target.scheme == "https" and literal(target.host) is None:
            extensions["sni_hostname"] = target.host
        sent = [(k.encode(), v.encode()) for k, v in headers.items()]
        sent += [(b"host", target.host_header.encode()), (b"content-type", b"application/json"),
                 (b"user-agent", USER_AGENT.encode()), (b"content-length", str(len(body)).encode())]
        async with client.stream("POST", target.url_for(address), headers=sent, content=body,
                                 extensions=extensions) as response:
            head = await self._read_capped(response)
        if 200 <= response.status < 300:
            return Outcome("ok")
        note = " (redirects are not followed)" if 300 <= response.status < 400 else ""
        text = head[:_ERROR_BODY_CHARS].decode(errors="replace").strip()
        return Outcome("status", f"HTTP {response.status}{note}" + (f": {text}" if text else ""))

    async def _read_capped(self, response: httpcore.Response) -> bytes:
        """At most ``max_bytes`` of the body: a receiver cannot make us read a
        gigabyte (the connection is closed on the rest)."""
        got = bytearray()
        async for chunk in response.aiter_stream():
            got += chunk
            if len(got) >= self.max_bytes:
                break
        return bytes(got[:self.max_bytes])
