"""A2A v1.0 conformance at the edges (ADR 034): bad paging input, a follow-up that
names another context or a closed task, media types outside the card's input
modes, card caching and versions, and non-JSON bodies — with the official
a2a-sdk client and raw JSON-RPC / HTTP+JSON against the real gateway."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx
import pytest
from a2a.compat.v0_3 import types as types_v03
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import ParseDict

from tests.a2a_helpers import a2a_client, text_message
from tests.support.meshapi import AgentHandle, MeshFactory

V10 = {"A2A-Version": "1.0"}
V03_ONLY = {"url", "preferredTransport", "protocolVersion", "security",
            "supportsAuthenticatedExtendedCard", "additionalInterfaces"}


async def rpc(a: AgentHandle, agent_id: str, method: str, params: dict[str, Any],
              headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return await a.http.post(f"/a2a/{agent_id}", json=body,
                             headers={**a.headers, **V10, **(headers or {})})


def rpc_error(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    error = r.json().get("error")
    assert error is not None, r.text
    return error  # type: ignore[no-any-return]


def b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


async def _task_id(a: AgentHandle, b: AgentHandle, text: str = "hello") -> str:
    return (await a.send(b.agent_id, text))["task_id"]  # type: ignore[no-any-return]


# --- paging input -------------------------------------------------------------------

BAD_PAGE_SIZES: list[Any] = [-1, -50, -2147483648, 0, 101, 2147483647, 2**31, 2**63, "abc",
                             "1e3", 1.5, [], {}]
BAD_TOKENS = ["!!!", "a", "%%", b64("x|y"), b64("9999-12-31T23:59:59-23:59|t-a-1-abc"),
              b64("2024-01-01T00:00:00+00:00|not an id"), "\u00e9\u00e9", "_-_-", "A" * 2000]


async def test_list_tasks_rejects_bad_page_sizes_and_tokens(gateway: str,
                                                            mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    await _task_id(a, b)
    codes = []
    for size in BAD_PAGE_SIZES:
        error = rpc_error(await rpc(a, b.agent_id, "ListTasks", {"pageSize": size}))
        codes.append(error["code"])
        assert "page" in error["message"].lower() or "parse" in str(error).lower(), error
    for token in BAD_TOKENS:
        error = rpc_error(await rpc(a, b.agent_id, "ListTasks", {"pageToken": token}))
        codes.append(error["code"])
        assert "cursor" in error["message"] or "token" in error["message"], error
    for length in (-1, -2147483648):
        for method, params in (("ListTasks", {}), ("GetTask", {"id": "t-x-1-abc"})):
            error = rpc_error(await rpc(a, b.agent_id, method,
                                        {**params, "historyLength": length}))
            codes.append(error["code"])
            assert "history" in error["message"], error
    assert codes == [-32602] * (len(BAD_PAGE_SIZES) + len(BAD_TOKENS) + 4)

    # The same over HTTP+JSON: a 400 with the reason, never a 500.
    statuses = []
    for size in [-1, 0, 101, -2147483648, "abc", "1.5", "99999999999999999999"]:
        r = await a.http.get(f"/a2a/{b.agent_id}/tasks", params={"pageSize": size},
                             headers={**a.headers, **V10})
        statuses.append(r.status_code)
        assert r.json()["error"]["message"], r.text
    for token in BAD_TOKENS:
        r = await a.http.get(f"/a2a/{b.agent_id}/tasks", params={"pageToken": token},
                             headers={**a.headers, **V10})
        statuses.append(r.status_code)
    assert statuses == [400] * (7 + len(BAD_TOKENS))
    ok = await rpc(a, b.agent_id, "ListTasks", {"pageSize": 100})
    assert len(ok.json()["result"]["tasks"]) == 1, ok.text


async def test_directory_rejects_garbage_cursors(gateway: str, mesh: MeshFactory) -> None:
    a, _ = await mesh.pair()
    cursors = [b64("o:-1"), b64("o:99999999999999999999"), b64("o:9223372036854775808"),
               b64("o:" + "9" * 400), b64("o:1e9"), b64("o:\u0663"), b64("o: 5"),
               b64("o:5_0"), b64("o:+5"), b64("x:1"), b64("o:"), "garbage!!", "%00",
               "A" * 3000, b64("o:1:2")]
    answers = []
    for cursor in cursors:
        r = await a.get("/v1/mesh/directory", params={"cursor": cursor})
        answers.append(r.status_code)
        assert r.headers["content-type"] == "application/problem+json", r.text
        assert "cursor" in r.json()["detail"], r.text
    assert answers == [400] * len(cursors)
    r = await a.get("/v1/mesh/directory", params={"cursor": b64("o:20")})
    assert r.status_code == 200 and r.json()["agents"] == [], r.text


# --- follow-ups -------------------------------------------------------------------

async def test_a_follow_up_naming_another_context_is_refused(gateway: str,
                                                             mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    async with a2a_client(gateway, b.agent_id, a.headers, streaming=False) as client:
        [one] = [e async for e in client.send_message(text_message("first"))]
        [two] = [e async for e in client.send_message(text_message("second"))]
        assert one.task.context_id != two.task.context_id
        refused = 0
        for context_id in (two.task.context_id, "ctx-not-a-context", "x" * 200):
            msg = text_message("wrong context", task_id=one.task.id)
            msg.message.context_id = context_id
            with pytest.raises(InvalidParamsError, match="contextId"):
                [_ async for _ in client.send_message(msg)]
            refused += 1
        assert refused == 3
        right = text_message("right context", task_id=one.task.id)
        right.message.context_id = one.task.context_id
        [ok] = [e async for e in client.send_message(right)]
    assert [m.parts[0].text for m in ok.task.history] == ["first", "right context"]
    texts = [e["payload"]["message"]["parts"][0]["text"]
             for e in (await b.inbox())["events"] if e["type"] == "task.message"]
    assert texts == ["right context"]


async def test_a_message_to_a_closed_task_is_unsupported_operation(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    done = await _task_id(a, b, "finish me")
    for state in ("working", "completed"):
        r = await b.post(f"/v1/mesh/tasks/{done}/status", {"state": state})
        assert r.status_code == 200, r.text
    canceled = await _task_id(a, b, "never mind")
    r = await a.post(f"/v1/mesh/tasks/{canceled}/status", {"state": "canceled"})
    assert r.status_code == 200, r.text
    rejected = await _task_id(a, b, "no thanks")
    r = await b.post(f"/v1/mesh/tasks/{rejected}/status", {"state": "rejected"})
    assert r.status_code == 200, r.text

    attempts = 0
    for task_id in (done, canceled, rejected):
        for streaming in (False, True):
            for binding in ("JSONRPC", "HTTP+JSON"):
                async with a2a_client(gateway, b.agent_id, a.headers, streaming=streaming,
                                      binding=binding) as client:
                    with pytest.raises(UnsupportedOperationError, match="terminal"):
                        [_ async for _ in client.send_message(
                            text_message("more?", task_id=task_id))]
                attempts += 1
        # The raw answers, per the spec's table: -32004 over JSON-RPC, 400 over HTTP+JSON.
        msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "taskId": task_id,
               "parts": [{"text": "raw"}]}
        for method in ("SendMessage", "SendStreamingMessage"):
            assert rpc_error(await rpc(a, b.agent_id, method, {"message": msg}))["code"] \
                == -32004
            attempts += 1
        r = await a.http.post(f"/a2a/{b.agent_id}/message:send", json={"message": msg},
                              headers={**a.headers, **V10})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION", r.text
        attempts += 1
    assert attempts == 3 * 7
    assert "task.message" not in [e["type"] for e in (await b.inbox())["events"]]


# --- media types --------------------------------------------------------------------

async def test_parts_outside_the_input_modes_are_content_type_not_supported(
        gateway: str, mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    raw = base64.b64encode(b"\x89PNG").decode()
    refused_parts = [
        {"raw": raw, "mediaType": "image/png"},
        {"url": "https://example.com/a.mp4", "mediaType": "video/mp4"},
        {"text": "<b>hi</b>", "mediaType": "text/html"},
        {"data": {"a": 1}, "mediaType": "application/xml"},
        {"raw": raw, "mediaType": "not a media type"},
        {"text": "x", "mediaType": "text/plain-ish"},
    ]
    codes = []
    for part in refused_parts:
        msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [part]}
        error = rpc_error(await rpc(a, b.agent_id, "SendMessage", {"message": msg}))
        codes.append(error["code"])
        assert "input modes" in error["message"], error
        r = await a.http.post(f"/a2a/{b.agent_id}/message:send", json={"message": msg},
                              headers={**a.headers, **V10})
        assert r.status_code == 400, r.text
        codes.append(r.json()["error"]["details"][0]["reason"])
    assert codes == [-32005, "CONTENT_TYPE_NOT_SUPPORTED"] * len(refused_parts)
    async with a2a_client(gateway, b.agent_id, a.headers) as client:
        with pytest.raises(ContentTypeNotSupportedError):
            request = SendMessageRequest(message=Message(
                message_id=str(uuid.uuid4()), role=Role.ROLE_USER,
                parts=[Part(raw=b"\x89PNG", media_type="image/png")]))
            [_ async for _ in client.send_message(request)]
    assert "task.created" not in [e["type"] for e in (await b.inbox())["events"]]

    # What the card declares is taken, parameters and case aside.
    accepted = [{"text": "plain", "mediaType": "Text/Plain; charset=utf-8"},
                {"data": {"k": 1}, "mediaType": "application/json"},
                {"raw": raw, "mediaType": "application/octet-stream", "filename": "a.bin"},
                {"text": "no media type"}]
    msg = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": accepted}
    r = await rpc(a, b.agent_id, "SendMessage", {"message": msg})
    assert "result" in r.json(), r.text


# --- cards: caching and versions ----------------------------------------------------

CARD_URLS = ["/.well-known/agent-card.json", "/a2a/x@y/.well-known/agent-card.json"]


async def test_cards_are_cacheable_and_revalidate_with_304(gateway: str) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for url in CARD_URLS:
            r = await http.get(url)
            assert r.status_code == 200
            etag, modified = r.headers["etag"], r.headers["last-modified"]
            assert etag.startswith('"') and "max-age" in r.headers["cache-control"]
            assert "a2a-version" in r.headers["vary"].lower()
            revalidations = [{"If-None-Match": etag}, {"If-None-Match": f"W/{etag}"},
                             {"If-None-Match": f'"other", {etag}'}, {"If-None-Match": "*"},
                             {"If-Modified-Since": modified}]
            for headers in revalidations:
                again = await http.get(url, headers=headers)
                assert again.status_code == 304, (url, headers)
                assert again.content == b"" and again.headers["etag"] == etag
                assert again.headers["cache-control"] == r.headers["cache-control"]
            for headers in ({"If-None-Match": '"other"'},
                            {"If-None-Match": etag, "If-Modified-Since": "garbage"},
                            {"If-None-Match": '"x"', "If-Modified-Since": modified},
                            {"If-Modified-Since": "Mon, 01 Jan 1990 00:00:00 GMT"},
                            {"If-Modified-Since": "not a date"}):
                fresh = await http.get(url, headers=headers)
                expected = 304 if headers.get("If-None-Match") == etag else 200
                assert fresh.status_code == expected, (url, headers)
            v03 = await http.get(url, headers={"A2A-Version": "0.3", "If-None-Match": etag})
            assert v03.status_code == 200 and v03.headers["etag"] != etag


async def test_v10_card_is_clean_and_v03_clients_get_the_v03_card(
        gateway: str, mesh: MeshFactory) -> None:
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for url in CARD_URLS:
            for headers in ({}, {"A2A-Version": "1.0"}, {"A2A-Version": "1.0.1"}):
                raw = (await http.get(url, headers=headers)).json()
                assert not V03_ONLY & set(raw), raw.keys()
                for scheme in raw["securitySchemes"].values():
                    assert set(scheme) <= {"httpAuthSecurityScheme", "apiKeySecurityScheme"}
                card = ParseDict(raw, AgentCard())  # strict: no unknown field
                assert [i.protocol_version for i in card.supported_interfaces] == [
                    "1.0", "1.0", "0.3"]
                assert card.supported_interfaces[2].url.endswith("/v0.3")
            old = (await http.get(url, headers={"A2A-Version": "0.3"})).json()
            v03 = types_v03.AgentCard.model_validate(old)
            assert v03.protocol_version == "0.3" and v03.url.endswith("/v0.3")
            assert v03.preferred_transport == "JSONRPC"
            assert "supportedInterfaces" not in old
        by_path = (await http.get("/a2a/x@y/v0.3/.well-known/agent-card.json")).json()
        assert by_path == (await http.get(CARD_URLS[1], headers={"A2A-Version": "0.3"})).json()
        for bad in ("2.0", "0.2", "abc", "1.x"):
            r = await http.get(CARD_URLS[1], headers={"A2A-Version": bad})
            assert r.status_code == 400, (bad, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            assert "A2A-Version" in r.json()["detail"]

    # The v0.3 interface's URL takes v0.3 calls.
    a, b = await mesh.pair()
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {
        "kind": "message", "messageId": str(uuid.uuid4()), "role": "user",
        "parts": [{"kind": "text", "text": "via the v0.3 url"}]}}}
    r = await a.post(f"/a2a/{b.agent_id}/v0.3", body)
    assert r.json()["result"]["kind"] == "task", r.text
    stranger = await (await mesh.owner()).agent("s")
    r = await stranger.post(f"/a2a/{b.agent_id}/v0.3", body)
    assert r.status_code == 403, r.text


async def test_a2a_endpoints_refuse_non_json_bodies_with_415(gateway: str,
                                                             mesh: MeshFactory) -> None:
    a, b = await mesh.pair()
    body = ('{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{'
            '"messageId":"m-415-probe-1","role":"ROLE_USER","parts":[{"text":"x"}]}}}')
    rest_body = body[body.index('{"message"'):-1]
    kinds = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
             "text/html", "application/xml", "application/jsonx", "image/png"]
    statuses = []
    for kind in kinds:
        headers = {**a.headers, **V10, "Content-Type": kind}
        for path, content in ((f"/a2a/{b.agent_id}", body),
                              (f"/a2a/{b.agent_id}/v0.3", body),
                              (f"/a2a/{b.agent_id}/message:send", rest_body),
                              (f"/a2a/{b.agent_id}/message:stream", rest_body)):
            r = await a.http.post(path, content=content, headers=headers)
            statuses.append(r.status_code)
            assert r.headers["content-type"] == "application/problem+json", r.text
            assert "Content-Type" in r.json()["detail"]
    assert statuses == [415] * (len(kinds) * 4)
    assert "task.created" not in [e["type"] for e in (await b.inbox())["events"]]
    for kind in ("application/json", "application/a2a+json", "application/json; charset=utf-8"):
        r = await a.http.post(f"/a2a/{b.agent_id}", content=body,
                              headers={**a.headers, **V10, "Content-Type": kind})
        assert "result" in r.json(), r.text
    # Without credentials the answer is still 401 first.
    r = await a.http.post(f"/a2a/{b.agent_id}", content=body,
                          headers={"Content-Type": "text/plain"})
    assert r.status_code == 401

