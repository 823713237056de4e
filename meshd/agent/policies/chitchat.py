"""Chit-chat: messages that only acknowledge or thank, in English and Chinese.

Two runtimes that answer every "thanks" with "you're welcome" burn money
forever. The runtime, not the prompt, stops it (see :mod:`meshd.agent.runner` and
:mod:`meshd.agent.closing`):

- an acknowledgement-only message starts no run (the sender expects nothing);
- a run's final text that is only an acknowledgement is not auto-posted;
- after ``chit_chat`` such messages in a row on a task it serves, the runtime
  closes the task (``completed``) itself.

A message counts only when it is short and every sentence is a pleasantry, so
"thanks, and please also check X" is work.
"""

from __future__ import annotations

import re

from meshd.models import Message

MAX_CHARS = 80
LABEL_LINE = re.compile(r"^\[verification: [^\]]*\]\s*$", re.M)
_EN = (
    r"thanks?( you)?( (so|very) much)?|thank u|thx|ty|cheers|great|awesome|perfect|nice|cool|"
    r"ok(ay)?|k|got it|noted|understood|sounds good|will do|roger|ack(nowledged)?|"
    r"you'?re welcome|no problem|np|my pleasure|anytime|glad (to|i could) help|"
    r"have a (nice|good|great) (day|one)|bye|see you|you too|much appreciated|appreciated|"
    r"good (job|work)|well done|all good|👍|🙏|😊|🙂"
)
_ZH = (
    r"谢谢(你|您)?|多谢|感谢(你|您)?|非常感谢|不客气|不用谢|没问题|好的?|收到|明白了?|了解|"
    r"辛苦了?|太好了|很好|棒|再见|好嘞|行|嗯+|哈+"
)
PHRASE = re.compile(rf"^(?:{_EN}|{_ZH})$", re.I)
# Words that pleasantries are made of: a sentence of these only ("thanks a lot again, really
# appreciated") is one too, whatever the order. Work words ("check", "fix", "please") are absent.
_WORDS = frozenset(
    "thanks thank thx ty you u so very much a lot bunch again really truly all for that this the it "
    "your my help great awesome perfect nice cool ok okay got noted understood sounds good will "
    "roger ack welcome problem no np pleasure anytime glad to i could have day one bye see too "
    "much appreciated appreciate job work well many cheers 👍 🙏 😊 🙂 ❤️".split()
)
SPLIT = re.compile(r"[\s,.!?;:~～，。！？；：、…]+")


def is_chit_chat(text: str) -> bool:
    """Whether ``text`` only acknowledges or thanks (empty text is not chit-chat)."""
    # A runtime's verification line ("[verification: …]") is not part of what was said.
    text = LABEL_LINE.sub("", text).strip()
    if not text or len(text) > MAX_CHARS:
        return False
    # Sentences of known pleasantries; words are re-joined so "thank you so much" matches.
    chunks = [c for c in re.split(r"[,.!?;:~～，。！？；：、…\n]+", text) if c.strip()]
    return bool(chunks) and all(_pleasantry(c) for c in chunks)


def _pleasantry(chunk: str) -> bool:
    words = [w for w in SPLIT.split(chunk.strip().lower()) if w]
    if PHRASE.match(" ".join(words)):
        return True
    return 0 < len(words) <= 12 and all(w.strip("'") in _WORDS or w in ("you're", "i'm") for w in words)


def message_is_chit_chat(msg: Message) -> bool:
    if any(p.get("kind") != "text" for p in msg.parts):
        return False
    return is_chit_chat("\n".join(str(p.get("text", "")) for p in msg.parts))


def trailing_chit_chat(messages: list[Message]) -> int:
    """How many of the task's newest messages in a row are chit-chat."""
    n = 0
    for m in reversed(messages):
        if not message_is_chit_chat(m):
            break
        n += 1
    return n
