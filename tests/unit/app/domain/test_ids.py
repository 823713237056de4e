"""The id rule and the ids the gateway makes: every generated id passes the rule."""

from __future__ import annotations

import pytest

from app.domain import ids


@pytest.mark.parametrize("value", [
    "abc", "a@b", "t-a@b-1-x", "A" * 128, "x.y:z_w-1",
])
def test_valid_ids(value: str) -> None:
    assert ids.is_valid_id(value)


@pytest.mark.parametrize("value", [
    "", "ab", "-abc", ".abc", "abc\n", "a b c", "A" * 129, "abc/def", "é-abc", "abc;drop",
])
def test_invalid_ids(value: str) -> None:
    assert not ids.is_valid_id(value)


def test_generated_ids_follow_the_rule_and_do_not_repeat() -> None:
    agent = ids.agent_id_of("coder", "alice")
    assert agent == "coder@alice"
    made = [make(agent) for make in (ids.new_task_id, ids.new_message_id, ids.new_context_id,
                                     ids.new_broadcast_id) for _ in range(200)]
    made += [make() for make in (ids.new_event_id, ids.new_request_id, ids.new_artifact_id)
             for _ in range(200)]
    assert all(ids.is_valid_id(value) for value in made)
    assert len(set(made)) == len(made)


def test_base36_has_the_asked_width_and_alphabet() -> None:
    for width in (1, 6, 10):
        value = ids.base36(width)
        assert len(value) == width and set(value) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
