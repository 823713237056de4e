"""CSRF: a synchronizer token per session, sent back in every state-changing request.

Forms carry it as the hidden field ``csrf``; scripts (htmx, the copy/confirm
helpers) send the ``X-CSRF-Token`` header. Before sign-in there is no session,
so the sign-in and register forms use a double-submit cookie instead. A request
without the matching token is refused with 403 and changes nothing.
"""

from __future__ import annotations

import hmac

from app.platform.errors import forbidden

FIELD = "csrf"
HEADER = "x-csrf-token"


def check(expected: str | None, form: dict[str, str], headers: dict[str, str]) -> None:
    sent = form.get(FIELD) or headers.get(HEADER) or ""
    if not expected or not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise forbidden("missing or wrong CSRF token: reload the page and submit the form again")
