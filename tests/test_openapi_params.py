"""The OpenAPI says what the server reads: every query
parameter and header a handler reads is documented on its operation, with its
bounds, and path ids carry the id pattern."""

from __future__ import annotations

import inspect
import re

from starlette.routing import Route

from app.domain.ids import ID_PATTERN
from app.main import api_routes
from app.web import openapi

READS = re.compile(r"""(?:int_query|float_query)\(request,\s*"(\w+)"|q\.get\("(\w+)"\)"""
                   r"""|headers\.get\("([\w-]+)"\)""")


def spec() -> dict:
    return openapi.build(api_routes(), title="t", version="0")


def test_every_parameter_a_handler_reads_is_documented() -> None:
    doc = spec()
    missing = []
    for route in api_routes():
        if not isinstance(route, Route):
            continue
        module = inspect.getmodule(route.endpoint)
        source = inspect.getsource(route.endpoint)
        # Helpers of the module the handler calls (sse._start_after) count too.
        helpers = [inspect.getsource(f) for n, f in vars(module).items()
                   if n.startswith("_") and inspect.isfunction(f) and n in source]
        read = {next(g for g in m.groups() if g) for text in [source, *helpers]
                for m in READS.finditer(text)}
        for method in (route.methods or set()) - {"HEAD"}:
            op = doc["paths"][route.path][method.lower()]
            documented = {p["name"].lower() for p in op.get("parameters", [])
                          if p["in"] in ("query", "header")}
            missing += [f"{method} {route.path}: {n}" for n in read
                        if n.lower() not in documented]
    assert not missing, missing


def test_query_parameters_carry_their_bounds_and_path_ids_their_pattern() -> None:
    doc = spec()
    inbox = {p["name"]: p for p in doc["paths"]["/v1/mesh/inbox"]["get"]["parameters"]}
    assert inbox["after"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
    assert inbox["wait"]["schema"]["maximum"] == 30
    stream = {p["name"]: p for p in doc["paths"]["/v1/mesh/inbox/stream"]["get"]["parameters"]}
    assert stream["Last-Event-ID"]["in"] == "header"
    for path, ops in doc["paths"].items():
        for op in ops.values():
            for p in op.get("parameters", []):
                if p["in"] == "path" and p["name"] != "row_id":
                    assert p["schema"]["pattern"] == ID_PATTERN, (path, p)


def test_idempotent_retries_document_their_200() -> None:
    doc = spec()
    for path in ("/v1/mesh/tasks", "/v1/mesh/tasks/{task_id}/messages"):
        responses = doc["paths"][path]["post"]["responses"]
        assert {"200", "201"} <= responses.keys(), path
