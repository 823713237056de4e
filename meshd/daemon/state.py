"""The daemon's persisted progress: cursor and dedup window.

``state.json`` in the agent's state folder holds the last seq whose handler
succeeded (``cursor``), the ids of the last N handled events (``handled``), the
replies a succeeded handler produced that are not yet confirmed stored by the
gateway (``pending``) — so a crash after the handler never re-runs it, and
never loses its reply either — and the runtime's own id (``consumer``), which
names its claims on events at the gateway across restarts.
It is replaced atomically — written to a temp file in the same folder, fsynced,
renamed over the old one, and the folder fsynced — so a crash at any instant
leaves either the old or the new state, never a torn one.

A lock file (``flock``) keeps a second daemon off the same state folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from meshd.errors import MeshError
from meshd.files import atomic_write_json

STATE_VERSION = 1
DEFAULT_WINDOW = 500


class StateLockedError(MeshError):
    """Another daemon holds this agent's state folder."""


class DedupWindow:
    """The ids of the last ``size`` handled events, oldest first."""

    def __init__(self, size: int = DEFAULT_WINDOW, ids: list[str] | None = None) -> None:
        if size < 1:
            raise ValueError("dedup window size must be at least 1")
        self.size = size
        self._ids: OrderedDict[str, None] = OrderedDict()
        for i in ids or ():
            self.add(i)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: str) -> None:
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        while len(self._ids) > self.size:
            self._ids.popitem(last=False)

    def ids(self) -> list[str]:
        return list(self._ids)


class DaemonState:
    def __init__(self, folder: Path, *, window: int = DEFAULT_WINDOW) -> None:
        self.folder = folder
        self.path = folder / "state.json"
        self.cursor: int | None = None
        self.handled = DedupWindow(window)
        self.agent_id: str | None = None
        self.pending: list[dict[str, Any]] = []
        self.consumer = f"meshd-{uuid.uuid4().hex}"
        self._lock_fd: int | None = None

    # -- lock ----------------------------------------------------------------
    def lock(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.folder / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateLockedError(
                f"another mesh daemon is running with state folder {self.folder}; "
                "stop it or pass a different --state-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- load/save -----------------------------------------------------------
    def load(self) -> DaemonState:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return self
        except (OSError, ValueError) as e:
            raise MeshError(
                f"cannot read daemon state {self.path}: {e}; move it away to start over "
                "(events after the gateway's acked cursor are then handled again)"
            ) from e
        self.cursor = data.get("cursor")
        self.agent_id = data.get("agent_id")
        self.handled = DedupWindow(self.handled.size, list(data.get("handled") or []))
        self.pending = list(data.get("pending") or [])
        self.consumer = data.get("consumer") or self.consumer
        return self

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_json(
            self.path,
            {
                "version": STATE_VERSION,
                "agent_id": self.agent_id,
                "cursor": self.cursor,
                "handled": self.handled.ids(),
                "pending": self.pending,
                "consumer": self.consumer,
            },
        )

    # -- progress ------------------------------------------------------------
    def record(self, seq: int, event_id: str) -> None:
        self.handled.add(event_id)
        if self.cursor is None or seq > self.cursor:
            self.cursor = seq
