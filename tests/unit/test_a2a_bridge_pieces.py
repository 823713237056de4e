"""The bridge's small rules, without services: what is retried, how remote ids
become mesh ids, what a remote part and a forwarded message look like."""

from __future__ import annotations

import httpx
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import Part, Role
from a2a.utils.errors import InternalError, InvalidParamsError

from app.a2a.writeback import _path, mesh_id, parts_from_a2a
from app.domain import ids
from app.platform.webhook_target import TargetRefused
from workers.a2a_remote import outbound, transient


def _client_error(status: int) -> A2AClientError:
    request = httpx.Request("POST", "http://remote/a2a")
    cause = httpx.HTTPStatusError("x", request=request,
                                  response=httpx.Response(status, request=request))
    try:
        raise A2AClientError(f"HTTP Error {status}") from cause
    except A2AClientError as exc:
        return exc


def test_down_is_retried_and_an_answer_is_not() -> None:
    assert transient(httpx.ConnectError("refused"))
    assert transient(TimeoutError())
    assert transient(TargetRefused("now private"))
    assert transient(_client_error(503)) and transient(_client_error(429))
    assert not transient(_client_error(400)) and not transient(_client_error(404))
    assert not transient(InvalidParamsError(message="bad"))
    assert not transient(InternalError(message="boom"))


def test_remote_ids_become_stable_mesh_ids() -> None:
    uuid = "0b6f0f8e-3c55-4d59-9a4b-4bd6f3a1f7aa"
    assert mesh_id(uuid) == uuid
    odd = "has spaces / and slashes"
    assert mesh_id(odd) == mesh_id(odd) != odd and ids.is_valid_id(mesh_id(odd))
    assert mesh_id("art", "a") != mesh_id("art", "b")  # appended chunks differ by content


def test_a_remote_media_type_the_mesh_lacks_is_kept_on_files_only() -> None:
    text = Part(text="# hi", media_type="text/markdown")
    pdf = Part(url="https://x/y.pdf", media_type="application/pdf")
    assert parts_from_a2a([text, pdf]) == [
        {"kind": "text", "text": "# hi"},
        {"kind": "file", "file": {"uri": "https://x/y.pdf", "mime_type": "application/pdf"}}]


def test_the_forwarded_message_carries_the_mesh_ids() -> None:
    msg = {"message_id": "m-1", "task_id": "t-1", "context_id": "c-1", "sender": "a@b",
           "parts": [{"kind": "text", "text": "hello"}], "metadata": None}
    first = outbound(msg, None)
    assert (first.message_id, first.context_id, first.task_id) == ("m-1", "c-1", "")
    assert first.role == Role.ROLE_USER and first.parts[0].text == "hello"
    follow_up = outbound(msg, {"remote_task_id": "r-9", "remote_context_id": "rc-9"})
    assert (follow_up.task_id, follow_up.context_id) == ("r-9", "rc-9")


def test_an_answer_at_once_walks_through_working() -> None:
    assert _path("submitted", "completed") == ["working", "completed"]
    assert _path("working", "input-required") == ["input-required"]
    assert _path("input-required", "completed") == ["working", "completed"]
    assert _path("completed", "working") == []
