"""A scripted stand-in for the Anthropic Messages API (no model is reachable from test machines).

The real Claude Code CLI (bundled with ``claude-agent-sdk``) is pointed at it with
``ANTHROPIC_BASE_URL``; it answers ``POST /v1/messages`` with the same streaming
events as the real API (``message_start``, ``content_block_start``/``delta``/``stop``,
``message_delta`` with ``stop_reason`` and ``usage``, ``message_stop``), or one JSON
body when the request is not streaming, and ``POST /v1/messages/count_tokens``.

What it answers is chosen per test by a *script*: a function from the request
body to a :class:`Reply` (text and/or tool calls, and the usage to report, which
is what the CLI computes cost from). Every request is recorded, so a test can
assert what the model was shown, and a test can await "the n-th request" as an
event instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-sonnet-4-5"


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass
class Reply:
    text: str = ""
    tools: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 10
    output_tokens: int = 5

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tools else "end_turn"


@dataclass
class ApiError:
    """An error answer of the API (e.g. 400 invalid_request_error, which the CLI does not retry)."""

    status: int = 400
    type: str = "invalid_request_error"
    message: str = "scripted failure"


Script = Callable[["Request"], "Reply | ApiError"]


@dataclass
class Request:
    """One ``POST /v1/messages`` as the CLI sent it."""

    body: dict[str, Any]
    # Wall-clock arrival (time.time()): benchmarks compare it with other processes' clocks.
    arrived: float = field(default_factory=time.time)

    @property
    def tool_names(self) -> list[str]:
        return [t.get("name", "") for t in self.body.get("tools") or []]

    @property
    def is_agent_turn(self) -> bool:
        """A turn of the agent loop (it offers tools), not a side call such as a title."""
        return bool(self.body.get("tools"))

    @property
    def system(self) -> str:
        s = self.body.get("system")
        if isinstance(s, list):
            return "\n".join(b.get("text", "") for b in s if isinstance(b, dict))
        return s or ""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    def texts(self) -> list[str]:
        """Every text the conversation holds (user prompts, assistant texts, tool results)."""
        out: list[str] = []
        for m in self.messages:
            content = m.get("content")
            if isinstance(content, str):
                out.append(content)
                continue
            for block in content or []:
                if block.get("type") == "text":
                    out.append(block.get("text", ""))
                elif block.get("type") == "tool_result":
                    c = block.get("content")
                    if isinstance(c, str):
                        out.append(c)
                    else:
                        out.extend(x.get("text", "") for x in c or [] if isinstance(x, dict))
        return out

    @property
    def all_text(self) -> str:
        return "\n".join(self.texts())

    def _prompt_index(self) -> int:
        """Index of the latest user message that is a prompt (not tool results)."""
        for i in range(len(self.messages) - 1, -1, -1):
            m = self.messages[i]
            if m.get("role") != "user":
                continue
            content = m.get("content")
            if isinstance(content, str) or any(b.get("type") == "text" for b in content or []):
                if not any(b.get("type") == "tool_result" for b in content or [] if isinstance(b, dict)):
                    return i
        return 0

    @property
    def prompt(self) -> str:
        """The prompt of the current run (the runtime's wake-up prompt)."""
        if not self.messages:
            return ""
        content = self.messages[self._prompt_index()].get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content or [] if b.get("type") == "text")

    def last_tool_results(self) -> list[dict[str, Any]]:
        """The tool_result blocks of the last user message (answers to the previous tool calls)."""
        for m in reversed(self.messages):
            if m.get("role") != "user" or isinstance(m.get("content"), str):
                continue
            results = [b for b in m["content"] if b.get("type") == "tool_result"]
            return results
        return []

    def tool_uses(self, *, this_run: bool = True) -> list[dict[str, Any]]:
        """The tool_use blocks of the assistant turns (of this run only, by default)."""
        start = self._prompt_index() if this_run else 0
        return [
            b
            for m in self.messages[start:]
            if m.get("role") == "assistant" and isinstance(m.get("content"), list)
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]

    def called(self, name: str) -> int:
        return sum(1 for b in self.tool_uses() if b.get("name") == name)


def use_tool(req: Request, name: str, args: dict[str, Any], server: str = "mesh") -> Reply:
    """Call MCP tool ``name``; when the CLI deferred it behind ToolSearch, load it first."""
    full = f"mcp__{server}__{name}" if not name.startswith("mcp__") and name[0].islower() else name
    if full in req.tool_names or "ToolSearch" not in req.tool_names:
        return Reply(tools=[ToolCall(full, args)])
    return Reply(tools=[ToolCall("ToolSearch", {"query": f"select:{full}"})])


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(reply: Reply, model: str) -> list[bytes]:
    mid = "msg_" + uuid.uuid4().hex[:24]
    usage = {"input_tokens": reply.input_tokens, "output_tokens": 0}
    out = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": mid, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage,
                },
            },
        )
    ]  # fmt: skip
    index = 0
    if reply.text:
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "text_delta", "text": reply.text}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call in reply.tools:
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20], "name": call.name, "input": {}}
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": block}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "input_json_delta",
                                                          "partial_json": json.dumps(call.input)}}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    out.append(_sse("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                                      "usage": {"output_tokens": reply.output_tokens}}))
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _whole(reply: Reply, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    for call in reply.tools:
        content.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:20],
                        "name": call.name, "input": call.input})
    return {
        "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": reply.stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
    }  # fmt: skip


def side_call_reply(req: Request) -> Reply:
    """What a side call (no tools: titles, summaries) gets unless the script says otherwise."""
    return Reply(text="ok")


class ModelServer:
    """The stand-in, on 127.0.0.1 in a thread (the CLI calls it from other processes)."""

    def __init__(self, script: Script | None = None, *, accept_key: str | None = None) -> None:
        self.script: Script = script or (lambda req: Reply(text="done"))
        # When set, a request whose x-api-key differs gets the API's 401.
        self.accept_key = accept_key
        self.dead = False
        self._closed = False
        self.requests: list[Request] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def env(self, home: str) -> dict[str, str]:
        """What a process running the CLI needs to talk to this stand-in and nothing else."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "HOME": home,
        }

    def agent_turns(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.is_agent_turn]

    def __enter__(self) -> ModelServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                try:
                    self._post()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the CLI was killed (timeout, kill -9) while waiting for us

            def _post(self) -> None:
                if server.dead:  # a kept-alive connection of a killed server: dropped unanswered
                    self.close_connection = True
                    return
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if server.accept_key is not None and self.headers.get("x-api-key") != server.accept_key:
                    self._json({"type": "error", "error": {"type": "authentication_error",
                                                           "message": "invalid x-api-key"}}, 401)
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {}
                path = self.path.split("?")[0]
                if path.endswith("/count_tokens"):
                    self._json({"input_tokens": 100})
                    return
                if not path.endswith("/v1/messages"):
                    self._json({"type": "error", "error": {"type": "not_found_error",
                                                           "message": path}}, 404)
                    return
                req = Request(body)
                # Recorded before the script runs: a script that holds a turn (to crash the
                # agent mid-run) must not hide that the turn arrived.
                server._record(req)
                try:
                    reply = server.script(req) if req.is_agent_turn else side_call_reply(req)
                except Exception as e:  # a broken script shows in the test, not as a hang
                    server.errors.append(f"{type(e).__name__}: {e}")
                    self._json({"type": "error", "error": {"type": "api_error", "message": str(e)}}, 500)
                    return
                if isinstance(reply, ApiError):
                    self._json({"type": "error", "error": {"type": reply.type, "message": reply.message}},
                               reply.status)  # fmt: skip
                    return
                model = body.get("model") or MODEL
                if body.get("stream"):
                    chunks = _stream(reply, model)
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Content-Length", str(sum(len(c) for c in chunks)))
                    self.end_headers()
                    for c in chunks:
                        self.wfile.write(c)
                    self.wfile.flush()
                else:
                    self._json(_whole(reply, model))

            def _json(self, data: dict[str, Any], status: int = 200) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def kill(self) -> None:
        """The model API goes away mid-session: the port is closed, open connections dropped."""
        self.dead = True
        self.__exit__()

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None and not self._closed:
            self._closed = True
            self._httpd.shutdown()
            self._httpd.server_close()

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)
            waiters = list(self._waiters)
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    async def wait_turns(self, n: int, timeout: float = 60.0) -> list[Request]:
        """Await until ``n`` agent-loop requests arrived (in total); returns them."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        entry = (loop, event)
        with self._lock:
            self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                while len(self.agent_turns()) < n:
                    await event.wait()
                    event.clear()
        finally:
            with self._lock:
                self._waiters.remove(entry)
        return self.agent_turns()
