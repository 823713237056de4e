"""Who may read web's ``GET /metrics``: anyone, or with ``MESH_METRICS_TOKEN``
only a scraper that sends ``Authorization: Bearer <token>`` (ADR 033)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from app.platform.errors import unauthorized


def check(request: Request, token: str | None) -> None:
    """Raise a 401 problem unless ``token`` is unset or the request carries it."""
    if not token:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # Compared as bytes in constant time: a timing side channel must not spell it out.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()):
        raise unauthorized("/metrics needs Authorization: Bearer <MESH_METRICS_TOKEN>")
