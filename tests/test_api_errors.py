"""Errors and validation: malformed JSON, schema errors with field names, ids,
parts, the body limit, unknown routes and methods, and the OpenAPI document."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from tests.api_helpers import PROBLEM_JSON, ok, problem, text_message


async def _post_raw(agent, path: str, content: bytes, content_type="application/json"):
    return await agent.http.post(path, content=content,
                                 headers={**agent.headers, "Content-Type": content_type})


# --- malformed bodies ------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "fragment"), [
    (b"{not json", "not valid JSON"),
    (b'{"to_agent_id": "x", }', "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"", "empty"),
    (b"[1, 2]", "JSON object"),
    (b'"a string"', "JSON object"),
])
async def test_malformed_json_is_400(mesh, raw, fragment):
    a, _ = await mesh.pair()
    for path in ("/v1/mesh/tasks", "/v1/mesh/inbox/ack", "/v1/mesh/friends/requests"):
        problem(await _post_raw(a, path, raw), 400, fragment)
    problem(await mesh.http.post("/v1/auth/register", content=raw,
                                 headers={"Content-Type": "application/json"}), 400, fragment)


# --- schema errors name the field --------------------------------------------------------

def _task(b_id: str, **over):
    body = {"to_agent_id": b_id, "message": text_message("x")}
    body.update(over)
    return body


BAD_TASKS = [
    ("missing to_agent_id", lambda b: {"message": text_message("x")}, "to_agent_id"),
    ("missing message", lambda b: {"to_agent_id": b}, "message"),
    ("no parts", lambda b: _task(b, message={"parts": []}), "message.parts"),
    ("parts not a list", lambda b: _task(b, message={"parts": "hi"}), "message.parts"),
    ("unknown field", lambda b: _task(b, urgent=True), "urgent"),
    ("unknown message field", lambda b: _task(b, message={**text_message("x"), "x": 1}),
     "message.x"),
    ("bad to_agent_id", lambda b: _task(b, to_agent_id="no spaces allowed"), "to_agent_id"),
    ("task_id too short", lambda b: _task(b, task_id="ab"), "task_id"),
    ("task_id leading dash", lambda b: _task(b, task_id="-abc"), "task_id"),
    ("task_id bad char", lambda b: _task(b, task_id="abc/def"), "task_id"),
    ("task_id too long", lambda b: _task(b, task_id="a" * 129), "task_id"),
    ("context_id bad", lambda b: _task(b, context_id="has space"), "context_id"),
    ("message_id bad", lambda b: _task(b, message={**text_message("x"), "message_id": "é-abc"}),
     "message.message_id"),
    ("unknown part kind", lambda b: _task(b, message={"parts": [{"kind": "video", "url": "x"}]}),
     "message.parts.0"),
    ("part without kind", lambda b: _task(b, message={"parts": [{"text": "x"}]}),
     "message.parts.0"),
    ("text part without text", lambda b: _task(b, message={"parts": [{"kind": "text"}]}),
     "message.parts.0.text.text"),
    ("data part not an object",
     lambda b: _task(b, message={"parts": [{"kind": "data", "data": [1]}]}),
     "message.parts.0.data.data"),
    ("file with neither bytes nor uri",
     lambda b: _task(b, message={"parts": [{"kind": "file", "file": {"name": "f"}}]}),
     "message.parts.0.file.file"),
    ("file with both bytes and uri",
     lambda b: _task(b, message={"parts": [{"kind": "file", "file": {
         "bytes": "aGk=", "uri": "https://example.com/f"}}]}),
     "message.parts.0.file.file"),
    ("file bytes not base64",
     lambda b: _task(b, message={"parts": [{"kind": "file", "file": {"bytes": "not base64!"}}]}),
     "message.parts.0.file.file"),
    ("metadata not an object", lambda b: _task(b, message={**text_message("x"), "metadata": [1]}),
     "message.metadata"),
]


@pytest.mark.parametrize(("name", "make", "field"), BAD_TASKS, ids=[c[0] for c in BAD_TASKS])
async def test_task_schema_errors_are_422_with_field(mesh, db, name, make, field):
    a, b = await mesh.pair()
    body = problem(await a.post("/v1/mesh/tasks", make(b.agent_id)), 422)
    fields = {e["field"] for e in body["errors"]}
    assert field in fields, fields
    assert field in body["detail"]
    assert all(e["message"] for e in body["errors"])
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1", a.agent_id) == 0


async def test_file_part_error_says_what_to_send(mesh):
    a, b = await mesh.pair()
    body = problem(await a.post("/v1/mesh/tasks", _task(b.agent_id, message={"parts": [
        {"kind": "file", "file": {"name": "f"}}]})), 422, "exactly one of 'bytes'")
    assert body["errors"][0]["field"] == "message.parts.0.file.file"
    problem(await a.post("/v1/mesh/tasks", _task(b.agent_id, message={"parts": [
        {"kind": "video"}]})), 422, "video")


@pytest.mark.parametrize("file", [
    {"name": "a.bin", "mime_type": "application/octet-stream", "bytes": "AAEC"},
    {"uri": "https://example.com/x.pdf"},
])
async def test_valid_file_parts_are_accepted(mesh, file):
    a, b = await mesh.pair()
    task = ok(await a.post("/v1/mesh/tasks", _task(b.agent_id, message={"parts": [
        {"kind": "file", "file": file, "metadata": {"note": "part metadata"}}]})), 201)
    assert task["message"]["parts"] == [{"kind": "file", "file": file,
                                         "metadata": {"note": "part metadata"}}]


async def test_other_bodies_validate_too(mesh):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "x")
    tid = task["task_id"]
    problem(await a.post(f"/v1/mesh/tasks/{tid}/messages", {"parts": []}), 422, "parts")
    problem(await a.post(f"/v1/mesh/tasks/{tid}/messages",
                         {"parts": [{"kind": "text", "text": "x"}], "message_id": "x"}), 422,
            "message_id")
    problem(await b.post(f"/v1/mesh/tasks/{tid}/artifacts", {"name": "no parts"}), 422, "parts")
    problem(await b.post(f"/v1/mesh/tasks/{tid}/status", {"state": "working",
                                                          "message": {"parts": []}}), 422,
            "message.parts")
    problem(await a.post("/v1/mesh/friends/requests", {"to_agent_id": b.agent_id,
                                                       "note": "x" * 1001}), 422, "note")
    problem(await mesh.http.post("/v1/auth/token", json={}), 422, "api_key")
    problem(await mesh.http.post("/v1/auth/login", json={"username": "x"}), 422, "password")


# --- body limit ---------------------------------------------------------------------------

def _big_task(b_id: str, size: int) -> bytes:
    return json.dumps(_task(b_id, message=text_message("x" * size))).encode()


async def test_oversize_body_is_413_problem(mesh, db, migrated):
    a, b = await mesh.pair()
    limit = migrated.max_body_bytes
    assert limit == 1024 * 1024  # the documented default
    resp = await _post_raw(a, "/v1/mesh/tasks", _big_task(b.agent_id, limit + 10))
    body = problem(resp, 413, "exceeds the limit", str(limit))
    assert body["limit_bytes"] == limit
    assert await db.fetchval("SELECT count(*) FROM tasks WHERE initiator = $1", a.agent_id) == 0


async def test_oversize_chunked_body_is_413_problem(mesh, migrated):
    """No Content-Length: the limit is enforced while streaming."""
    a, b = await mesh.pair()
    payload = _big_task(b.agent_id, migrated.max_body_bytes + 10)

    async def chunks():
        for i in range(0, len(payload), 64 * 1024):
            yield payload[i:i + 64 * 1024]

    resp = await a.http.post("/v1/mesh/tasks", content=chunks(),
                             headers={**a.headers, "Content-Type": "application/json"})
    body = problem(resp, 413, "exceeds the limit", str(migrated.max_body_bytes))
    assert body["limit_bytes"] == migrated.max_body_bytes


async def test_body_just_under_the_limit_is_accepted(mesh, migrated):
    a, b = await mesh.pair()
    overhead = len(_big_task(b.agent_id, 0))
    payload = _big_task(b.agent_id, migrated.max_body_bytes - overhead)
    assert len(payload) == migrated.max_body_bytes
    ok(await _post_raw(a, "/v1/mesh/tasks", payload), 201)


# --- routing errors ---------------------------------------------------------------------

async def test_unknown_route_and_method_are_problems(mesh):
    resp = await mesh.http.get("/v1/nothing-here")
    problem(resp, 404, "no route", "/v1/nothing-here")
    resp = await mesh.http.put("/v1/auth/login", json={})
    problem(resp, 405, "PUT")


async def test_unexpected_errors_are_500_problems_without_internals(mesh, db):
    """An internal failure (here: a real constraint error raised by Postgres through
    a trigger) answers 500 problem+json that says the request may be retried and
    leaks no SQL or stack trace."""
    a, b = await mesh.pair()
    fn = f"mesh_test_boom_{uuid.uuid4().hex[:8]}"
    await db.execute(f"""
        CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.initiator = '{a.agent_id}' THEN
            RAISE EXCEPTION 'secret internal detail {fn}';
          END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER {fn} BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION {fn}();
    """)
    try:
        resp = await a.post("/v1/mesh/tasks", _task(b.agent_id))
    finally:
        await db.execute(f"DROP TRIGGER IF EXISTS {fn} ON tasks; DROP FUNCTION IF EXISTS {fn}();")
    body = problem(resp, 500, "retried")
    assert fn not in resp.text and "Traceback" not in resp.text
    assert body["title"] == "Internal Server Error"


# --- OpenAPI and docs --------------------------------------------------------------------

DOCUMENTED_PATHS = {
    "/v1/auth/register": {"post"},
    "/v1/auth/login": {"post"},
    "/v1/auth/token": {"post"},
    "/v1/agents": {"post", "get"},
    "/v1/agents/{agent_id}": {"get", "patch", "delete"},
    "/v1/agents/{agent_id}/keys": {"post"},
    "/v1/agents/{agent_id}/keys/{key_id}": {"delete"},
    "/v1/groups": {"post"},
    "/v1/groups/{group_id}/members": {"post"},
    "/v1/groups/{group_id}/members/{agent_id}": {"delete"},
    "/v1/mesh/heartbeat": {"post"},
    "/v1/mesh/online": {"delete"},
    "/v1/mesh/offline": {"post"},
    "/v1/mesh/me": {"get"},
    "/v1/mesh/friends": {"get"},
    "/v1/mesh/friends/requests": {"post"},
    "/v1/mesh/friends/requests/{request_id}/accept": {"post"},
    "/v1/mesh/friends/requests/{request_id}/reject": {"post"},
    "/v1/mesh/friends/{agent_id}": {"delete"},
    "/v1/mesh/groups": {"get"},
    "/v1/mesh/groups/{group_id}/roster": {"get"},
    "/v1/mesh/agents/{agent_id}/card": {"get"},
    "/v1/mesh/tasks": {"post", "get"},
    "/v1/mesh/tasks/{task_id}": {"get"},
    "/v1/mesh/tasks/{task_id}/messages": {"post"},
    "/v1/mesh/tasks/{task_id}/status": {"post"},
    "/v1/mesh/tasks/{task_id}/artifacts": {"post"},
    "/v1/mesh/inbox": {"get"},
    "/v1/mesh/inbox/ack": {"post"},
    "/v1/mesh/inbox/stream": {"get"},
    "/v1/publications": {"post", "get"},
    "/v1/publications/{publication_id}": {"get", "delete"},
    "/v1/publications/{publication_id}/fork": {"post"},
}


async def test_openapi_lists_the_design_paths(mesh):
    resp = await mesh.http.get("/openapi.json")
    spec = ok(resp)
    assert spec["openapi"].startswith("3.")
    paths = spec["paths"]
    missing = {f"{m.upper()} {p}" for p, methods in DOCUMENTED_PATHS.items()
               for m in methods if m not in paths.get(p, {})}
    assert not missing, f"not in /openapi.json: {sorted(missing)}"
    create = paths["/v1/mesh/tasks"]["post"]
    assert "201" in create["responses"]
    assert PROBLEM_JSON in create["responses"]["default"]["content"]
    assert create["security"] == [{"bearer": []}]
    schema = create["requestBody"]["content"]["application/json"]["schema"]
    assert schema == {"$ref": "#/components/schemas/TaskCreate"} or "properties" in schema
    assert "TaskCreate" in spec["components"]["schemas"]


async def test_docs_page_is_html(mesh):
    resp = await mesh.http.get("/docs")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    assert re.search(r"<html", resp.text, re.I)
    assert "/v1/mesh/tasks" in resp.text


# --- inputs Postgres cannot store ----------------------------------------------------------

@pytest.mark.parametrize(("raw", "fragment"), [
    (r'{"parts": [{"kind": "text", "text": "a\u0000b"}]}', "NUL"),
    (r'{"parts": [{"kind": "data", "data": {"k\u0000": 1}}]}', "NUL"),
    (r'{"parts": [{"kind": "text", "text": "x"}], "metadata": {"m": "\ud800"}}', "surrogate"),
])
async def test_unstorable_strings_are_422_not_500(mesh, raw, fragment):
    a, b = await mesh.pair()
    task = await a.send(b.agent_id, "x")
    resp = await _post_raw(a, f"/v1/mesh/tasks/{task['task_id']}/messages", raw.encode())
    problem(resp, 422, fragment)


async def test_nul_in_a_text_column_is_422(mesh):
    owner = await mesh.owner()
    problem(await owner.post("/v1/agents", {"name": "nul", "description": "a\x00b"}), 422,
            "description")


async def test_deeply_nested_json_is_400_not_500(mesh):
    a, _ = await mesh.pair()
    raw = b'{"seq": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    problem(await _post_raw(a, "/v1/mesh/inbox/ack", raw), 400, "nested")


@pytest.mark.parametrize(("path", "kind"), [
    ("/v1/mesh/inbox?after=99999999999999999999", "query"),
    ("/v1/mesh/inbox/ack", "body"),
])
async def test_out_of_range_integers_are_422(mesh, path, kind):
    a, _ = await mesh.pair()
    if kind == "query":
        resp = await a.get(path)
    else:
        resp = await a.post(path, {"seq": 10 ** 20})
    problem(resp, 422)


@pytest.mark.parametrize("path", [
    "/v1/mesh/tasks/%00abc", "/v1/mesh/agents/a%00b/card", "/v1/mesh/groups/g%00/roster",
    "/v1/mesh/friends/requests/fr%00/accept", "/v1/agents/a%00b", "/v1/groups/g%00x",
])
async def test_nul_in_path_is_422_not_500(mesh, path):
    owner = await mesh.owner()
    method = "POST" if path.endswith("/accept") else "GET"
    resp = await owner.http.request(method, path, headers=owner.headers)
    problem(resp, 422, "NUL")


async def test_nul_in_credentials_and_cursor(mesh):
    a, _ = await mesh.pair()
    problem(await a.http.post("/v1/auth/login", json={"username": "a\x00b", "password": "x"}),
            422, "username")
    problem(await a.http.post("/v1/auth/token", json={"api_key": "mk_k\x00_x"}), 422, "api_key")
    import base64
    cursor = base64.urlsafe_b64encode(b"2026-01-01T00:00:00+00:00|t\x00x").decode().rstrip("=")
    problem(await a.get("/v1/mesh/tasks", params={"cursor": cursor}), 400, "cursor")


@pytest.mark.parametrize("raw", [b'{"seq": NaN}', b'{"seq": Infinity}', b'{"seq": -Infinity}'])
async def test_non_json_constants_are_400(mesh, raw):
    a, _ = await mesh.pair()
    problem(await _post_raw(a, "/v1/mesh/inbox/ack", raw), 400, "not valid JSON")


async def test_non_finite_number_in_data_is_422(mesh):
    a, b = await mesh.pair()
    raw = b'{"to_agent_id": "%s", "message": {"parts": [{"kind": "data", "data": {"x": 1e999}}]}}'
    problem(await _post_raw(a, "/v1/mesh/tasks", raw % b.agent_id.encode()), 422,
            "message.parts.0.data.x")


async def test_moderately_deep_json_is_400(mesh):
    a, b = await mesh.pair()
    deep = {"x": 1}
    for _ in range(100):
        deep = {"x": deep}
    resp = await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                           "message": {"parts": [{"kind": "data", "data": deep}]}})
    problem(resp, 400, "nested too deeply")
    ok(await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                       "message": {"parts": [{"kind": "data",
                                                              "data": {"a": {"b": [1, 2]}}}]}}),
       201)


async def test_context_id_with_trailing_newline_is_refused(mesh):
    a, _ = await mesh.pair()
    problem(await a.get("/v1/mesh/tasks", params={"context_id": "abc\n"}), 422, "context_id")


# --- every authenticated operation refuses a missing token -----------------------------

async def _operations(mesh) -> list[tuple[str, str]]:
    spec = ok(await mesh.http.get("/openapi.json"))
    return [(method.upper(), path) for path, ops in spec["paths"].items()
            for method, op in ops.items() if op.get("security")]


def _fill(path: str) -> str:
    return re.sub(r"{(\w+)}", lambda m: f"x-{m.group(1)}-1", path)


async def test_every_authenticated_operation_needs_a_token(mesh):
    operations = await _operations(mesh)
    assert len(operations) >= len(DOCUMENTED_PATHS)
    for method, path in operations:
        resp = await mesh.http.request(method, _fill(path), json={} if method != "GET" else None)
        problem(resp, 401, "bearer")
        assert resp.headers.get("www-authenticate") == "Bearer", (method, path)


async def test_owner_operations_refuse_agent_tokens(mesh):
    a, _ = await mesh.pair()
    for method, path in await _operations(mesh):
        if not path.startswith(("/v1/agents", "/v1/groups", "/v1/publications")):
            continue
        resp = await a.http.request(method, _fill(path), headers=a.headers,
                                    json={} if method != "GET" else None)
        problem(resp, 403, "owner token")
