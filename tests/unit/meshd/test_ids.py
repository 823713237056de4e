import re

from app.domain.ids import is_valid_id  # the gateway's rule: what it accepts is what we generate
from meshd.ids import (
    base36,
    derived_message_id,
    derived_task_id,
    new_artifact_id,
    new_message_id,
    new_task_id,
)


def test_message_and_task_ids_follow_the_design_format():
    m = new_message_id("coder@bob", unix_ms=1700000000123)
    t = new_task_id("coder@bob", unix_ms=1700000000123)
    assert re.fullmatch(r"m-coder@bob-1700000000123-[0-9a-z]{8}", m)
    assert re.fullmatch(r"t-coder@bob-1700000000123-[0-9a-z]{6}", t)
    assert is_valid_id(m) and is_valid_id(t) and is_valid_id(new_artifact_id("coder@bob"))


def test_ids_are_unique():
    ids = {new_message_id("a@b") for _ in range(20000)}
    assert len(ids) == 20000


def test_long_agent_ids_still_give_valid_ids():
    agent = "x" * 60 + "@" + "y" * 60
    for make in (new_message_id, new_task_id):
        value = make(agent)
        assert is_valid_id(value) and len(value) <= 128


def test_derived_ids_are_stable_per_key_and_valid():
    a = derived_message_id("coder@bob", "e-1-abc", unix_ms=5)
    assert a == derived_message_id("coder@bob", "e-1-abc", unix_ms=5)
    assert a != derived_message_id("coder@bob", "e-1-abd", unix_ms=5)
    assert re.fullmatch(r"m-coder@bob-5-[0-9a-z]{8}", a) and is_valid_id(a)
    t = derived_task_id("coder@bob", "e-1-abc/mesh_send_message/1")
    assert t == derived_task_id("coder@bob", "e-1-abc/mesh_send_message/1")
    assert t != derived_task_id("coder@bob", "e-1-abc/mesh_send_message/2")
    assert re.fullmatch(r"t-coder@bob-0-[0-9a-z]{6}", t) and is_valid_id(t)
    long = derived_task_id("x" * 60 + "@" + "y" * 60, "k")
    assert is_valid_id(long) and len(long) <= 128


def test_base36():
    assert base36(0, 3) == "000"
    assert base36(35, 1) == "z"
    assert base36(36, 2) == "10"
