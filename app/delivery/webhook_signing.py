"""Webhook secrets: made, sealed at rest, and used to sign a delivery (ADR 035).

A secret is ``whsec_<base64 of 32 random bytes>``, the Standard Webhooks form,
shown to the owner once. The worker must sign with it later, so Postgres holds
it sealed (Fernet: AES-128-CBC + HMAC-SHA256) under a key derived from
``MESH_WEBHOOK_SECRET_KEY`` (or, unset, from ``MESH_JWT_SECRET``): a database
dump or backup alone does not give the secrets away. Signing is the
``standardwebhooks`` package's own, so what a receiver verifies with
``Webhook(secret).verify`` is exactly what was computed here.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime

from cryptography.fernet import Fernet, InvalidToken
from standardwebhooks import Webhook

from app.platform.settings import Settings

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


class Sealer:
    """Seals and opens the secrets stored in ``agent_webhooks``."""

    def __init__(self, key_material: str, label: bytes = b"agent-mesh webhook secrets") -> None:
        # A labelled hash, so the JWT key itself is never the encryption key, and
        # each kind of secret (``label``) has a key of its own.
        digest = hashlib.sha256(label + b"\x00" + key_material.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))

    @classmethod
    def from_settings(cls, settings: Settings, label: bytes = b"agent-mesh webhook secrets"
                      ) -> Sealer:
        return cls(settings.webhook_secret_key or settings.jwt_secret, label)

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken as exc:
            # Never the value itself in the message: it may end up in a log.
            raise ValueError("a webhook secret could not be opened: MESH_WEBHOOK_SECRET_KEY "
                             "(or MESH_JWT_SECRET) changed since it was stored; the owner "
                             "must PUT the webhook again") from exc


def signature_headers(msg_id: str, timestamp: datetime, body: bytes,
                      secrets_: Sequence[str]) -> dict[str, str]:
    """The three Standard Webhooks headers; during a rotation's grace period one
    ``v1,…`` signature per secret, space-separated (the spec's form)."""
    data = body.decode()
    signatures = " ".join(Webhook(s).sign(msg_id, timestamp, data) for s in secrets_)
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(timestamp.timestamp())),
            "webhook-signature": signatures}
