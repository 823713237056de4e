"""One webhook POST, the safe way (ADR 035).

The URL's host is resolved at every attempt and every address is checked by
app.platform.webhook_target's rule; the request then goes to the first checked address
itself (with the original ``Host`` and, for https, the original name as SNI and
for certificate verification), so a DNS answer that changes after the check
cannot aim the request elsewhere. Redirects are not followed, proxies from the
environment are ignored, and at most ``MESH_WEBHOOK_RESPONSE_MAX_BYTES`` of a
response are read. The whole exchange, resolution included, has one deadline.

The client is aiohttp's: its HTTP parser is C, and per POST it costs this
process about a quarter of the CPU a pure-Python HTTP/1.1 stack (httpcore and
h11 under anyio) did — a webhook POST is most of what this worker does
(bench/results/2026-12-04-webhooks-aiohttp.md).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Literal

import aiohttp
from yarl import URL

from app.platform.metrics import WEBHOOK_ATTEMPTS, WEBHOOK_FAILURES, WEBHOOK_LATENCY
from app.platform.settings import Settings
from app.platform.webhook_target import TargetRefused, checked_addresses, literal, parse

Reason = Literal["ok", "status", "timeout", "connect", "refused"]
USER_AGENT = "agent-mesh-webhooks/1"
_ERROR_BODY_CHARS = 200
# Asked for nothing but the identity encoding: a response is read only to a cap.
_SKIPPED = frozenset({"Accept-Encoding"})


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

    def client(self) -> aiohttp.ClientSession:
        """A client for one agent's run of deliveries, holding at most one
        connection: connections are keyed by the checked address, so they are
        never shared with another agent's host name on the same address (another
        SNI, another certificate). No cookies, no proxies from the environment,
        no DNS cache (every connect resolves and checks again)."""
        connector = aiohttp.TCPConnector(limit=1, use_dns_cache=False, ssl=self._ssl)
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                     auto_decompress=False, trust_env=False,
                                     skip_auto_headers=_SKIPPED)

    async def post(self, client: aiohttp.ClientSession, url: str, headers: dict[str, str],
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
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            # ValueError: what aiohttp raises for a response it cannot parse.
            outcome = Outcome("connect", f"{type(exc).__name__}: {exc}"[:300])
        WEBHOOK_LATENCY.observe(time.monotonic() - started)
        if not outcome.ok:
            WEBHOOK_FAILURES.labels(reason=outcome.reason).inc()
        return outcome

    async def _exchange(self, client: aiohttp.ClientSession, url: str,
                        headers: dict[str, str], body: bytes) -> Outcome:
        target = parse(url)
        address = (await checked_addresses(target, allow_private=self.allow_private))[0]
        sent = {**headers, "Host": target.host_header, "Content-Type": "application/json",
                "User-Agent": USER_AGENT}
        sni = target.host if target.scheme == "https" and literal(target.host) is None else None
        async with client.post(URL(target.url_for(address), encoded=True), data=body,
                               headers=sent, allow_redirects=False, server_hostname=sni,
                               ) as response:
            head = await self._read_capped(response)
        if 200 <= response.status < 300:
            return Outcome("ok")
        note = " (redirects are not followed)" if 300 <= response.status < 400 else ""
        text = head[:_ERROR_BODY_CHARS].decode(errors="replace").strip()
        return Outcome("status", f"HTTP {response.status}{note}" + (f": {text}" if text else ""))

    async def _read_capped(self, response: aiohttp.ClientResponse) -> bytes:
        """At most ``max_bytes`` of the body: a receiver cannot make us read a
        gigabyte (the connection is closed on the rest)."""
        got = bytearray()
        while len(got) < self.max_bytes:
            chunk = await response.content.read(self.max_bytes - len(got))
            if not chunk:
                break
            got += chunk
        return bytes(got)
