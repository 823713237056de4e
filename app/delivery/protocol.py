"""The delivery protocol between the push worker and the web processes.

Both sides of the Redis hand-over import their names from here, so a key, a
channel or a notice changes in one place:

- each agent's events sit in the Redis Stream ``inbox:{agent_id}``, one entry
  per event with the explicit id ``{seq}-0`` and two fields: ``e`` (the event's
  wire bytes, app.domain.event_wire) and ``t`` (its type, for the SSE ``event:`` line
  without parsing ``e``);
- after a write the push worker PUBLISHes ``"{agent_id} {seq}"`` on the agent's
  own channel ``mesh:inbox-events:{agent_id}`` (:func:`inbox_channel`), followed by
  the events it wrote when they are small (:func:`event_notice_carrying`), so a
  stream that is caught up hands them over without reading Redis. Only the
  processes that hold a reader of that agent (and the lane workers that serve it)
  follow that channel, so a send wakes no other process;
- every other notice goes to every follower on ``mesh:inbox-notify``: a credential
  change publishes ``"{agent_id} auth"`` there. Notices are hints: a reader that
  cannot use what a notice carries re-reads its source;
- the commit notice (below) comes from the web process that committed, on the
  agent's commit channel ``mesh:inbox-commits:{agent_id}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.domain.event_wire import WireEvent

INBOX_STREAM_PREFIX = "inbox:"
NOTIFY_CHANNEL = "mesh:inbox-notify"
INBOX_CHANNEL_PREFIX = "mesh:inbox-events:"
AUTH_CHANGED = "auth"
# An idle agent's stream expires; Postgres still holds every event for catch-up.
STREAM_TTL_SECONDS = 7 * 24 * 3600
EVENT_FIELD = b"e"
TYPE_FIELD = b"t"


def inbox_stream_key(agent_id: str) -> str:
    """The agent's Redis Stream: written by the push worker, read by SSE."""
    return f"{INBOX_STREAM_PREFIX}{agent_id}"


def inbox_channel(agent_id: str) -> str:
    """The agent's event notices: followed by the processes holding its readers."""
    return f"{INBOX_CHANNEL_PREFIX}{agent_id}"


def entry_id(seq: int) -> str:
    return f"{seq}-0"


def entry_seq(entry: bytes | str) -> int:
    """The seq of a stream entry id (``{seq}-0``)."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    return int(text.split("-", 1)[0])


def event_notice(agent_id: str, seq: int) -> str:
    return f"{agent_id} {seq}"


# The most event bytes one notice carries: Redis copies a notice to every follower
# of the agent's channel, so a large event is announced without its bytes and read
# from the stream by the processes that hold its reader.
CARRY_MAX_BYTES = 16 * 1024


def event_notice_carrying(agent_id: str, events: Sequence[WireEvent]) -> bytes:
    """The event notice for ``events`` (one agent's, in seq order) with the events
    after it: ``"{agent_id} {last seq}"``, then per event a line
    ``"{seq} {type} {length}"`` and its bytes, each after a newline. Without the
    events when together they exceed :data:`CARRY_MAX_BYTES`."""
    head = event_notice(agent_id, max(ev.seq for ev in events)).encode()
    if sum(len(ev.data) for ev in events) > CARRY_MAX_BYTES:
        return head
    parts = [head]
    for ev in events:
        parts.append(b"\n%d %s %d\n" % (ev.seq, ev.type.encode(), len(ev.data)))
        parts.append(ev.data)
    return b"".join(parts)


def carried_events(carried: bytes) -> list[WireEvent] | None:
    """The events a notice carries (its bytes after the first line); None when they
    cannot be read, which a reader takes as a plain notice."""
    out: list[WireEvent] = []
    at = 0
    try:
        while at < len(carried):
            line_end = carried.index(b"\n", at)
            seq, kind, length = carried[at:line_end].split(b" ")
            start = line_end + 1
            end = start + int(length)
            if end > len(carried):
                return None
            out.append(WireEvent(int(seq), kind.decode(), carried[start:end]))
            at = end + 1  # the newline before the next event's line
    except (ValueError, UnicodeDecodeError):
        return None
    return out


def auth_notice(agent_id: str) -> str:
    return f"{agent_id} {AUTH_CHANGED}"


# What a notice says: an event reached the agent's Redis stream (the push worker's,
# after "{agent_id} {seq}"), its credentials changed, an event of it committed
# (below: wakes readers of Postgres only), or who may reach whom changed (below).
NoticeKind = Literal["event", "auth", "commit", "reach", "webhook", "push"]


@dataclass(frozen=True, slots=True)
class Notice:
    agent_id: str
    kind: NoticeKind = "event"
    # An event notice's bytes after its first line (the events it carries), unparsed:
    # most processes hear notices for agents they hold no reader of.
    carried: bytes = b""
    # The seq an event notice announces: every event up to it is committed. 0: none.
    seq: int = 0

    @property
    def auth(self) -> bool:
        return self.kind == "auth"

    @property
    def committed(self) -> bool:
        return self.kind == "commit"

    @property
    def reach(self) -> bool:
        return self.kind == "reach"

    @property
    def webhook(self) -> bool:
        return self.kind == "webhook"

    @property
    def push(self) -> bool:
        return self.kind == "push"


def parse_notice(data: bytes | str) -> Notice:
    raw = data if isinstance(data, bytes) else str(data).encode()
    head, _, carried = raw.partition(b"\n")
    agent_id, _, what = head.decode().partition(" ")
    if what == AUTH_CHANGED:
        return Notice(agent_id, "auth")
    if what == COMMITTED:
        return Notice(agent_id, "commit")
    if agent_id == REACH_AGENT and what == REACH_CHANGED:
        return Notice(agent_id, "reach")
    if what == WEBHOOK_CHANGED:
        return Notice(agent_id, "webhook")
    if what == PUSH_CHANGED:
        return Notice(agent_id, "push")
    return Notice(agent_id, carried=carried,
                  seq=int(what) if what.isascii() and what.isdigit() else 0)


# --- reach changes (the web processes' relationship caches) ------------
# Who may reach whom changed somewhere (a friendship accepted or removed, a group's
# members changed, a group deleted): every web process drops the relationships it
# cached (app.services.reach_cache). Sent on the same channel, under a pseudo-agent no
# agent id can equal ('*' is no id character), so a reader that does not know the
# kind wakes nobody for it.
REACH_AGENT = "*"
REACH_CHANGED = "reach"


def reach_notice() -> str:
    return f"{REACH_AGENT} {REACH_CHANGED}"


# --- the cache epoch (ADR 020, follow-up) -------------------------------------------
# A notice reaches another process a moment after it is published; a request there
# in that moment would still be served from the cache. So every credential or reach
# change first INCRs this counter (in the same pipeline as its notice), and the
# rate-limit script, which every authenticated request runs anyway, returns it: a
# process that sees it move drops its caches before trusting them for that request.
CACHE_EPOCH_KEY = "mesh:cache-epoch"


# --- commit notices (ADR 021) ------------------------------------------
# After a write commits, the web process that made it PUBLISHes ``"{agent_id} commit"``
# on the recipient's commit channel (:func:`commit_channel`), before the relay and the
# push worker have carried the event anywhere. Only readers of Postgres wake for it
# (long-polls, the lane workers): the agent's Redis stream, which SSE reads, does not
# hold the event yet. So it is a channel apart from the agent's event channel, which
# a web process follows only while it holds a long-poll of that agent (ADR 059,
# ADR 063): one serving streams alone would wake for every send's commit for nothing.
# A process that does not know the kind treats it as an event notice (a harmless
# extra wake-up).
COMMIT_CHANNEL_PREFIX = "mesh:inbox-commits:"
COMMITTED = "commit"


def commit_channel(agent_id: str) -> str:
    """The agent's commit notices: followed by the processes holding its long-polls."""
    return f"{COMMIT_CHANNEL_PREFIX}{agent_id}"


def commit_notice(agent_id: str) -> str:
    return f"{agent_id} {COMMITTED}"


# --- webhook notices (ADR 035) -------------------------------------------------------
# An owner registered or replaced an agent's webhook: the webhook processes start
# delivering it now rather than at their next sweep. Other readers wake as for an
# event notice (a harmless re-read).
WEBHOOK_CHANGED = "webhook"


def webhook_notice(agent_id: str) -> str:
    return f"{agent_id} {WEBHOOK_CHANGED}"


# --- push-config notices (ADR 039) ---------------------------------------------------
# An agent registered or replaced an A2A push-notification config: the webhook
# processes look its configs up and deliver now rather than at their next sweep.
PUSH_CHANGED = "push"


def push_notice(agent_id: str) -> str:
    return f"{agent_id} {PUSH_CHANGED}"
