"""The handler of the bench's daemon drain: does nothing, so what is timed is the
runtime and the gateway around it (``mesh daemon --handler bench.daemon_handler:noop``)."""

from __future__ import annotations

from typing import Any


def noop(event: Any) -> None:
    return None
