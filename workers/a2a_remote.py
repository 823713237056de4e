"""One bridged agent's remote A2A server, as the bridge calls it (ADR 041).

What every call of workers.a2a_forward needs and none of the lane logic does:
the SDK client built from the stored card and headers, which failures are
worth retrying (the network, a timeout, a 5xx) as opposed to an A2A error the
remote answered with, the mesh message as the A2A message sent, the remote ids
read from an answer, and the card kept fresh.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import AgentCard, Message, StreamResponse
from google.protobuf.json_format import ParseDict

from app.a2a import mapping
from app.platform import guarded_http
from app.platform.settings import Settings
from app.platform.webhook_target import TargetRefused
from app.services import a2a_remotes, remote_card
from app.services.principals import Agent
from app.store import a2a_remotes as store

log = logging.getLogger("mesh.a2a_bridge")


class RemoteDown(Exception):
    """The remote could not be reached (retried; nothing is acked)."""


def transient(exc: BaseException) -> bool:
    """Whether a failed call is worth retrying: the network, a timeout, a 5xx —
    not an A2A error the remote answered with."""
    if isinstance(exc, (httpx.HTTPError, OSError, TimeoutError, TargetRefused)):
        return True
    if isinstance(exc, A2AClientError):
        cause = exc.__cause__
        if isinstance(cause, httpx.HTTPStatusError):
            code = cause.response.status_code
            return code >= 500 or code in (408, 425, 429)
        return True
    return False


def describe(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


@dataclass(frozen=True)
class Remote:
    """How to call one agent's A2A server, from its lane row."""

    agent: Agent
    card: AgentCard
    headers: dict[str, str]

    @property
    def streaming(self) -> bool:
        return remote_card.streams(self.card)

    @contextlib.asynccontextmanager
    async def client(self, settings: Settings) -> AsyncIterator[Client]:
        http = guarded_http.client(allow_private=settings.webhook_allow_private,
                                   headers=self.headers,
                                   timeout=settings.webhook_timeout_seconds)
        try:
            # Without streaming, SendMessage answers at once (returnImmediately) and
            # the answer is polled: a blocking call would hold the lane for the
            # remote task's whole run.
            config = ClientConfig(streaming=self.streaming, polling=not self.streaming,
                                  httpx_client=http,
                                  supported_protocol_bindings=list(remote_card.BINDINGS))
            client = ClientFactory(config).create(self.card)
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    await client.close()
        finally:
            await http.aclose()


def remote_of(settings: Settings, agent_id: str, row: asyncpg.Record) -> Remote:
    return Remote(Agent(agent_id, int(row["owner_id"]), str(row["kind"])),
                  remote_card.to_proto(row["card"]),
                  a2a_remotes.open_headers(settings, row["headers"]))


def outbound(msg: dict[str, Any], task: asyncpg.Record | None) -> Message:
    """The mesh message as the A2A message sent to the remote."""
    body: dict[str, Any] = {
        "messageId": msg["message_id"], "role": "ROLE_USER",
        "parts": [mapping.part_to_a2a(p) for p in msg["parts"]],
        "metadata": {**(msg.get("metadata") or {}), "agent-mesh.sender": msg["sender"],
                     "agent-mesh.task_id": msg["task_id"]},
    }
    if task is not None and task["remote_task_id"]:
        body["taskId"] = task["remote_task_id"]
    if task is not None and task["remote_context_id"]:
        body["contextId"] = task["remote_context_id"]
    else:  # the mesh's conversation; also how a retry finds the task (ListTasks)
        body["contextId"] = msg["context_id"]
    return ParseDict(body, Message())


def remote_ids(event: StreamResponse) -> tuple[str | None, str | None]:
    which = event.WhichOneof("payload")
    if which == "task":
        return event.task.id or None, event.task.context_id or None
    if which in ("status_update", "artifact_update"):
        inner = getattr(event, which)
        return inner.task_id or None, inner.context_id or None
    if which == "message":
        return event.message.task_id or None, event.message.context_id or None
    return None, None


async def refresh_card(settings: Settings, pool: asyncpg.Pool, agent_id: str,
                       row: asyncpg.Record) -> None:
    """Re-validate a card older than the max age with its ETag (a 304 is cheap);
    a card that cannot be fetched now keeps the one stored."""
    if float(row["card_age"]) < settings.a2a_bridge_card_max_age_seconds:
        return
    headers = a2a_remotes.open_headers(settings, row["headers"])
    try:
        async with guarded_http.client(allow_private=settings.webhook_allow_private,
                                       headers=headers,
                                       timeout=settings.webhook_timeout_seconds) as http:
            fetched = await remote_card.fetch(http, row["card_url"], etag=row["card_etag"])
    except (remote_card.CardRefused, TargetRefused, httpx.HTTPError, OSError) as exc:
        log.info("a2a %s: card not refreshed (%s)", agent_id, describe(exc))
        return
    await store.card_seen(pool, agent_id, fetched.card, fetched.etag)
