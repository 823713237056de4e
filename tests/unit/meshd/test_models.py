"""The SDK's models parse what the gateway sends (shapes from app/services and app/store),
keep it verbatim in ``raw``, and refuse bodies that miss what the contract promises."""

import pydantic
import pytest

from meshd.models import InboxEvent, InboxPage, Message, Task, TaskPage, TokenInfo, parts_text

T0 = "2026-11-30T10:00:00.123456+00:00"
TASK = {
    "task_id": "t-a@x-1796032800123-abc123",
    "context_id": "c-a@x-1796032800123-xyz789",
    "state": "submitted",
    "initiator": "a@x",
    "serving_agent": "b@x",
    "status_message": None,
    "created_at": T0,
    "updated_at": T0,
}
MESSAGE = {
    "message_id": "m-a@x-1796032800123-abcd1234",
    "task_id": TASK["task_id"],
    "context_id": TASK["context_id"],
    "role": "user",
    "sender": "a@x",
    "recipient": "b@x",
    "parts": [{"kind": "text", "text": "review PR 12"}, {"kind": "data", "data": {"pr": 12}}],
    "metadata": None,
    "created_at": T0,
}
EVENT = {
    "seq": 7,
    "event_id": "e-1796032800123-q1w2e3r4",
    "type": "task.created",
    "task_id": TASK["task_id"],
    "context_id": TASK["context_id"],
    "from_agent_id": "a@x",
    "created_at": T0,
    "payload": {"task": TASK, "message": MESSAGE},
}


def test_created_task_carries_its_first_message():
    task = Task.model_validate({**TASK, "message": MESSAGE})  # POST /v1/mesh/tasks
    assert (task.state, task.serving_agent, task.terminal) == ("submitted", "b@x", False)
    assert task.message is not None and task.message.text == "review PR 12"
    assert task.messages == [] and task.artifacts == []
    assert task.raw == {**TASK, "message": MESSAGE}


def test_task_with_history_receipts_and_artifacts():
    body = {
        **TASK,
        "state": "completed",
        "status_message": {**MESSAGE, "parts": [{"kind": "text", "text": "done"}]},
        "messages": [
            {**MESSAGE, "seq": 3, "receipt": {"status": "acked", "delivered_at": T0}},
            {**MESSAGE, "message_id": "m-2", "seq": None, "receipt": {"status": "queued"}},
        ],
        "artifacts": [{"artifact_id": "a-1", "task_id": TASK["task_id"], "name": "review", "parts": []}],
    }
    task = Task.model_validate(body)  # GET /v1/mesh/tasks/{id}
    assert task.terminal
    assert [m.receipt.status for m in task.messages if m.receipt] == ["acked", "queued"]
    assert task.artifacts[0]["name"] == "review"
    assert task.messages[0].raw["seq"] == 3  # fields the model does not name stay in raw


def test_inbox_event_and_page():
    page = InboxPage.model_validate({"events": [EVENT], "next_after": 7})
    (event,) = page.events
    assert (event.seq, event.type, event.from_agent_id, page.next_after) == (7, "task.created", "a@x", 7)
    assert event.text == "review PR 12"
    assert event.message is not None and event.message.parts[1] == {"kind": "data", "data": {"pr": 12}}
    assert event.task == TASK
    assert event.raw is EVENT  # an --exec handler gets exactly what the gateway sent


def test_events_without_a_message_and_friend_events():
    status = InboxEvent.model_validate(
        {**EVENT, "type": "task.status", "payload": {"state": "working", "previous_state": "submitted",
                                                     "message": None, "task": TASK}}
    )  # fmt: skip
    assert status.message is None and status.text == ""
    friend = InboxEvent.model_validate(
        {**EVENT, "type": "friend.request", "task_id": None, "context_id": None,
         "payload": {"request": {"request_id": "fr-1", "note": "hi"}}}
    )  # fmt: skip
    assert friend.task_id is None and friend.payload["request"]["note"] == "hi"


def test_bodies_missing_promised_fields_are_refused():
    for missing in ("seq", "event_id", "type", "payload"):
        with pytest.raises(pydantic.ValidationError):
            InboxEvent.model_validate({k: v for k, v in EVENT.items() if k != missing})
    with pytest.raises(pydantic.ValidationError):
        Task.model_validate({**TASK, "state": "finished"})
    # the daemon treats a malformed event like a broken stream (it catches ValueError)
    assert issubclass(pydantic.ValidationError, ValueError)


def test_models_are_frozen_and_ignore_unknown_fields():
    msg = Message.model_validate({**MESSAGE, "something_new": 1})
    assert msg.raw["something_new"] == 1 and not hasattr(msg, "something_new")
    with pytest.raises(pydantic.ValidationError):
        msg.message_id = "other"  # type: ignore[misc]


def test_token_and_task_page():
    tok = TokenInfo.model_validate(
        {"access_token": "jwt", "token_type": "bearer", "expires_in": 900, "agent_id": "a@x"}
    )
    assert (tok.expires_in, tok.agent_id) == (900.0, "a@x")
    page = TaskPage.model_validate({"tasks": [TASK], "next_cursor": None})
    assert [t.task_id for t in page.tasks] == [TASK["task_id"]] and page.next_cursor is None


def test_parts_text_keeps_only_text_parts():
    assert parts_text(MESSAGE["parts"]) == "review PR 12"
    assert parts_text(None) == ""
