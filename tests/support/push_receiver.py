"""A real HTTP receiver on 127.0.0.1 for A2A push notifications: it keeps every
POST's body (parsed as an A2A StreamResponse, strictly) and headers, answered as
``behaviour(n)`` says for the n-th request: ``"ok"`` (200, the only answer that
counts the notification as received) or ``"fail"`` (500)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from a2a.types.a2a_pb2 import StreamResponse
from google.protobuf.json_format import ParseDict


@dataclass
class Pushed:
    body: dict[str, Any]
    event: StreamResponse
    headers: dict[str, str]


@dataclass
class PushReceiver:
    behaviour: Callable[[int], str] = lambda n: "ok"
    requests: int = 0
    received: list[Pushed] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/a2a-push"

    async def __aenter__(self) -> PushReceiver:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait(self, check: Callable[[PushReceiver], bool], timeout: float = 60.0) -> None:
        async with asyncio.timeout(timeout):
            while not check(self):
                self._changed.clear()
                await self._changed.wait()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                status = 200
                if self.behaviour(self.requests) == "fail":
                    status = 500
                else:
                    body = json.loads(raw)
                    event = ParseDict(body, StreamResponse())  # strict: unknown fields fail
                    self.received.append(Pushed(body, event, headers))
                writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode())
                await writer.drain()
                self._changed.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
