"""/openapi.json documents every JSON success body with a schema (app.responses),
and real responses match their schema field for field."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema

from tests.api_helpers import move, ok, text_message


async def _spec(mesh: Any) -> dict[str, Any]:
    return ok(await mesh.http.get("/openapi.json"))  # type: ignore[no-any-return]


async def test_every_json_success_has_a_response_schema(mesh) -> None:
    spec = await _spec(mesh)
    missing, refs = set(), []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status == "default" or not status.startswith("2") or status == "204":
                    continue
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if schema is None and "text/event-stream" not in response.get("content", {}):
                    missing.add((method, path))
                elif schema is not None:
                    refs.append(schema["$ref"])
    assert not missing, sorted(missing)
    stream = spec["paths"]["/v1/mesh/inbox/stream"]["get"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]
    names = {ref.rsplit("/", 1)[-1] for ref in refs}
    assert names <= set(spec["components"]["schemas"])
    # Timestamps are documented as what they are.
    task = spec["components"]["schemas"]["TaskOut"]["properties"]
    assert task["created_at"] == {"format": "date-time", "title": "Created At",
                                  "type": "string"}


def _check(spec: dict[str, Any], resp: httpx.Response, method: str, path: str) -> Any:
    """Validate a real response against the schema its route documents for its status,
    and require exactly the documented fields (no more, none missing)."""
    response = spec["paths"][path][method]["responses"][str(resp.status_code)]
    ref = response["content"]["application/json"]["schema"]
    body = resp.json()
    jsonschema.Draft202012Validator({**ref, "components": spec["components"]}).validate(body)
    schema = spec["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
    assert set(body) == set(schema["properties"]) == set(schema["required"]), path
    return body


async def test_real_responses_validate_against_their_schema(mesh) -> None:
    spec = await _spec(mesh)
    a, b = await mesh.pair()
    created = await a.post("/v1/mesh/tasks", {"to_agent_id": b.agent_id,
                                              "message": text_message("hello")})
    task = _check(spec, created, "post", "/v1/mesh/tasks")
    task_id = task["task_id"]
    _check(spec, await b.post(f"/v1/mesh/tasks/{task_id}/messages", text_message("hi")),
           "post", "/v1/mesh/tasks/{task_id}/messages")
    _check(spec, await move(b, task_id, "working"), "post", "/v1/mesh/tasks/{task_id}/status")
    _check(spec, await b.post(f"/v1/mesh/tasks/{task_id}/artifacts",
                              {"parts": [{"kind": "data", "data": {"n": 1}}]}),
           "post", "/v1/mesh/tasks/{task_id}/artifacts")
    detail = _check(spec, await a.get(f"/v1/mesh/tasks/{task_id}"), "get",
                    "/v1/mesh/tasks/{task_id}")
    assert len(detail["messages"]) == 2 and len(detail["artifacts"]) == 1
    _check(spec, await a.get("/v1/mesh/tasks"), "get", "/v1/mesh/tasks")
    _check(spec, await a.get("/v1/mesh/friends"), "get", "/v1/mesh/friends")
    _check(spec, await a.get(f"/v1/mesh/agents/{b.agent_id}/card"), "get",
           "/v1/mesh/agents/{agent_id}/card")
    _check(spec, await a.get("/v1/mesh/me"), "get", "/v1/mesh/me")
    _check(spec, await a.post("/v1/mesh/heartbeat"), "post", "/v1/mesh/heartbeat")
    # The inbox page carries the events' stored bytes; they still match the schema.
    page = _check(spec, await b.get("/v1/mesh/inbox?after=0"), "get", "/v1/mesh/inbox")
    event_schema = spec["components"]["schemas"]["InboxEvent"]
    assert page["events"] and all(set(e) == set(event_schema["required"]) for e in page["events"])
    _check(spec, await b.post("/v1/mesh/inbox/ack", {"seq": page["next_after"]}), "post",
           "/v1/mesh/inbox/ack")


async def test_owner_responses_validate_against_their_schema(mesh) -> None:
    spec = await _spec(mesh)
    owner = await mesh.owner()
    agents = _check(spec, await owner.get("/v1/agents"), "get", "/v1/agents")
    assert [x["kind"] for x in agents["agents"]] == ["virtual-user"]
    agent = _check(spec, await owner.post("/v1/agents", {"name": "worker"}), "post",
                   "/v1/agents")
    _check(spec, await owner.post(f"/v1/agents/{agent['agent_id']}/keys"), "post",
           "/v1/agents/{agent_id}/keys")
    _check(spec, await owner.get(f"/v1/agents/{agent['agent_id']}/keys"), "get",
           "/v1/agents/{agent_id}/keys")
    _check(spec, await owner.post("/v1/groups", {"group_id": f"g-{owner.username}",
                                                 "name": "team"}), "post", "/v1/groups")
    _check(spec, await owner.post(f"/v1/groups/g-{owner.username}/members",
                                  {"agent_id": agent["agent_id"]}),
           "post", "/v1/groups/{group_id}/members")
    _check(spec, await owner.get(f"/v1/groups/g-{owner.username}"), "get",
           "/v1/groups/{group_id}")
    _check(spec, await owner.get("/v1/groups"), "get", "/v1/groups")


async def test_publication_responses_validate_against_their_schema(mesh) -> None:
    spec = await _spec(mesh)
    owner, other = await mesh.owner(), await mesh.owner()
    agent = ok(await owner.post("/v1/agents", {"name": "tpl"}), 201)
    pub = _check(spec, await owner.post("/v1/publications", {
        "source_agent_id": agent["agent_id"], "title": "t", "summary": "s", "tags": ["x"]}),
        "post", "/v1/publications")
    pid = pub["publication_id"]
    _check(spec, await other.get(f"/v1/publications/{pid}"), "get",
           "/v1/publications/{publication_id}")
    page = _check(spec, await other.get("/v1/publications", params={"limit": 1}), "get",
                  "/v1/publications")
    assert page["publications"] and set(page["publications"][0]) == \
        set(spec["components"]["schemas"]["PublicationOut"]["required"])
    _check(spec, await other.post(f"/v1/publications/{pid}/fork", {"name": "copy"}), "post",
           "/v1/publications/{publication_id}/fork")
