"""Complexity levels ``low | medium | high``: explicit in message metadata, else inferred.

The sender sets ``metadata.complexity`` (``mesh send --complexity``,
``mesh_send_message(..., complexity=)``). Without one the receiver infers it from
the task's first message (the request; later messages such as "confirmed" say
nothing about the work), in English and Chinese:

- high: design / refactor / migration / architecture / rewrite / from scratch /
  overhaul words (重构 架构 设计 迁移 从零 全面 系统性 多模块);
- medium: a long text (over 200 characters when it contains CJK, over 60 words
  otherwise) or multi-step wording (steps, then, first … after that; 步骤 然后
  首先 接着 之后);
- low: anything else.

The level picks effort and thinking (:data:`LEVEL_SETTINGS`); limits stay the
configured ones, so a sender that says "high" buys more thought, not more budget.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Literal

from meshd.agent.settings import RunSettings
from meshd.models import InboxEvent, Message, Task

Level = Literal["low", "medium", "high"]
LEVELS: tuple[Level, ...] = ("low", "medium", "high")

LEVEL_SETTINGS: dict[Level, tuple[str, dict[str, object]]] = {
    "low": ("low", {"type": "disabled"}),
    "medium": ("medium", {"type": "adaptive"}),
    "high": ("high", {"type": "adaptive"}),
}

HIGH_EN = re.compile(
    r"\b(re-?design|design|refactor|migrat(e|es|ed|ing|ion|ions)|architect(ure|ural)?|"
    r"rewrite|re-?architect|from scratch|overhaul)\w*",
    re.I,
)
HIGH_ZH = ("重构", "架构", "设计", "迁移", "从零", "全面", "系统性", "多模块")
MEDIUM_EN = re.compile(r"\b(steps?|then|first[, ]|after that|afterwards|finally|multi-step)\b", re.I)
MEDIUM_ZH = ("步骤", "然后", "首先", "接着", "之后", "最后")
CJK = re.compile(r"[\u3400-\u9fff]")
LONG_CJK_CHARS = 200
LONG_WORDS = 60


def infer(text: str) -> Level:
    if HIGH_EN.search(text) or any(w in text for w in HIGH_ZH):
        return "high"
    long = len(text) > LONG_CJK_CHARS if CJK.search(text) else len(text.split()) > LONG_WORDS
    if long or MEDIUM_EN.search(text) or any(w in text for w in MEDIUM_ZH):
        return "medium"
    return "low"


def message_text(msg: Message | None) -> str:
    if msg is None:
        return ""
    return "\n".join(str(p.get("text", "")) for p in msg.parts if p.get("kind") == "text")


def explicit(msg: Message | None) -> Level | None:
    meta = (msg.metadata if msg else None) or {}
    value = meta.get("complexity") if isinstance(meta, dict) else None
    return value if value in LEVELS else None  # type: ignore[return-value]


def level_of(event: InboxEvent, task: Task | None) -> tuple[Level, str]:
    """The task's level and where it came from (``explicit`` or ``inferred``)."""
    first = task.messages[0] if task is not None and task.messages else event.message
    for msg in (event.message, first):
        got = explicit(msg)
        if got is not None:
            return got, "explicit"
    return infer(message_text(first)), "inferred"


def apply(rs: RunSettings, level: Level) -> RunSettings:
    """The run settings of ``level``; an effort set with ``--effort`` is kept for every level."""
    effort, thinking = LEVEL_SETTINGS[level]
    return replace(rs, effort=rs.effort or effort, thinking=rs.thinking or thinking)  # type: ignore[arg-type]
