"""The official a2a-sdk client, pointed at a mesh agent through the real gateway."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
from a2a.client import A2ACardResolver, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse

SEQ_KEY = "agent-mesh.seq"


@contextlib.asynccontextmanager
async def a2a_client(gateway: str, agent_id: str, headers: dict[str, str], *,
                     streaming: bool = True, binding: str = "JSONRPC") -> AsyncIterator[Client]:
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, f"{gateway}/a2a/{agent_id}").get_agent_card()
        config = ClientConfig(httpx_client=http, streaming=streaming,
                              supported_protocol_bindings=[binding])
        yield ClientFactory(config).create(card)


def text_message(text: str, *, message_id: str | None = None,
                 task_id: str = "") -> SendMessageRequest:
    msg = Message(message_id=message_id or str(uuid.uuid4()), role=Role.ROLE_USER,
                  parts=[Part(text=text)], task_id=task_id)
    return SendMessageRequest(message=msg)


def resume_from(seq: int) -> ClientCallContext:
    return ClientCallContext(service_parameters={"Last-Event-ID": str(seq)})


def inner(event: StreamResponse) -> Any:
    """The one event a StreamResponse holds (task, message, status or artifact update)."""
    return getattr(event, event.WhichOneof("payload"))


def seq_of(event: StreamResponse) -> int:
    return int(inner(event).metadata[SEQ_KEY])
