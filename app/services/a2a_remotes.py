"""Agents served by an A2A server elsewhere, on their owner's behalf (ADR 041).

Registration checks the card URL by the webhook target rule, fetches the card
through the same guard (with the owner's headers) and refuses one the bridge
could not call; the agent and its remote are written in one transaction. The
headers are sealed (app.delivery.webhook_signing.Sealer, a key of their own) and never
shown again: the owner sees their names. Forwarding is the ``a2a-bridge``
process (workers/a2a_bridge.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import asyncpg
import httpx
from redis.exceptions import RedisError

from app.delivery import protocol as delivery
from app.delivery.webhook_signing import Sealer
from app.domain import ids
from app.domain.schemas import AgentCreate
from app.platform import guarded_http
from app.platform.errors import Problem, conflict
from app.platform.settings import Settings
from app.platform.webhook_target import TargetRefused, check
from app.responses import A2ARemoteOut, AgentOut
from app.services import remote_card
from app.services.mesh import Mesh
from app.services.principals import Owner
from app.store import a2a_remotes as store
from app.store import agents as agents_store

log = logging.getLogger("mesh.a2a_remotes")

SEAL_LABEL = b"agent-mesh a2a remote headers"
# Set by the bridge itself on every call (or meaningless to send).
_RESERVED_HEADERS = frozenset({"host", "content-length", "content-type", "transfer-encoding",
                               "connection", "upgrade", "te", "trailer", "keep-alive",
                               "a2a-version"})


def sealer(settings: Settings) -> Sealer:
    return Sealer.from_settings(settings, SEAL_LABEL)


def open_headers(settings: Settings, sealed: str | None) -> dict[str, str]:
    if not sealed:
        return {}
    try:
        return json.loads(sealer(settings).open(sealed))  # type: ignore[no-any-return]
    except ValueError:
        # Never the value in the message: it may end up in a log.
        raise ValueError("an A2A remote's headers could not be opened: "
                         "MESH_WEBHOOK_SECRET_KEY (or MESH_JWT_SECRET) changed since they were "
                         "stored; the owner must register the agent again") from None


def _refuse(field: str, why: str, status: int = 422) -> Problem:
    return Problem(status, f"invalid request: {field}: {why}",
                   errors=[{"field": field, "message": why}])


async def create(mesh: Mesh, owner: Owner, body: AgentCreate) -> AgentOut:
    assert body.a2a is not None
    settings = mesh.settings
    remote = body.a2a
    headers = dict(remote.headers or {})
    for name in headers:
        if name.lower() in _RESERVED_HEADERS:
            raise _refuse("a2a.headers", f"'{name}' is set by the bridge itself")
    try:
        await check(remote.card_url, allow_private=settings.webhook_allow_private)
    except TargetRefused as exc:
        raise _refuse("a2a.card_url", str(exc)) from exc
    try:
        async with guarded_http.client(allow_private=settings.webhook_allow_private,
                                       headers=headers,
                                       timeout=settings.webhook_timeout_seconds) as http:
            fetched = await remote_card.fetch(http, remote.card_url)
    except remote_card.CardRefused as exc:
        raise _refuse("a2a.card_url", str(exc)) from exc
    except TargetRefused as exc:
        raise _refuse("a2a.card_url", str(exc)) from exc
    except (httpx.HTTPError, OSError) as exc:
        raise _refuse("a2a.card_url", f"the card could not be fetched "
                                      f"({type(exc).__name__}: {exc})"[:400]) from exc
    assert fetched.card is not None
    _binding, url = remote_card.interface(remote_card.to_proto(fetched.card))
    try:
        await check(url, allow_private=settings.webhook_allow_private)
    except TargetRefused as exc:
        raise _refuse("a2a.card_url", f"the card's interface url is refused: {exc}") from exc
    if body.name == ids.VIRTUAL_USER_NAME:
        raise conflict(f"the name '{ids.VIRTUAL_USER_NAME}' is reserved for your "
                       "virtual-user agent")
    agent_id = ids.agent_id_of(body.name, owner.username)
    card = fetched.card
    async with mesh.pool.acquire() as conn, conn.transaction():
        row = await agents_store.create(
            conn, agent_id=agent_id, owner_id=owner.user_id, name=body.name,
            display_name=body.display_name or str(card.get("name") or body.name)[:200],
            description=body.description or str(card.get("description") or "")[:4000],
            skills=[s.model_dump(exclude_none=True) for s in body.skills or []]
            or _skills(card), kind="a2a", instructions=body.instructions or "")
        if row is None:
            raise conflict(f"you already have an agent named '{body.name}' ({agent_id})")
        await store.create(conn, agent_id=agent_id, card_url=remote.card_url,
                           headers=sealer(settings).seal(json.dumps(headers)) if headers
                           else None, header_names=sorted(headers), card=card,
                           etag=fetched.etag)
        await agents_store.set_reachable(conn, agent_id, True)  # its card just answered
        row = await agents_store.get(conn, agent_id)
        view = await store.view(conn, agent_id)
    try:  # the bridge starts following the agent now, not at its next sweep
        await mesh.redis.publish(delivery.NOTIFY_CHANNEL, delivery.webhook_notice(agent_id))
    except (RedisError, OSError) as exc:
        log.warning("could not announce the A2A remote of %s (%s)", agent_id, exc)
    return AgentOut.of(row, a2a=remote_out(view))


def _skills(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The card's skills in the mesh's skill form (id, name, description, tags)."""
    out = []
    for s in (card.get("skills") or [])[:100]:
        skill = {k: s[k] for k in ("id", "name", "description", "tags") if s.get(k)}
        if skill.get("id") and skill.get("name"):
            out.append(skill)
    return out


def remote_out(view: Mapping[str, Any] | None) -> A2ARemoteOut | None:
    if view is None:
        return None
    return A2ARemoteOut.of(view, card=remote_card.summary(view["card"]))


async def attach(conn: asyncpg.Pool | asyncpg.Connection,
                 agents: list[AgentOut]) -> list[AgentOut]:
    """Fill ``a2a`` on the agents of kind "a2a" (one query for all)."""
    bridged = [a.agent_id for a in agents if a.kind == "a2a"]
    if not bridged:
        return agents
    views = await store.views(conn, bridged)
    return [a.model_copy(update={"a2a": remote_out(views.get(a.agent_id))})
            if a.kind == "a2a" else a for a in agents]
