"""Handlers the daemon tests load with ``mesh daemon --handler``.

Each handled event is appended to ``$TEST_OUT`` (the side effect the tests
count) and reported as one line to the Unix socket ``$TEST_PROBE``.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from meshd.models import InboxEvent

_lock = threading.Lock()
_sock: socket.socket | None = None


def _record(event: InboxEvent) -> None:
    line = f"{event.seq} {event.event_id} {event.type} {event.text}\n"
    with _lock:
        with open(os.environ["TEST_OUT"], "a") as f:
            f.write(line)
        global _sock
        if _sock is None:
            _sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            _sock.connect(os.environ["TEST_PROBE"])
        _sock.sendall(f"{os.environ.get('TEST_NAME', '')}{line}".encode())


def echo(event: InboxEvent) -> str | None:
    """Record; answer every new task with ``re: <its text>``."""
    _record(event)
    if event.type == "task.created":
        return f"re: {event.text}"
    return None


def record(event: InboxEvent) -> None:
    """Record only."""
    _record(event)


def record_slowly(event: InboxEvent) -> None:
    """Record, then work 0.3 s (a slow handler, as a model run is)."""
    _record(event)
    time.sleep(0.3)
