"""The delivery protocol between the push worker and the web processes.

Both sides of the Redis hand-over import their names from here, so a key, a
channel or a notice changes in one place:

- each agent's events sit in the Redis Stream ``inbox:{agent_id}``, one entry
  per event with the explicit id ``{seq}-0`` and two fields: ``e`` (the event's
  wire bytes, app.domain.event_wire) and ``t`` (its type, for the SSE ``event:`` line
  without parsing ``e``);
- after a write the push worker PUBLISHes ``"{agent_id} {seq}"`` on
  ``mesh:inbox-notify``; a credential change publishes ``"{agent_id} auth"``
  there. Notices are hints: a reader always re-reads its source;
- the commit notice (below) comes from the web process that committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

INBOX_STREAM_PREFIX = "inbox:"
NOTIFY_CHANNEL = "mesh:inbox-notify"
AUTH_CHANGED = "auth"
# An idle agent's stream expires; Postgres still holds every event for catch-up.
STREAM_TTL_SECONDS = 7 * 24 * 3600
EVENT_FIELD = b"e"
TYPE_FIELD = b"t"


def inbox_stream_key(agent_id: str) -> str:
    """The agent's Redis Stream: written by the push worker, read by SSE."""
    return f"{INBOX_STREAM_PREFIX}{agent_id}"


def entry_id(seq: int) -> str:
    return f"{seq}-0"


def entry_seq(entry: bytes | str) -> int:
    """The seq of a stream entry id (``{seq}-0``)."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    return int(text.split("-", 1)[0])


def event_notice(agent_id: str, seq: int) -> str:
    return f"{agent_id} {seq}"


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
    text = data.decode() if isinstance(data, bytes) else str(data)
    agent_id, _, what = text.partition(" ")
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
    return Notice(agent_id)


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
# on NOTIFY_CHANNEL for each recipient, before the relay and the push worker have
# carried the event anywhere. Only readers of Postgres (long-polls) wake for it: the
# agent's Redis stream, which SSE reads, does not hold the event yet. A process that
# does not know the kind treats it as an event notice (a harmless extra wake-up).
COMMITTED = "commit"


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
