"""An agent's webhook, on its owner's behalf: register, show, remove (ADR 035).

Delivery itself is the ``webhook`` process (workers/webhook.py); this side only
writes the registration and tells that process about it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import asyncpg
from redis.exceptions import RedisError

from app.delivery import protocol as delivery
from app.delivery.webhook_signing import Sealer, new_secret
from app.platform.errors import Problem, not_found
from app.platform.webhook_target import TargetRefused, check
from app.responses.webhooks import WebhookCreated, WebhookOut, WebhookStatus
from app.services import accounts
from app.services.mesh import Mesh
from app.services.principals import Owner
from app.store import webhooks as webhooks_store

log = logging.getLogger("mesh.webhooks")


def status_of(row: Mapping[str, Any]) -> WebhookStatus:
    """The one reading of a webhook's health from its breaker and failure run."""
    if row["breaker"] == "open":
        return "open"
    return "failing" if row["failures"] else "ok"


async def put(mesh: Mesh, owner: Owner, agent_id: str, url: str) -> WebhookCreated:
    settings = mesh.settings
    await accounts.owned_agent(mesh.pool, owner, agent_id)
    try:
        await check(url, allow_private=settings.webhook_allow_private)
    except TargetRefused as exc:
        raise Problem(422, f"webhook url refused: {exc}") from exc
    secret = new_secret()
    row = await webhooks_store.put(mesh.pool, agent_id, url,
                                   Sealer.from_settings(settings).seal(secret),
                                   settings.webhook_secret_grace_seconds)
    try:
        await mesh.redis.publish(delivery.NOTIFY_CHANNEL, delivery.webhook_notice(agent_id))
    except (RedisError, OSError) as exc:  # the webhook process's sweep finds it anyway
        log.warning("could not announce the webhook of %s (%s)", agent_id, exc)
    return WebhookCreated(url=row["url"], secret=secret, status=status_of(row))


async def get(pool: asyncpg.Pool, owner: Owner, agent_id: str) -> WebhookOut:
    await accounts.owned_agent(pool, owner, agent_id)
    row = await webhooks_store.view(pool, agent_id)
    if row is None:
        raise not_found(f"agent '{agent_id}' has no webhook; PUT one to register it")
    return WebhookOut.of(row, status=status_of(row))


async def remove(mesh: Mesh, owner: Owner, agent_id: str) -> None:
    await accounts.owned_agent(mesh.pool, owner, agent_id)
    if not await webhooks_store.delete(mesh.pool, agent_id):
        raise not_found(f"agent '{agent_id}' has no webhook")
