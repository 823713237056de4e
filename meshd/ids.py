"""Client-generated ids.

Writes carry ids the client made up, so a retried request is recognised by the
server instead of creating a second record:
task ``t-{agent_id}-{unix_ms}-{6 base36}``, message ``m-{agent_id}-{unix_ms}-{8 base36}``.
"""

from __future__ import annotations

import hashlib
import secrets
import time

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAX_LEN = 128  # ids match ^[A-Za-z0-9][A-Za-z0-9._:@-]{2,127}$


def base36(n: int, width: int) -> str:
    """``n`` in base 36, left-padded with zeros to ``width`` (never truncated)."""
    if n < 0:
        raise ValueError("base36 takes a non-negative integer")
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(_B36[r])
    return "".join(reversed(out)).rjust(width, "0")


def random_base36(width: int) -> str:
    return base36(secrets.randbelow(36**width), width)


def _compose(prefix: str, agent_id: str, unix_ms: int, suffix: str) -> str:
    tail = f"-{unix_ms}-{suffix}"
    room = _MAX_LEN - len(prefix) - 1 - len(tail)
    # An agent_id too long to fit is cut; the time and the random part keep it unique.
    return f"{prefix}-{agent_id[:room]}{tail}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_message_id(agent_id: str, *, unix_ms: int | None = None) -> str:
    return _compose("m", agent_id, _now_ms() if unix_ms is None else unix_ms, random_base36(8))


def new_task_id(agent_id: str, *, unix_ms: int | None = None) -> str:
    return _compose("t", agent_id, _now_ms() if unix_ms is None else unix_ms, random_base36(6))


def new_artifact_id(agent_id: str, *, unix_ms: int | None = None) -> str:
    return _compose("a", agent_id, _now_ms() if unix_ms is None else unix_ms, random_base36(8))


def derived_message_id(agent_id: str, key: str, *, unix_ms: int = 0) -> str:
    """A message id that is the same every time for the same ``key``.

    The daemon replies to inbox event E with ``derived_message_id(me, E.event_id)``:
    if it crashes after the reply was stored but before it recorded E as handled,
    the re-run's reply carries the same id and the server does not store it twice.
    """
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return _compose("m", agent_id, unix_ms, base36(digest % 36**8, 8))


def derived_task_id(agent_id: str, key: str, *, unix_ms: int = 0) -> str:
    """A task id that is the same every time for the same ``key`` (as :func:`derived_message_id`).

    ``mesh agent`` opens a task for the n-th ``mesh_send_message`` of the run for
    event E with the id derived from that call, so a re-run opens it once.
    """
    digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return _compose("t", agent_id, unix_ms, base36(digest % 36**6, 6))
