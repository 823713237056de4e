"""A real A2A server outside the mesh, for the bridge's tests: the official SDK's
request handler and routes with a small scripted AgentExecutor, served by
uvicorn on a free port in the test's event loop.

What the executor does depends on the text it is sent:

* ``ask …``     → ``input-required`` ("which colour?"); the reply completes it;
* ``fail …``    → ``failed`` with the message "the remote broke: …";
* ``stream N``  → N status messages "part i" and N artifacts, then ``completed``;
  with ``stream N gated`` it waits for :meth:`Remote.open_gate` after the first;
* ``gate …``    → ``working``, then waits for :meth:`Remote.open_gate`, then answers;
* anything else → ``completed`` with "you said: …".

The executor logs every message id it is handed (:attr:`Remote.received`): how
the tests count that the bridge forwarded each mesh message once. The task
store outlives :meth:`Remote.stop`, so a restart on the same port finds the
tasks — and the executors in flight go on meanwhile — as a remote whose HTTP
front restarted would.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes.agent_card_routes import create_agent_card_routes
from a2a.server.routes.jsonrpc_routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCard, TaskState
from google.protobuf.json_format import ParseDict
from starlette.applications import Starlette

from devstack.process import free_port


class ScriptedExecutor(AgentExecutor):
    def __init__(self, remote: Remote) -> None:
        self.remote = remote

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        assert msg is not None
        self.remote.received.append(msg.message_id)
        text = context.get_user_input().strip()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(msg)
            await event_queue.enqueue_event(task)
        self.remote.task_of[msg.message_id] = task.id
        up = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str) -> Any:
            return new_text_message(words, context_id=task.context_id, task_id=task.id)

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await up.start_work()
            await up.complete(say(f"colour noted: {text}"))
            return
        await up.start_work()
        words = text.split()
        head = words[0] if words else ""
        if head == "ask":
            await up.requires_input(say("which colour?"))
        elif head == "fail":
            await up.failed(say(f"the remote broke: {' '.join(words[1:])}"))
        elif head == "stream":
            n = int(words[1])
            for i in range(n):
                await up.update_status(TaskState.TASK_STATE_WORKING, say(f"part {i}"))
                await up.add_artifact([new_text_part(f"chunk {i}")], artifact_id=f"art-{i}",
                                      name=f"chunk-{i}")
                if i == 0 and "gated" in words:
                    await self.remote.gate.wait()
            await up.complete(say("stream done"))
        elif head == "gate":
            await self.remote.gate.wait()
            await up.complete(say(f"you said: {text}"))
        else:
            await up.complete(say(f"you said: {text}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            self.remote.canceled.append(task.id)
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def card(url: str, *, streaming: bool) -> AgentCard:
    return ParseDict({
        "name": "Remote helper", "description": "An A2A agent outside the mesh",
        "version": "1.0.0",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC",
                                 "protocolVersion": "1.0"}],
        "capabilities": {"streaming": streaming},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Says it back",
                    "tags": ["test"]}],
    }, AgentCard())


class Remote:
    """The server; ``streaming`` is what its card says."""

    def __init__(self, *, streaming: bool = True, api_key: str | None = None) -> None:
        self.port = free_port()
        self.streaming = streaming
        self.api_key = api_key
        self.received: list[str] = []
        self.task_of: dict[str, str] = {}  # message id → the remote task it went to
        self.canceled: list[str] = []  # remote task ids CancelTask reached
        self.gate = asyncio.Event()
        self.unauthorized = 0
        self.card_fetches = 0
        self.not_modified = 0
        self.store = InMemoryTaskStore()
        self.card = card(f"{self.url}/a2a", streaming=streaming)
        self.handler = DefaultRequestHandler(agent_executor=ScriptedExecutor(self),
                                             task_store=self.store, agent_card=self.card)
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def card_url(self) -> str:
        return f"{self.url}/.well-known/agent-card.json"

    def open_gate(self) -> None:
        self.gate.set()

    def _app(self) -> Starlette:
        app = Starlette(routes=[*create_agent_card_routes(self.card),
                                *create_jsonrpc_routes(self.handler, "/a2a")])
        remote = self

        async def guard(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                if scope["path"].startswith("/.well-known"):
                    remote.card_fetches += 1
                    if b"if-none-match" in headers:
                        remote.not_modified += 1
                if remote.api_key is not None and \
                        headers.get(b"x-api-key", b"").decode() != remote.api_key:
                    remote.unauthorized += 1
                    await send({"type": "http.response.start", "status": 401,
                                "headers": [(b"content-type", b"text/plain")]})
                    await send({"type": "http.response.body", "body": b"no key"})
                    return
            await app(scope, receive, send)

        return guard  # type: ignore[return-value]

    async def start(self) -> Remote:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=0.2)
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the A2A remote did not start")
            await asyncio.sleep(0.02)
        return self

    async def stop(self) -> None:
        """Stop answering (open streams are cut); the tasks and executors go on."""
        if self._server is not None and self._task is not None:
            # Cut every open connection (an SSE stream too), as a dying process would.
            for connection in list(self._server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()
            self._server.should_exit = True
            self._server.force_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._server = None
        self._task = None

    async def __aenter__(self) -> Remote:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.gate.set()
        await self.stop()
