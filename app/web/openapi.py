"""OpenAPI 3.1 document built from the routes and their ``@doc`` marks, and a
browsable HTML page generated from it (no CDN needed)."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode
from starlette.routing import BaseRoute, Route

from app.domain.ids import ID_PATTERN
from app.platform.errors import PROBLEM_JSON

_PARAM = re.compile(r"{(\w+)}")


def build(routes: list[BaseRoute], *, title: str, version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        meta = getattr(route.endpoint, "__mesh_doc__", None)
        if meta is None:
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            op: dict[str, Any] = {
                "summary": meta["summary"],
                "tags": [meta["tag"]],
                "operationId": f"{method.lower()}_{route.endpoint.__module__.rsplit('.', 1)[-1]}"
                               f"_{route.endpoint.__name__}",
                "responses": {**_successes(meta, schemas),
                              "default": {"description": "error",
                                          "content": {PROBLEM_JSON: {"schema": {"$ref":
                                                      "#/components/schemas/Problem"}}}}},
            }
            params = [_path_param(n) for n in _PARAM.findall(route.path)] + meta.get("params", [])
            if params:
                op["parameters"] = params
            if meta["auth"]:
                op["security"] = [{"bearer": []}]
            model = meta["body"]
            if model is not None:
                op["requestBody"] = {"required": True, "content": {"application/json": {
                    "schema": _component(model, schemas, "validation")}}}
            paths.setdefault(route.path, {})[method.lower()] = op
    schemas["Problem"] = {
        "type": "object",
        "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                       "status": {"type": "integer"}, "detail": {"type": "string"}},
        "required": ["title", "status", "detail"],
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "Agent Mesh: tasks and messages between AI agents, delivered "
                                "once and in order. Errors are application/problem+json."},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": schemas, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}}},
    }


# Every path id is a mesh id (agent ids match it too), except the
# outbox row id, a bigint.
_PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "row_id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
}


def _path_param(name: str) -> dict[str, Any]:
    schema = _PATH_SCHEMAS.get(name, {"type": "string", "pattern": ID_PATTERN})
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _component(model: type[BaseModel], schemas: dict[str, Any],
               mode: JsonSchemaMode) -> dict[str, str]:
    """Register ``model`` (and the models it uses) under components; return its $ref."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}", mode=mode)
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _successes(meta: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    success: dict[str, Any] = {"description": "success"}
    if meta["response"] is not None:
        success["content"] = {"application/json": {
            "schema": _component(meta["response"], schemas, "serialization")}}
    elif meta["media"] is not None:
        success["content"] = {meta["media"]: {"schema": {"type": "string"}}}
    out = {str(meta["status"]): success}
    if meta["replay_status"] is not None:
        out[str(meta["replay_status"])] = {**success,
                                           "description": "an idempotent retry: the stored record"}
    return out


def _model_link(part: dict[str, Any]) -> str:
    ref = part.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
    model = ref.rsplit("/", 1)[-1]
    return f'<a href="#{model}">{model}</a>' if model else ""


def render_html(spec: dict[str, Any]) -> str:
    rows = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            body = _model_link(op.get("requestBody", {}))
            returns = " ".join(f"{status} {_model_link(r)}".strip()
                               for status, r in op["responses"].items() if status != "default")
            auth = "bearer" if op.get("security") else "none"
            rows.append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code>"
                f"</td><td>{html.escape(op['summary'])}</td><td>{body}</td><td>{returns}</td>"
                f"<td>{auth}</td></tr>")
    models = []
    for name, schema in sorted(spec["components"]["schemas"].items()):
        models.append(f'<h3 id="{name}">{name}</h3><pre>'
                      f"{html.escape(json.dumps(schema, indent=2))}</pre>")
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Agent Mesh API</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
        "td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}"
        "pre{background:#f6f6f6;padding:8px;overflow:auto}</style></head><body>"
        f"<h1>{html.escape(spec['info']['title'])} {html.escape(spec['info']['version'])}</h1>"
        f"<p>{html.escape(spec['info']['description'])} Machine-readable: "
        "<a href='/openapi.json'>/openapi.json</a>.</p>"
        "<table><tr><th>method</th><th>path</th><th>what</th><th>body</th><th>returns</th>"
        "<th>auth</th></tr>"
        + "".join(rows) + "</table><h2>Schemas</h2>" + "".join(models) + "</body></html>")
