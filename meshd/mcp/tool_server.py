"""An MCP server (the official SDK's low-level ``Server``) offering the catalogue's
tools, whatever carries their calls out.

Both servers of the mesh tools are this one: ``mesh mcp`` hands it handlers that
call the gateway over HTTP, the gateway's ``/mcp`` hands it handlers that call its
services in-process. The server lists the tools from :mod:`meshd.catalogue`,
checks each call's arguments against the tool's schema, and turns a failure into a
tool error (``isError``) whose text tells the model what to do next.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jsonschema
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from meshd.catalogue import INSTRUCTIONS, SPECS, TOOLS, arguments

# (the request's context, the arguments with defaults filled in) -> a JSON-able answer
Handler = Callable[[ServerRequestContext[Any, Any], dict[str, Any]], Awaitable[Any]]
# (the exception a handler raised, the tool's name) -> the tool error's text, or None
# for an exception that is not the caller's to handle (a bug: it propagates).
Explain = Callable[[Exception, str], str | None]

_VALIDATORS = {t.name: jsonschema.Draft202012Validator(t.input_schema) for t in TOOLS}


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _invalid(name: str, args: dict[str, Any]) -> str | None:
    errors = sorted(_VALIDATORS[name].iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    e = errors[0]
    where = ".".join(str(p) for p in e.absolute_path) or "arguments"
    return (f"Invalid input: {where}: {e.message}. Fix the argument and call again "
            f"(see the tool's input schema).")


def build_server(handlers: Mapping[str, Handler], explain: Explain, *, name: str = "agent-mesh",
                 version: str = "0.1.0") -> Server[Any]:
    unknown = set(handlers) - set(SPECS)
    if unknown:
        raise ValueError(f"handlers for tools the catalogue does not define: {sorted(unknown)}")
    tools = [types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
             for t in TOOLS if t.name in handlers]

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        handler = handlers.get(params.name)
        if handler is None:
            raise MCPError(types.INVALID_PARAMS,
                           f"Unknown tool '{params.name[:100]}'; call tools/list for the mesh tools")
        given = params.arguments or {}
        if why := _invalid(params.name, given):
            return _error(why)
        try:
            data = await handler(ctx, arguments(params.name, given))
        except Exception as e:
            text = explain(e, params.name)
            if text is None:
                raise
            return _error(text)
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(data, ensure_ascii=False, default=str))],
            structured_content=data)

    def input_schema(tool: str) -> Mapping[str, Any] | None:
        spec = SPECS.get(tool)
        return spec.input_schema if spec else None

    return Server(name, version=version, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool, get_tool_input_schema=input_schema)
