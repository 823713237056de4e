"""Response bodies: an agent's webhook (ADR 035)."""

from __future__ import annotations

from typing import Literal

from app.responses.base import Out, Timestamp

# ok: delivering (or idle); failing: the last attempts failed and are retried;
# open: the breaker is open — no calls until its half-open probe succeeds.
WebhookStatus = Literal["ok", "failing", "open"]


class WebhookCreated(Out):
    url: str
    # Shown in this response only: sign-verification key, Standard Webhooks form.
    secret: str
    status: WebhookStatus


class WebhookOut(Out):
    url: str
    status: WebhookStatus
    last_error: str | None
    last_success_at: Timestamp | None
    # Inbox events after the agent's acked cursor (not yet delivered by webhook).
    pending: int
