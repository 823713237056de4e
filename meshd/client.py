"""Async SDK for the agent side of the gateway (DESIGN §4, ``/v1/mesh/*``).

Transient failures are retried with backoff: a connection that could not be
opened, 502/503/504, and 429 (after its ``Retry-After``). A request that may
have reached the server before the connection broke is retried only when it is
idempotent — reads, acks, heartbeats, and writes that carry a client-generated
``message_id``/``task_id``, which the gateway recognises on a retry (same id and
content → the stored record). A 401 renews the token once and repeats the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, SSEError

from meshd.auth import TokenSource
from meshd.backoff import Backoff, parse_retry_after
from meshd.errors import (
    AuthError,
    ConflictError,
    MeshConnectionError,
    MeshError,
    MeshHTTPError,
    error_class,
)
from meshd.ids import new_artifact_id, new_message_id, new_task_id
from meshd.models import InboxEvent, InboxPage, Message, Part, Task, TokenInfo, data_part, text_part

log = logging.getLogger("meshd.client")

USER_AGENT = "meshd/0.1.0"
# Sent but maybe not processed: retry only idempotent calls.
_AMBIGUOUS = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
# Never reached the server: always safe to retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_RETRY_ALWAYS = frozenset({429, 503})
_RETRY_IF_IDEMPOTENT = frozenset({502, 504})


def _seg(value: str) -> str:
    """One URL path segment (agent ids contain ``@``, which is fine; ``/`` is not)."""
    return quote(value, safe="@:._-")


def _as_list(body: Any, *keys: str) -> list[dict[str, Any]]:
    """A collection endpoint's items, whether the body is a list or ``{"<key>": [...]}``."""
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        for k in (*keys, "items", "data"):
            if isinstance(body.get(k), list):
                return body[k]
    return []


def _parts(text: str | None, parts: list[Part] | None, data: dict[str, Any] | None) -> list[Part]:
    out: list[Part] = list(parts or [])
    if text is not None:
        out.insert(0, text_part(text))
    if data is not None:
        out.append(data_part(data))
    if not out:
        raise ValueError("a message needs at least one part: pass text=, data= or parts=")
    return out


def problem_from_response(resp: httpx.Response, method: str, path: str) -> MeshHTTPError:
    body: Any = None
    try:
        body = resp.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict):
        title = str(body.get("title") or resp.reason_phrase or "error")
        detail = body.get("detail")
        if detail is None and "errors" in body:
            detail = json.dumps(body["errors"])
        detail = str(detail or "")
        ptype = str(body.get("type") or "about:blank")
    else:
        body = {}
        title = resp.reason_phrase or "error"
        detail = resp.text[:500] if resp.content else ""
        ptype = "about:blank"
    cls = error_class(resp.status_code)
    return cls(
        resp.status_code,
        title,
        detail,
        type=ptype,
        problem=body,
        method=method,
        path=path,
        retry_after=parse_retry_after(resp.headers.get("retry-after")),
    )


@dataclass(frozen=True, slots=True)
class _Outcome:
    body: Any
    status: int
    attempts: int


@dataclass(frozen=True, slots=True)
class TaskPage:
    tasks: list[Task]
    next_cursor: str | None


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
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
            transport=transport,
        )
        self._timeout = timeout
        self._max_attempts = max(1, max_attempts)
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._max_retry_after = max_retry_after
        self._api_key = api_key
        self.auth = TokenSource(self._fetch_token if api_key else None, static_token=token)
        self._agent_id: str | None = None

    # -- lifecycle -----------------------------------------------------------
    async def __aenter__(self) -> MeshClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http

    # -- auth ----------------------------------------------------------------
    async def _fetch_token(self) -> TokenInfo:
        try:
            out = await self._call("POST", "/v1/auth/token", json={"api_key": self._api_key}, auth=False)
        except AuthError as e:
            raise AuthError(
                e.status,
                e.title,
                (e.detail or "the API key was rejected")
                + " — check MESH_API_KEY; the key may be revoked or its agent deleted",
                type=e.type,
                problem=e.problem,
                method=e.method,
                path=e.path,
            ) from None
        info = TokenInfo.from_json(out.body)
        if info.agent_id:
            self._agent_id = info.agent_id
        return info

    async def authenticate(self) -> str:
        """Make sure a token is at hand; returns this agent's id."""
        await self.auth.token()
        return await self.agent_id()

    async def agent_id(self) -> str:
        if self._agent_id is None:
            await self.auth.token()
        if self._agent_id is None:
            me = await self.me()
            self._agent_id = str(me["agent_id"])
        return self._agent_id

    # -- transport -----------------------------------------------------------
    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool = True,
        auth: bool = True,
        request_timeout: float | None = None,
    ) -> _Outcome:
        backoff = Backoff(self._retry_initial, self._retry_max, jitter=0.2)
        attempts = 0
        renewed = False
        if params:
            params = {k: v for k, v in params.items() if v is not None}
        while True:
            attempts += 1
            headers = {}
            token = None
            if auth:
                token = await self.auth.token()
                headers["Authorization"] = f"Bearer {token}"
            error: MeshError
            retryable: bool
            try:
                resp = await self._http.request(
                    method,
                    path,
                    json=json,
                    params=params,
                    headers=headers,
                    timeout=(httpx.USE_CLIENT_DEFAULT if request_timeout is None else request_timeout),
                )
            except _NOT_SENT as e:
                error = MeshConnectionError(f"cannot reach the gateway at {self.base_url}: {e!r}")
                retryable = True
            except _AMBIGUOUS as e:
                error = MeshConnectionError(f"{method} {path}: connection lost: {e!r}")
                retryable = idempotent
            else:
                if resp.status_code < 400:
                    body = None
                    if resp.content and resp.status_code != 204:
                        try:
                            body = resp.json()
                        except ValueError:
                            body = resp.text
                    return _Outcome(body, resp.status_code, attempts)
                if resp.status_code == 401 and auth and not renewed and self.auth.can_refresh:
                    renewed = True
                    attempts -= 1
                    log.info("401 from %s %s: renewing the token", method, path)
                    await self.auth.refresh(stale=token)
                    continue
                error = problem_from_response(resp, method, path)
                status = resp.status_code
                retryable = status in _RETRY_ALWAYS or (idempotent and status in _RETRY_IF_IDEMPOTENT)
            if not retryable or attempts >= self._max_attempts:
                raise error
            delay = backoff.next()
            if isinstance(error, MeshHTTPError) and error.retry_after is not None:
                delay = min(max(error.retry_after, 0.0), self._max_retry_after)
            log.info("%s %s failed (%s); retry %d in %.2fs", method, path, error, attempts, delay)
            await asyncio.sleep(delay)

    async def _get(self, path: str, **params: Any) -> Any:
        return (await self._call("GET", path, params=params)).body

    # -- presence ------------------------------------------------------------
    async def heartbeat(self) -> Any:
        """Mark the agent alive (``active``; a draining agent stays draining)."""
        return (await self._call("POST", "/v1/mesh/heartbeat")).body

    async def go_online(self) -> Any:
        """Come online: ``active`` again, also after draining."""
        return (await self._call("POST", "/v1/mesh/online")).body

    async def go_offline(self) -> Any:
        """Tell the gateway this agent is going away (status → ``draining``)."""
        return (await self._call("DELETE", "/v1/mesh/online")).body

    # -- who's who -----------------------------------------------------------
    async def me(self) -> dict[str, Any]:
        body = await self._get("/v1/mesh/me")
        if isinstance(body, dict) and body.get("agent_id"):
            self._agent_id = str(body["agent_id"])
        return body

    async def friends(self) -> dict[str, Any]:
        """``{"friends": [...], "incoming_requests": [...], "outgoing_requests": [...]}``."""
        body = await self._get("/v1/mesh/friends")
        if isinstance(body, list):
            return {"friends": body, "incoming_requests": [], "outgoing_requests": []}
        return body

    async def request_friend(self, to_agent_id: str, note: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"to_agent_id": to_agent_id}
        if note:
            body["note"] = note
        # Not idempotent: a duplicate would be a second request (the gateway answers 409).
        out = await self._call("POST", "/v1/mesh/friends/requests", json=body, idempotent=False)
        return out.body

    async def accept_friend(self, request_id: str) -> Any:
        path = f"/v1/mesh/friends/requests/{_seg(request_id)}/accept"
        return (await self._call("POST", path)).body

    async def reject_friend(self, request_id: str) -> Any:
        path = f"/v1/mesh/friends/requests/{_seg(request_id)}/reject"
        return (await self._call("POST", path)).body

    async def remove_friend(self, agent_id: str) -> Any:
        return (await self._call("DELETE", f"/v1/mesh/friends/{_seg(agent_id)}")).body

    async def groups(self) -> list[dict[str, Any]]:
        return _as_list(await self._get("/v1/mesh/groups"), "groups")

    async def roster(self, group_id: str) -> dict[str, Any]:
        """The group (``group_id``, ``name``) with its ``members``."""
        return await self._get(f"/v1/mesh/groups/{_seg(group_id)}/roster")

    async def card(self, agent_id: str) -> dict[str, Any]:
        return await self._get(f"/v1/mesh/agents/{_seg(agent_id)}/card")

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
        """Open a task with ``to_agent_id`` carrying a first message."""
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
        try:
            out = await self._call("POST", "/v1/mesh/tasks", json=body)
        except ConflictError:
            # A retry whose first attempt committed: the task is ours, with our message.
            existing = await self._existing_task(body["task_id"], message["message_id"])
            if existing is None:
                raise
            return existing
        return Task.from_json(out.body)

    async def _existing_task(self, task_id: str, message_id: str) -> Task | None:
        try:
            task = await self.get_task(task_id)
        except MeshHTTPError:
            return None
        if task.messages and task.messages[0].message_id == message_id:
            return task
        return None

    create_task = send

    async def get_task(self, task_id: str) -> Task:
        return Task.from_json(await self._get(f"/v1/mesh/tasks/{_seg(task_id)}"))

    async def list_tasks(
        self,
        *,
        state: str | None = None,
        context_id: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> TaskPage:
        body = await self._get(
            "/v1/mesh/tasks", state=state, context_id=context_id, cursor=cursor, limit=limit
        )
        items = _as_list(body, "tasks")
        nxt = body.get("next_cursor") if isinstance(body, dict) else None
        return TaskPage([Task.from_json(t) for t in items], nxt)

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
        b = out.body if isinstance(out.body, dict) else {}
        if isinstance(b.get("message"), dict):
            b = b["message"]
        return Message.from_json(b)

    async def set_status(
        self,
        task_id: str,
        state: str,
        message: str | None = None,
        *,
        parts: list[Part] | None = None,
        message_id: str | None = None,
    ) -> dict[str, Any]:
        """Move a task to ``state`` (a compare-and-set on the gateway; illegal moves → 409)."""
        body: dict[str, Any] = {"state": state}
        if message is not None or parts:
            me = await self.agent_id()
            body["message"] = {
                "message_id": message_id or new_message_id(me),
                "parts": _parts(message, parts, None),
            }
        try:
            out = await self._call("POST", f"/v1/mesh/tasks/{_seg(task_id)}/status", json=body)
        except ConflictError:
            # When an earlier attempt of this very call committed, the task is already there.
            # We cannot tell that from "someone else moved it", and both leave the state asked for.
            task = await self.get_task(task_id)
            if task.state != state:
                raise
            return task.raw
        return out.body if isinstance(out.body, dict) else {}

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
        out = await self._call("POST", f"/v1/mesh/tasks/{_seg(task_id)}/artifacts", json=body)
        return out.body if isinstance(out.body, dict) else {}

    # -- inbox ---------------------------------------------------------------
    async def poll_inbox(
        self, after: int | None = None, *, wait: float | None = None, limit: int | None = None
    ) -> InboxPage:
        """One long-poll: events after ``after`` (waits up to ``wait`` s, ≤ 30, for the first)."""
        params: dict[str, Any] = {"after": after, "limit": limit}
        timeout = None
        if wait:
            params["wait"] = int(wait) if float(wait).is_integer() else round(wait, 3)
            timeout = self._timeout + float(wait)
        out = await self._call("GET", "/v1/mesh/inbox", params=params, request_timeout=timeout)
        return InboxPage.from_json(out.body or {}, after)

    async def ack(self, seq: int) -> Any:
        """Record that every event up to ``seq`` was processed (monotone)."""
        return (await self._call("POST", "/v1/mesh/inbox/ack", json={"seq": int(seq)})).body

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
        renewed = False
        while True:
            token = await self.auth.token()
            headers = {
                "Authorization": f"Bearer {token}",
                "Accept": "text/event-stream",
                "Cache-Control": "no-store",
            }
            params = {}
            if after is not None:
                headers["Last-Event-ID"] = str(after)
                params["after"] = str(after)
            timeout = httpx.Timeout(self._timeout, read=read_timeout)
            try:
                async with self._http.stream(
                    "GET", "/v1/mesh/inbox/stream", headers=headers, params=params, timeout=timeout
                ) as resp:
                    if resp.status_code == 401 and not renewed and self.auth.can_refresh:
                        renewed = True
                        await resp.aread()
                        await self.auth.refresh(stale=token)
                        continue
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise problem_from_response(resp, "GET", "/v1/mesh/inbox/stream")
                    if on_open is not None:
                        on_open()
                    async for sse in EventSource(resp).aiter_sse():
                        if not sse.data:
                            continue
                        data = json.loads(sse.data)
                        if "seq" not in data and sse.id:
                            data["seq"] = int(sse.id)
                        if "type" not in data and sse.event != "message":
                            data["type"] = sse.event
                        event = InboxEvent.from_json(data)
                        after = event.seq
                        yield event
                    return
            except (httpx.TransportError, SSEError) as e:
                raise MeshConnectionError(f"inbox stream broke: {e!r}") from e
