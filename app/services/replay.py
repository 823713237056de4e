"""Idempotent replay: one way to answer a request that already took effect.

A write that finds its own earlier success (same id, same content, same caller)
leaves its transaction by raising :class:`Replay` with the record the first
attempt returned; the transaction rolls back, so nothing is written twice and no
second event is sent, and the service answers with the stored record. The same
id with other content is a 409. Used by task creation
(app.services.task_creation), messages, artifacts and status changes
(app.services.tasks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from app.platform.errors import Problem, conflict
from app.platform.metrics import DEDUP_HITS


class Replay(Exception):
    """Leave the transaction (rolling it back) and answer with a stored record."""

    def __init__(self, result: BaseModel) -> None:
        super().__init__("idempotent replay")
        self.result = result
        DEDUP_HITS.labels(where="api").inc()


def same_request(stored: Mapping[str, Any] | None, fingerprint: str, *, by: str,
                 by_field: str = "sender") -> bool:
    """Whether ``stored`` is this very request's earlier result: the same content
    (``content_hash``), made by the same caller."""
    return stored is not None and stored["content_hash"] == fingerprint \
        and stored[by_field] == by


def replayed(outcome: Exception) -> tuple[Any, bool]:
    """A request that met stored data with its id: the stored result of a retry
    (created=False), else the conflict is raised."""
    if isinstance(outcome, Replay):
        return outcome.result, False
    raise outcome from None


def message_id_reused(message_id: str) -> Problem:
    return conflict(f"message_id '{message_id}' was already used for different content; "
                    "use a new message_id for a new message")
