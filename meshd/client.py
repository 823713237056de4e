"""Async SDK for the agent side of the gateway (``/v1/mesh/*``): one method per endpoint.

Retries, token renewal and error mapping live in :mod:`meshd.transport`; here each
method builds its request and parses the answer into :mod:`meshd.models`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, SSEError

from meshd.auth import TokenSource
from meshd.errors import MeshConnectionError, MeshError
from meshd.ids import new_artifact_id, new_message_id, new_task_id
from meshd.models import InboxEvent, InboxPage, Message, Part, Task, TaskPage, data_part, text_part
from meshd.transport import GatewayTransport

__all__ = ["MeshClient", "TaskPage"]


def _seg(value: str) -> str:
    """One URL path segment (agent ids contain ``@``, which is fine; ``/`` is not)."""
    return quote(value, safe="@:._-")


def _parts(text: str | None, parts: list[Part] | None, data: dict[str, Any] | None) -> list[Part]:
    out: list[Part] = list(parts or [])
    if text is not None:
        out.insert(0, text_part(text))
    if data is not None:
        out.append(data_part(data))
    if not out:
        raise ValueError("a message needs at least one part: pass text=, data= or parts=")
    return out


class MeshClient:
    """One agent's connection to the gateway.

    Give ``api_key`` (``mk_<key_id>_<secret>``, the normal case) or ``token``
    (a bearer token used as-is, e.g. an owner's login token). Use as an async
    context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        max_attempts: int = 5,
        retry_initial: float = 0.25,
        retry_max: float = 8.0,
        max_retry_after: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise MeshError("no gateway URL: set MESH_URL or run `mesh login`")
        if not api_key and not token:
            raise MeshError("no credentials: set MESH_API_KEY (or MESH_TOKEN) or run `mesh login`")
        self.base_url = base_url.rstrip("/")
        self._gw = GatewayTransport(
            self.base_url,
            api_key=api_key,
            token=token,
            timeout=timeout,
            max_attempts=max_attempts,
            retry_initial=retry_initial,
            retry_max=retry_max,
            max_retry_after=max_retry_after,
            transport=transport,
        )
        self._call = self._gw.call
        self._agent_id: str | None = None

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> MeshClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._gw.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        return self._gw.http

    @property
    def auth(self) -> TokenSource:
        return self._gw.auth

    # -- identity ------------------------------------------------------------
    async def authenticate(self) -> str:
        """Make sure a token is at hand; returns this agent's id."""
        await self.auth.token()
        return await self.agent_id()

    async def agent_id(self) -> str:
        if self._agent_id is None:
            await self.auth.token()
            info = self.auth.info
            # A static token (an owner's login) says nobody's name: ask the gateway.
            self._agent_id = info.agent_id if info and info.agent_id else str((await self.me())["agent_id"])
        return self._agent_id

    # -- presence ------------------------------------------------------------
    async def heartbeat(self) -> dict[str, Any]:
        """Mark the agent alive (``active``; a draining agent stays draining)."""
        return await self._call("POST", "/v1/mesh/heartbeat")

    async def go_online(self) -> dict[str, Any]:
        """Come online: ``active`` again, also after draining."""
        return await self._call("POST", "/v1/mesh/online")

    async def go_offline(self) -> dict[str, Any]:
        """Tell the gateway this agent is going away (status → ``draining``)."""
        return await self._call("DELETE", "/v1/mesh/online")

    async def go_inactive(self) -> dict[str, Any]:
        """Tell the gateway this agent stopped, its work finished (status → ``inactive``)."""
        return await self._call("POST", "/v1/mesh/offline")

    # -- who's who -----------------------------------------------------------
    async def me(self) -> dict[str, Any]:
        body: dict[str, Any] = await self._call("GET", "/v1/mesh/me")
        self._agent_id = str(body["agent_id"])
        return body

    async def friends(self) -> dict[str, Any]:
        """``{"friends": [...], "incoming_requests": [...], "outgoing_requests": [...]}``."""
        return await self._call("GET", "/v1/mesh/friends")

    async def request_friend(self, to_agent_id: str, note: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"to_agent_id": to_agent_id}
        if note:
            body["note"] = note
        # Not idempotent: a duplicate would be a second request (the gateway answers 409).
        return await self._call("POST", "/v1/mesh/friends/requests", json=body, idempotent=False)

    async def accept_friend(self, request_id: str) -> dict[str, Any]:
        return await self._call("POST", f"/v1/mesh/friends/requests/{_seg(request_id)}/accept")

    async def reject_friend(self, request_id: str) -> dict[str, Any]:
        return await self._call("POST", f"/v1/mesh/friends/requests/{_seg(request_id)}/reject")

    async def remove_friend(self, agent_id: str) -> None:
        await self._call("DELETE", f"/v1/mesh/friends/{_seg(agent_id)}")

    async def groups(self) -> list[dict[str, Any]]:
        return (await self._call("GET", "/v1/mesh/groups"))["groups"]

    async def roster(self, group_id: str) -> dict[str, Any]:
        """The group (``group_id``, ``name``) with its ``members``."""
        return await self._call("GET", f"/v1/mesh/groups/{_seg(group_id)}/roster")

    async def card(self, agent_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/mesh/agents/{_seg(agent_id)}/card")

    # -- teams ---------------------------------------------------------------
    async def post_group(
        self,
        group_id: str,
        text: str | None = None,
        *,
        parts: list[Part] | None = None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Post to a group you belong to: every other member gets a ``group.message``."""
        body: dict[str, Any] = {"parts": _parts(text, parts, data)}
        if metadata is not None:
            body["metadata"] = metadata
        # Not idempotent: the gateway keeps no id to recognise a retry by.
        return await self._call("POST", f"/v1/mesh/groups/{_seg(group_id)}/messages", json=body,
                                idempotent=False)

    async def broadcast(
        self,
        text: str | None = None,
        *,
        to_agent_ids: list[str] | None = None,
        group_id: str | None = None,
        policy: str = "all",
        n: int | None = None,
        timeout_seconds: int = 300,
        parts: list[Part] | None = None,
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Ask several agents (a list, or a group's other members) the same thing: one task
        each; a ``broadcast.completed`` arrives when ``policy`` (all|any|n) is met, can no
        longer be met, or ``timeout_seconds`` pass."""
        body: dict[str, Any] = {"message": {"parts": _parts(text, parts, data)},
                                "policy": policy, "timeout_seconds": timeout_seconds}
        if to_agent_ids is not None:
            body["to_agent_ids"] = list(to_agent_ids)
        if group_id is not None:
            body["group_id"] = group_id
        if n is not None:
            body["n"] = n
        return await self._call("POST", "/v1/mesh/broadcasts", json=body, idempotent=False)

    async def get_broadcast(self, broadcast_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/mesh/broadcasts/{_seg(broadcast_id)}")

    async def timeline(self, context_id: str, *, cursor: str | None = None,
                       limit: int | None = None) -> dict[str, Any]:
        """One page of a context's timeline: ``{"entries": [...], "next_cursor": ...}``."""
        return await self._call("GET", f"/v1/mesh/contexts/{_seg(context_id)}/timeline",
                                params={"cursor": cursor, "limit": limit})

    async def directory(self, q: str = "", *, skill: str | None = None,
                        limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        """Listed agents matching ``q`` and ``skill``: ``{"agents": [...], "next_cursor"}``."""
        return await self._call("GET", "/v1/mesh/directory",
                                params={"q": q, "skill": skill, "limit": limit, "cursor": cursor})

    # -- tasks ---------------------------------------------------------------
    async def send(
        self,
        to_agent_id: str,
        text: str | None = None,
        *,
        parts: list[Part] | None = None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        message_id: str | None = None,
    ) -> Task:
        """Open a task with ``to_agent_id`` carrying a first message (``Task.message``)."""
        me = await self.agent_id()
        message: dict[str, Any] = {
            "message_id": message_id or new_message_id(me),
            "parts": _parts(text, parts, data),
        }
        if metadata is not None:
            message["metadata"] = metadata
        body: dict[str, Any] = {
            "to_agent_id": to_agent_id,
            "message": message,
            "task_id": task_id or new_task_id(me),
        }
        if context_id:
            body["context_id"] = context_id
        # A retry whose first attempt committed gets the stored task back (200).
        return Task.model_validate(await self._call("POST", "/v1/mesh/tasks", json=body))

    async def get_task(self, task_id: str) -> Task:
        return Task.model_validate(await self._call("GET", f"/v1/mesh/tasks/{_seg(task_id)}"))

    async def list_tasks(
        self,
        *,
        state: str | None = None,
        context_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> TaskPage:
        params = {"state": state, "context_id": context_id, "cursor": cursor, "limit": limit}
        return TaskPage.model_validate(await self._call("GET", "/v1/mesh/tasks", params=params))

    async def reply(
        self,
        task_id: str,
        text: str | None = None,
        *,
        parts: list[Part] | None = None,
        data: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        message_id: str | None = None,
    ) -> Message:
        """Add a message to a task (201; 200 when ``message_id`` was already stored)."""
        me = await self.agent_id()
        body: dict[str, Any] = {
            "message_id": message_id or new_message_id(me),
            "parts": _parts(text, parts, data),
        }
        if metadata is not None:
            body["metadata"] = metadata
        out = await self._call("POST", f"/v1/mesh/tasks/{_seg(task_id)}/messages", json=body)
        return Message.model_validate(out)

    async def set_status(
        self,
        task_id: str,
        state: str,
        message: str | None = None,
        *,
        parts: list[Part] | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Move a task to ``state`` (a compare-and-set on the gateway; illegal moves → 409).

        Retried like every write: the gateway answers a repeat of a change that
        already took effect with the original result, so a retry is safe.
        """
        body: dict[str, Any] = {"state": state}
        if message is not None or parts:
            me = await self.agent_id()
            body["message"] = {
                "message_id": message_id or new_message_id(me),
                "parts": _parts(message, parts, None),
            }
            if metadata is not None:
                body["message"]["metadata"] = metadata
        return await self._call("POST", f"/v1/mesh/tasks/{_seg(task_id)}/status", json=body)

    async def add_artifact(
        self,
        task_id: str,
        parts: list[Part],
        *,
        artifact_id: str | None = None,
        name: str | None = None,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        me = await self.agent_id()
        body: dict[str, Any] = {"artifact_id": artifact_id or new_artifact_id(me), "parts": parts}
        for k, v in (("name", name), ("description", description), ("metadata", metadata)):
            if v is not None:
                body[k] = v
        return await self._call("POST", f"/v1/mesh/tasks/{_seg(task_id)}/artifacts", json=body)

    # -- inbox ---------------------------------------------------------------
    async def poll_inbox(
        self, after: int | None = None, *, wait: float | None = None, limit: int | None = None
    ) -> InboxPage:
        """One long-poll: events after ``after`` (waits up to ``wait`` s, ≤ 30, for the first)."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        timeout = None
        if wait:
            params["wait"] = int(wait) if float(wait).is_integer() else round(wait, 3)
            timeout = self._gw.timeout + float(wait)
        out = await self._call("GET", "/v1/mesh/inbox", params=params, request_timeout=timeout)
        return InboxPage.model_validate(out)

    async def report_run(self, run: dict[str, Any]) -> dict[str, Any]:
        """Report a run of this agent's runtime (idempotent on ``run_id``)."""
        return await self._call("POST", "/v1/mesh/runs", json=run)

    async def ack(self, seq: int) -> dict[str, Any]:
        """Record that every event up to ``seq`` was processed (monotone)."""
        return await self._call("POST", "/v1/mesh/inbox/ack", json={"seq": int(seq)})

    async def claim(self, seq: int, consumer: str, ahead: int = 1) -> dict[str, Any]:
        """Claim event ``seq`` (and ``ahead - 1`` after it) before handling it, or
        renew the claim: ``{"seq", "claimed", "through", "lapses_in"}``; ``claimed``
        false: another reader of this agent, a remote MCP client, took it."""
        payload: dict[str, Any] = {"seq": int(seq), "consumer": consumer}
        if ahead > 1:
            payload["ahead"] = int(ahead)
        return await self._call("POST", "/v1/mesh/inbox/claim", json=payload)

    async def stream(
        self,
        after: int | None = None,
        *,
        read_timeout: float = 60.0,
        on_open: Callable[[], None] | None = None,
    ) -> AsyncIterator[InboxEvent]:
        """Follow the inbox over SSE (one connection, no reconnect).

        Yields events in seq order after ``after`` (or after the acked cursor).
        Ends when the server closes the stream; raises :class:`MeshConnectionError`
        when the connection breaks and :class:`MeshHTTPError` when it is refused.
        ``read_timeout`` must exceed the server's keep-alive interval;
        ``on_open`` is called once the gateway accepted the stream.
        """
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-store"}
        params = {}
        if after is not None:
            headers["Last-Event-ID"] = str(after)
            params["after"] = str(after)
        try:
            async with self._gw.open_stream(
                "/v1/mesh/inbox/stream", headers=headers, params=params, read_timeout=read_timeout
            ) as resp:
                if on_open is not None:
                    on_open()
                async for sse in EventSource(resp).aiter_sse():
                    if sse.data:  # keep-alive comments carry none
                        yield InboxEvent.model_validate(json.loads(sse.data))
        except (httpx.TransportError, SSEError) as e:
            raise MeshConnectionError(f"inbox stream broke: {e!r}") from e
