"""A lean HTTP/1.1 load client: keep-alive JSON requests and SSE streams.

The machine has two cores shared by Postgres, Redis, Kafka, the mesh
processes and the load generator, so every CPU-millisecond the client spends
is one the system under test does not get. httpx costs about a millisecond of
CPU per request; this client costs a few tens of microseconds, and its SSE
reader is a plain ``asyncio.Protocol`` (no task per connection), so 10,000
idle streams cost the client almost nothing. Setup traffic (owners, agents,
groups, tokens) still goes through ``tests.support.meshapi`` over httpx.

Timestamps are ``time.perf_counter()`` taken in this process: the moment a
request is written and the moment a response or an SSE event is parsed, on
one clock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

now = time.perf_counter


class HttpError(Exception):
    """The request failed below HTTP. ``stale``: a reused keep-alive connection
    was closed by the server before any byte of the answer (safe to resend)."""

    stale = False


def _head(method: str, path: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    text = raw.decode("latin-1")
    status_line, *header_lines = text.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise HttpError(f"bad status line {status_line!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


@dataclass
class Response:
    status: int
    body: bytes
    sent_at: float      # perf_counter when the request was written
    done_at: float      # perf_counter when the whole response was read

    @property
    def latency(self) -> float:
        return self.done_at - self.sent_at

    def json(self) -> Any:
        return json.loads(self.body)


class Connection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.used = 0

    async def open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: bytes | None = None) -> Response:
        if self._writer is None:
            await self.open()
        assert self._reader is not None and self._writer is not None
        sent_at = now()
        self._writer.write(_head(method, path, f"{self.host}:{self.port}", headers, body)
                           + (body or b""))
        reused = self.used > 0
        self.used += 1
        try:
            try:
                raw = await self._reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                if reused and not getattr(exc, "partial", b""):
                    self.close()
                    err = HttpError(f"{method} {path}: keep-alive connection closed by the server")
                    err.stale = True
                    raise err from exc
                raise
            status, rh = _parse_head(raw[:-4])
            if "content-length" in rh:
                data = await self._reader.readexactly(int(rh["content-length"]))
            elif rh.get("transfer-encoding", "").lower() == "chunked":
                data = await self._read_chunked()
            else:
                data = await self._reader.read()
                self.close()
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self.close()
            raise HttpError(f"{method} {path}: connection lost ({exc!r})") from exc
        if rh.get("connection", "").lower() == "close":
            self.close()
        return Response(status, data, sent_at, now())

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        out = bytearray()
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return bytes(out)
            out += await self._reader.readexactly(size + 2)
            del out[-2:]


class Client:
    """A pool of keep-alive connections to one server or several; any number of
    concurrent requests. With several servers (the web processes of a topology),
    each request goes to the next server in turn, as a PaaS router spreads
    requests over the instances of a web process."""

    def __init__(self, base_url: str | Sequence[str]) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        self.servers = [(u.hostname or "127.0.0.1", u.port or 80) for u in map(urlsplit, urls)]
        self.host, self.port = self.servers[0]
        self._idle: list[list[Connection]] = [[] for _ in self.servers]
        self._next = itertools.cycle(range(len(self.servers)))

    async def request(self, method: str, path: str, headers: dict[str, str],
                      body: Any = None) -> Response:
        raw = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        i = next(self._next)
        idle = self._idle[i]
        conn = idle.pop() if idle else Connection(*self.servers[i])
        try:
            try:
                resp = await conn.request(method, path, headers, raw)
            except HttpError as exc:
                if not exc.stale:
                    raise
                # uvicorn closes keep-alive connections idle for 5 s: resend on a new one.
                conn = Connection(*self.servers[i])
                resp = await conn.request(method, path, headers, raw)
        except BaseException:
            conn.close()
            raise
        idle.append(conn)
        return resp

    async def prewarm(self, n: int) -> None:
        """Open ``n`` idle connections per server now, so no measured request pays a TCP connect."""
        for i, idle in enumerate(self._idle):
            while len(idle) < n:
                conn = Connection(*self.servers[i])
                await conn.open()
                idle.append(conn)

    def close(self) -> None:
        for idle in self._idle:
            for conn in idle:
                conn.close()
            idle.clear()


# --- SSE ---------------------------------------------------------------------------

@dataclass
class SseEvent:
    id: str | None
    event: str | None
    data: str
    at: float           # perf_counter when the event was parsed


class SseStream(asyncio.Protocol):
    """One ``GET`` whose response is an event stream; ``on_event`` runs in the
    loop's data callback, so the timestamp is taken as the bytes arrive."""

    def __init__(self, on_event: Callable[[SseStream, SseEvent], None] | None = None) -> None:
        self.on_event = on_event
        self.status: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self.events = 0
        self.pings = 0
        self._buf = bytearray()
        self._body = bytearray()
        self._head_done = False
        self._chunked = False
        self._chunk_left = -1   # bytes of the current chunk still to read (+2 for CRLF)

    @classmethod
    async def open(cls, host: str, port: int, path: str, headers: dict[str, str],
                   on_event: Callable[[SseStream, SseEvent], None] | None = None) -> SseStream:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(lambda: cls(on_event), host, port)
        assert proto.transport is not None
        proto.transport.write(_head("GET", path, f"{host}:{port}",
                                    {"Accept": "text/event-stream", **headers}, None))
        return proto

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.status.done():
            self.status.set_exception(HttpError(f"connection lost before the response ({exc!r})"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        at = now()
        self._buf += data
        if not self._head_done:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status, headers = _parse_head(bytes(self._buf[:end]))
            del self._buf[:end + 4]
            self._head_done = True
            self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            if not self.status.done():
                self.status.set_result(status)
        self._dechunk()
        self._parse_events(at)

    def _dechunk(self) -> None:
        if not self._chunked:
            self._body += self._buf
            self._buf.clear()
            return
        while True:
            if self._chunk_left < 0:
                eol = self._buf.find(b"\r\n")
                if eol < 0:
                    return
                self._chunk_left = int(bytes(self._buf[:eol]).split(b";")[0], 16) + 2
                del self._buf[:eol + 2]
            if len(self._buf) < self._chunk_left:
                return
            self._body += self._buf[:self._chunk_left - 2]
            del self._buf[:self._chunk_left]
            self._chunk_left = -1

    def _parse_events(self, at: float) -> None:
        body = self._body
        while True:
            # sse-starlette separates lines with CRLF; accept LF too.
            i, sep = body.find(b"\r\n\r\n"), 4
            j = body.find(b"\n\n")
            if i < 0 or (0 <= j < i):
                i, sep = j, 2
            if i < 0:
                return
            block = bytes(body[:i]).decode()
            del body[:i + sep]
            ev_id = ev_type = None
            data: list[str] = []
            for line in block.replace("\r\n", "\n").split("\n"):
                if not line or line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "id":
                    ev_id = value
                elif field == "event":
                    ev_type = value
                elif field == "data":
                    data.append(value)
            if not data:
                self.pings += 1
                continue
            self.events += 1
            if self.on_event is not None:
                self.on_event(self, SseEvent(ev_id, ev_type, "\n".join(data), at))
