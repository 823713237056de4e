"""devstack's voice: one line on stderr, at once (stdout carries the processes' output)."""

from __future__ import annotations

import sys


def say(message: str = "") -> None:
    print(message, file=sys.stderr, flush=True)
