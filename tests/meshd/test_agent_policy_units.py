"""The policies' pure parts: the complexity heuristic and chit-chat detection (English and Chinese)."""

from __future__ import annotations

import pytest

from meshd.agent.policies.chitchat import is_chit_chat
from meshd.agent.policies.complexity import apply, infer
from meshd.agent.settings import RunSettings


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("What is six times seven?", "low"),
        ("查一下版本号", "low"),
        ("Refactor the task module into its own file", "high"),
        ("Design the migration of the billing database", "high"),
        ("重构 task 模块的状态机逻辑", "high"),
        ("把服务迁移到新集群", "high"),
        ("First read the file, then summarise it", "medium"),
        ("先读文件，然后写总结", "medium"),
        ("word " * 61, "medium"),
        ("字" * 201, "medium"),
    ],
)
def test_complexity_heuristic(text: str, level: str) -> None:
    assert infer(text) == level


def test_level_settings_keep_a_configured_effort_and_never_touch_limits() -> None:
    rs = RunSettings(max_turns=7)
    high = apply(rs, "high")
    assert (high.effort, high.thinking, high.max_turns) == ("high", {"type": "adaptive"}, 7)
    assert apply(rs, "low").thinking == {"type": "disabled"}
    assert apply(RunSettings(effort="max"), "low").effort == "max"


@pytest.mark.parametrize(
    "text",
    ["Thanks!", "thank you so much.", "Thanks a lot!", "Many thanks again, really appreciated.",
     "OK", "Got it, thanks!", "You're welcome! Have a nice day.", "👍",
     "谢谢！", "ok 👍", "好的，收到", "不客气～", "辛苦了"],
)  # fmt: skip
def test_chit_chat(text: str) -> None:
    assert is_chit_chat(text)


@pytest.mark.parametrize(
    "text",
    ["", "Thanks, and please also check the logs", "What is 6*7?", "谢谢，另外请看一下日志", "ok " * 40,
     "Done.", "Confirmed: move the state constants too.", "Thanks, please fix the bug too", "ok, do it"],
)  # fmt: skip
def test_not_chit_chat(text: str) -> None:
    assert not is_chit_chat(text)
