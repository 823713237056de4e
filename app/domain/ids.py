"""Identifier rules and default id generation."""

from __future__ import annotations

import re
import secrets
import time

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{2,127}$"
ID_RE = re.compile(ID_PATTERN)
# Usernames and agent names form agent_id = name@username, which must itself be an id.
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
NAME_RE = re.compile(NAME_PATTERN)
USERNAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{2,31}$"

VIRTUAL_USER_NAME = "human"

_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def base36(n: int) -> str:
    # One draw from the OS for the whole suffix, not one per character: a send
    # makes four ids, and each draw is a getrandom() system call.
    value = secrets.randbelow(36 ** n)
    digits = []
    for _ in range(n):
        value, digit = divmod(value, 36)
        digits.append(_B36[digit])
    return "".join(digits)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def agent_id_of(name: str, username: str) -> str:
    return f"{name}@{username}"


def new_task_id(agent_id: str) -> str:
    return f"t-{agent_id}-{now_ms()}-{base36(6)}"


def new_message_id(agent_id: str) -> str:
    return f"m-{agent_id}-{now_ms()}-{base36(8)}"


def new_context_id(agent_id: str) -> str:
    return f"c-{agent_id}-{now_ms()}-{base36(6)}"


def new_event_id() -> str:
    return f"e-{now_ms()}-{base36(10)}"


def new_request_id() -> str:
    return f"fr-{now_ms()}-{base36(8)}"


def new_artifact_id() -> str:
    return f"a-{now_ms()}-{base36(8)}"


def is_valid_id(value: str) -> bool:
    # fullmatch: with re.match, the pattern's '$' also matches before a trailing
    # newline, so "abc\n" passed.
    return bool(ID_RE.fullmatch(value))


def new_broadcast_id(agent_id: str) -> str:
    return f"b-{agent_id}-{now_ms()}-{base36(6)}"
