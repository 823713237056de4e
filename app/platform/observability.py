"""Logging set-up and Sentry for every process.

Sentry starts only when ``settings.sentry_dsn`` is set. What leaves the process
is scrubbed by :func:`scrub_event`: credentials (Authorization headers, ``mk_``
API keys, JWTs, passwords) and message bodies (``parts``, ``payload``, ``text``)
are the mesh's users' data and never belong in an error tracker.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import warnings
from importlib import metadata
from typing import Any

from app.platform.settings import Settings
from app.platform.tracing import TraceIds

FILTERED = "[Filtered]"

# Keys whose values are credentials. Compared after lower-casing and "-" → "_".
SECRET_KEYS = frozenset({
    "authorization", "proxy_authorization", "cookie", "set_cookie", "x_api_key",
    "api_key", "apikey", "password", "passwd", "pwd", "secret", "jwt_secret",
    "client_secret", "token", "access_token", "refresh_token", "id_token", "jwt",
    "credentials", "private_key", "dsn", "database_url", "redis_url",
})
# Substrings that mark a key as secret whatever surrounds them (x_mesh_api_key, …).
SECRET_KEY_PARTS = ("password", "secret", "api_key", "apikey", "token", "authorization")
# Keys whose values are message content (A2A parts, inbox payloads, free text).
BODY_KEYS = frozenset({"parts", "payload", "text", "body", "artifacts"})

# Secrets inside free text: exception messages, log lines, breadcrumbs, URLs.
_STRING_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # JWS compact form: base64url JSON header (always starts "eyJ") . payload . signature
    (re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), FILTERED),
    (re.compile(r"(?<![A-Za-z0-9])mk_[A-Za-z0-9_-]{4,}"), FILTERED),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 " + FILTERED),
    # password=…, "api_key": "…", token: … in log lines, reprs and query strings
    (re.compile(r"(?i)((?:password|passwd|pwd|secret|api[_-]?key|token)[\"']?\s*[:=]\s*[\"']?)"
                r"[^\s\"'&,;}]+"), r"\1" + FILTERED),
    # user:password@ in connection URLs
    (re.compile(r"(://[^/\s:@]*:)[^@\s/]+@"), r"\1" + FILTERED + "@"),
)

# A message field inside free text: reprs of dicts, JSON, "key=value" log lines and
# pydantic's "input_value=…" all spell it as key, ":" or "=", then the value.
_BODY_FIELD = re.compile(
    r"""["']?\b(?:parts|payload|text|body|input_value)\b["']?\s*[:=]\s*""", re.IGNORECASE)
_OPEN = {"[": "]", "{": "}", "(": ")"}

_MAX_DEPTH = 64  # events are serialized by the SDK first; this only guards cycles


def scrub_text(value: str) -> str:
    for pattern, replacement in _STRING_PATTERNS:
        value = pattern.sub(replacement, value)
    return _redact_body_fields(value)


def _redact_body_fields(text: str) -> str:
    out: list[str] = []
    pos = 0
    while (match := _BODY_FIELD.search(text, pos)) is not None:
        out.append(text[pos:match.end()])
        out.append(FILTERED)
        pos = max(_value_end(text, match.end()), match.end())
    out.append(text[pos:])
    return "".join(out)


def _value_end(text: str, start: int) -> int:
    """Index just past the value starting at ``start``: a quoted string, a bracketed
    structure (quotes inside respected), or a bare word. Unterminated → end of text,
    so a truncated repr is filtered to its end rather than leaking its tail."""
    if start >= len(text):
        return start
    first = text[start]
    if first in "'\"":
        i = start + 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == first:
                return i + 1
            i += 1
        return len(text)
    if first in _OPEN:
        stack = [_OPEN[first]]
        i = start + 1
        while i < len(text) and stack:
            c = text[i]
            if c in "'\"":
                i = _value_end(text, i)
                continue
            if c in _OPEN:
                stack.append(_OPEN[c])
            elif c == stack[-1]:
                stack.pop()
            i += 1
        return i
    i = start
    while i < len(text) and not text[i].isspace() and text[i] not in ",;&}])":
        i += 1
    return i


def _sensitive_key(key: str) -> bool:
    k = key.lower().replace("-", "_")
    return k in SECRET_KEYS or k in BODY_KEYS or any(p in k for p in SECRET_KEY_PARTS)


def scrub(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` with secret and body fields replaced and strings redacted."""
    if _depth > _MAX_DEPTH:
        return FILTERED
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {k: FILTERED if isinstance(k, str) and _sensitive_key(k) and v is not None
                else scrub(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        pairs = isinstance(value, list) and all(
            isinstance(i, list | tuple) and len(i) == 2 and isinstance(i[0], str) for i in value)
        if pairs and value:
            # Header lists as [name, value] pairs: decide by the name.
            return [[k, FILTERED if _sensitive_key(k) else scrub(v, _depth + 1)]
                    for k, v in value]
        return [scrub(v, _depth + 1) for v in value]
    return value


def scrub_event(event: dict[str, Any], hint: dict[str, Any] | None = None, *,
                process: str | None = None) -> dict[str, Any]:
    """Sentry ``before_send``: the whole event scrubbed, tagged with the process name.

    Pure apart from reading ``event``; returns a new dict. Sentry drops the event
    if this raises, so a scrubber bug loses a report rather than leaking data.
    """
    cleaned: dict[str, Any] = scrub(event)
    if process is not None:
        tags = cleaned.get("tags")
        if isinstance(tags, dict):
            tags["process"] = process
        else:
            cleaned["tags"] = {"process": process}
    return cleaned


def init_sentry(settings: Settings, process: str) -> bool:
    """Start Sentry when a DSN is configured; True if it was started.

    ``process`` is the Procfile name (web, outbox, push, cron, release): it picks
    the integration and tags every event.
    """
    if not settings.sentry_dsn:
        return False
    import sentry_sdk
    from sentry_sdk.integrations import Integration
    from sentry_sdk.integrations.arq import ArqIntegration
    from sentry_sdk.integrations.starlette import StarletteIntegration

    integrations: list[Integration] = (
        # cron runs arq; in the relay and push workers (no arq) the integration is inert.
        [StarletteIntegration()] if process == "web" else [ArqIntegration()]
    )
    before_send = functools.partial(scrub_event, process=process)
    with warnings.catch_warnings():
        # Newer 2.x SDKs deprecate send_default_pii for data_collection; the flag
        # still works and is the one every sentry-sdk 2.x we allow understands.
        warnings.filterwarnings("ignore", message=".*send_default_pii.*",
                                category=DeprecationWarning)
        sentry_sdk.init(
            dsn=settings.sentry_dsn,
            environment=settings.sentry_environment,
            release=_release(),
            integrations=integrations,
            send_default_pii=False,
            # Request bodies are agents' messages: never attach them.
            max_request_body_size="never",
            # Frame locals hold request bodies and keys as reprs, out of reach of
            # key-based scrubbing; file and line numbers are enough to debug.
            include_local_variables=False,
            before_send=before_send,  # type: ignore[arg-type]
            before_send_transaction=before_send,  # type: ignore[arg-type]
        )
    sentry_sdk.get_global_scope().set_tag("process", process)
    return True


def _release() -> str | None:
    try:
        return "agent-mesh@" + metadata.version("agent-mesh")
    except metadata.PackageNotFoundError:
        return None


# --- logging -----------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts credentials from log lines before any handler writes them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = scrub_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_HANDLER_MARK = "_agent_mesh_handler"


def setup_logging(settings: Settings, process: str | None = None) -> None:
    """Root logger to stderr at ``settings.log_level``; safe to call again."""
    level = logging.getLevelName(settings.log_level.upper())
    if not isinstance(level, int):
        raise ValueError(f"MESH_LOG_LEVEL={settings.log_level!r} is not a logging level; "
                         "use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    prefix = f"[{process}] " if process else ""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(
        f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s%(trace)s"))
    handler.addFilter(RedactingFilter())
    handler.addFilter(TraceIds())  # an error logged in a traced span names its trace
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Client libraries log every reconnect at INFO; their warnings still show.
    for noisy in ("aiokafka", "kafka", "nats", "asyncio"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
