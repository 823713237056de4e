"""An A2A remote's agent card: fetched through the SSRF guard, parsed by the SDK,
re-validated with its ETag (ADR 041)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types.a2a_pb2 import AgentCard
from google.protobuf.json_format import MessageToDict, ParseError

from app.platform.webhook_target import TargetRefused, parse

# The interfaces the bridge can call (the SDK's transport labels).
BINDINGS = ("JSONRPC", "HTTP+JSON")
CARD_MAX_BYTES = 256 * 1024


class CardRefused(Exception):
    """The card cannot be used; the message says why (for the owner)."""


@dataclass(frozen=True)
class Fetched:
    card: dict[str, Any] | None  # None: unchanged (304)
    etag: str | None


async def fetch(http: httpx.AsyncClient, card_url: str, *, etag: str | None = None) -> Fetched:
    """GET the card (``If-None-Match`` with a known ETag); CardRefused when the
    remote answers with something that is not a usable card; ``httpx.HTTPError`` /
    ``TargetRefused`` / ``OSError`` when it cannot be reached."""
    headers = {"accept": "application/json"}
    if etag:
        headers["if-none-match"] = etag
    response = await http.get(card_url, headers=headers)
    if response.status_code == 304 and etag:
        return Fetched(None, etag)
    if response.status_code != 200:
        raise CardRefused(f"the card url answered HTTP {response.status_code}"
                          + (" (redirects are not followed)"
                             if 300 <= response.status_code < 400 else ""))
    if len(response.content) > CARD_MAX_BYTES:
        raise CardRefused(f"the card is over {CARD_MAX_BYTES} bytes")
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CardRefused(f"the card is not JSON ({exc})") from exc
    card = to_proto(data)
    interface(card)  # refuses a card without an interface the bridge can call
    return Fetched(MessageToDict(card), response.headers.get("etag"))


def to_proto(data: Any) -> AgentCard:
    if not isinstance(data, dict):
        raise CardRefused("the card is not a JSON object")
    try:
        return parse_agent_card(dict(data))
    except (ParseError, ValueError, TypeError) as exc:
        raise CardRefused(f"the card is not a valid A2A agent card ({exc})"[:400]) from exc


def interface(card: AgentCard) -> tuple[str, str]:
    """(binding, url) of the first interface the bridge can call."""
    for iface in card.supported_interfaces:
        if iface.protocol_binding in BINDINGS and iface.url:
            try:
                parse(iface.url)
            except TargetRefused as exc:
                raise CardRefused(f"the card's interface url is refused: {exc}") from exc
            return iface.protocol_binding, iface.url
    raise CardRefused("the card lists no JSON-RPC or HTTP+JSON interface with a url")


def streams(card: AgentCard) -> bool:
    return bool(card.capabilities.streaming)


def summary(card: dict[str, Any]) -> dict[str, Any]:
    """What the owner sees of the card: its name, description, skills, streaming."""
    return {"name": card.get("name", ""), "description": card.get("description", ""),
            "streaming": bool((card.get("capabilities") or {}).get("streaming")),
            "skills": [{k: s[k] for k in ("id", "name", "description") if k in s}
                       for s in card.get("skills") or []]}
