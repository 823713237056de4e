"""The web process's shared state, built once by the lifespan: what every edge
(REST, console, A2A, MCP) reaches through ``state(request)``. It is the
:class:`~app.services.mesh.Mesh` the services take, with what only a web
process holds beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from app.delivery.inbox_hub import InboxHub
from app.services.inbox import ReceiptBatcher
from app.services.inbox_stream import Recheck
from app.services.mesh import Mesh


@dataclass(kw_only=True)
class State(Mesh):
    hub: InboxHub
    ratelimiter: Any = None
    # app.services.auth_throttle.AuthThrottle and app.services.kdf.Kdf.
    auth_throttle: Any = None
    kdf: Any = None
    # app.web.stream_slots.StreamSlots: open SSE streams per agent in this process.
    sse_slots: Any = None
    # The same, per owner, for the console's live-feed streams (ADR 032).
    feed_slots: Any = None
    # The batched receipts (ADR 021).
    receipts: ReceiptBatcher | None = None  # the long-poll passes it to record_delivery
    # The one Postgres re-check timer of this process's SSE streams (ADR 023).
    sse_recheck: Recheck | None = None


def state(request: Request) -> State:
    return request.app.state.mesh  # type: ignore[no-any-return]
