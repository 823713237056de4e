"""A real HTTP webhook receiver on 127.0.0.1 for tests: asyncio streams, no framework.

Each request is answered as ``behaviour(n)`` says for the n-th request (from 1):
``"ok"`` (204 — then, and only then, the delivery counts as received), ``"fail"``
(500), ``"hang"`` (no answer until the client gives up or ``release`` is set), or
``"redirect"`` (302). Every received body is checked with
``standardwebhooks.Webhook(secret).verify``; a body that does not verify is
answered 400 and counted in ``bad_signatures``. ``stop()`` / ``start()`` restart
it on the same port (connection refused in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

Behaviour = Callable[[int], str]


@dataclass
class Received:
    event_id: str
    seq: int
    body: bytes
    headers: dict[str, str]


@dataclass
class Receiver:
    secret: str = ""
    behaviour: Behaviour = lambda n: "ok"
    port: int = 0
    requests: int = 0
    bad_signatures: int = 0
    received: list[Received] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    hanging: int = 0
    _server: asyncio.Server | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await self._server.wait_closed()
            self._server = None

    async def wait(self, check: Callable[[Receiver], bool], timeout: float = 120.0) -> None:
        """Await a state of this receiver; woken by each request it handles."""
        async with asyncio.timeout(timeout):
            while not check(self):
                self._changed.clear()
                await self._changed.wait()

    async def wait_received(self, n: int) -> None:
        await self.wait(lambda r: len(r.received) >= n)

    def seqs(self) -> list[int]:
        return [r.seq for r in self.received]

    def _bump(self) -> None:
        self._changed.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines[1:] if line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.requests += 1
            what = self.behaviour(self.requests)
            self._bump()
            if what == "hang":
                self.hanging += 1
                self._bump()
                try:
                    # Until released, or until the client hangs up (EOF).
                    eof = asyncio.ensure_future(reader.read(1))
                    rel = asyncio.ensure_future(self.release.wait())
                    await asyncio.wait({eof, rel}, return_when=asyncio.FIRST_COMPLETED)
                    eof.cancel()
                    rel.cancel()
                finally:
                    self.hanging -= 1
                    self._bump()
                return
            if what == "fail":
                await self._answer(writer, 500, b"receiver is failing on purpose")
                continue
            if what == "redirect":
                await self._answer(writer, 302, b"", {"location": "http://169.254.169.254/"})
                continue
            try:
                Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError:
                self.bad_signatures += 1
                await self._answer(writer, 400, b"bad signature")
                continue
            event = json.loads(body)
            self.received.append(Received(event["event_id"], event["seq"], body, headers))
            await self._answer(writer, 204, b"")
            self._bump()

    async def _answer(self, writer: asyncio.StreamWriter, status: int, body: bytes,
                      extra: dict[str, str] | None = None) -> None:
        lines = [f"HTTP/1.1 {status} X", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
