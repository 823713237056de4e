"""A real HTTP endpoint standing in for Sentry: what arrives is what left a process.

Tests point a DSN at it, make something report, and read the envelopes back —
so "no secret reaches Sentry" is checked on the wire, not on a mock.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import sentry_sdk


@dataclass
class SentrySink:
    dsn: str
    project: int
    received: list[tuple[str, bytes]] = field(default_factory=list)

    def raw(self) -> str:
        return b"".join(body for _, body in self.received).decode(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """Every event item of every envelope (envelope header, then header/payload pairs)."""
        events = []
        for path, body in list(self.received):
            assert path == f"/api/{self.project}/envelope/", path
            lines = body.split(b"\n")
            for header, payload in zip(lines[1::2], lines[2::2], strict=False):
                if header.strip() and json.loads(header).get("type") == "event":
                    events.append(json.loads(payload))
        return events

    def messages(self) -> list[str]:
        return [e.get("message") or e.get("logentry", {}).get("message", "")
                for e in self.events()]


def _handler(received: list[tuple[str, bytes]]) -> type[BaseHTTPRequestHandler]:
    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding == "br":
                import brotli  # type: ignore[import-not-found]

                body = brotli.decompress(body)
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    return Collector


@contextlib.contextmanager
def sentry_sink(project: int = 42) -> Iterator[SentrySink]:
    received: list[tuple[str, bytes]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(received))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield SentrySink(f"http://publickey@127.0.0.1:{server.server_address[1]}/{project}",
                         project, received)
    finally:
        # Leave no client behind for the rest of the suite.
        sentry_sdk.get_client().close(timeout=2)
        sentry_sdk.get_global_scope().set_client(None)
        server.shutdown()
        server.server_close()
