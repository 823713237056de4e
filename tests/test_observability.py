"""Sentry scrubbing and logging set-up (app/platform/observability.py).

The Sentry tests send to a real HTTP server started here, so what is asserted is
what would have left the process.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest
import sentry_sdk
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.platform.observability import RedactingFilter, init_sentry, scrub_event, scrub_text, setup_logging
from app.platform.settings import Settings
from tests.support.sentry_sink import SentrySink, sentry_sink

API_KEY = "mk_3fA9xQ2LrT7vW1yZ8bC4dE6gH0jK5mN"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjb2RlckBib2IiLCJleHAiOjE3MDB9."
       "c2lnbmF0dXJlLXNpZ25hdHVyZS1zaWduYXR1cmU")
PASSWORD = "hunter2-correct-horse"
MESSAGE_TEXT = "the launch codes are 0000 and the meeting moved to friday"


def secrets_in(blob: str) -> list[str]:
    return [s for s in (API_KEY, JWT, PASSWORD, MESSAGE_TEXT, "c2lnbmF0dXJl") if s in blob]


# --- the scrubber, as a plain function ---------------------------------------------


def test_scrub_event_removes_credentials_and_bodies() -> None:
    event = {
        "level": "error",
        "message": f"login failed for password={PASSWORD} with key {API_KEY}",
        "exception": {"values": [{"type": "ValueError",
                                  "value": f"bad token Bearer {JWT}"}]},
        "request": {
            "url": f"http://mesh/v1/mesh/inbox?api_key={API_KEY}",
            "headers": {"Authorization": f"Bearer {JWT}", "X-Api-Key": API_KEY,
                        "Content-Type": "application/json"},
            "env": {"DATABASE_URL": f"postgresql://mesh:{PASSWORD}@db/mesh"},
        },
        "extra": {
            "message": {"message_id": "m-1", "parts": [{"kind": "text", "text": MESSAGE_TEXT}]},
            "event": {"seq": 7, "payload": {"text": MESSAGE_TEXT}},
            "dsn": f"postgresql://mesh:{PASSWORD}@db:5432/mesh",
            "attempts": 3,
        },
        "breadcrumbs": {"values": [{"category": "httpx", "data": {
            "url": "http://x/v1/auth/token", "headers": [["authorization", f"Bearer {JWT}"],
                                                         ["accept", "*/*"]]}},
            {"message": f"retrying with {{'api_key': '{API_KEY}', 'text': '{MESSAGE_TEXT}'}}"}]},
        "tags": {"route": "POST /v1/mesh/tasks"},
    }
    original = json.dumps(event)

    cleaned = scrub_event(event, {}, process="outbox")
    blob = json.dumps(cleaned)

    assert secrets_in(blob) == [], blob
    assert json.dumps(event) == original  # the input is not modified
    # Structure and harmless values survive, so the report is still useful.
    assert cleaned["level"] == "error"
    assert cleaned["exception"]["values"][0]["type"] == "ValueError"
    assert cleaned["request"]["headers"]["Content-Type"] == "application/json"
    assert cleaned["request"]["headers"]["Authorization"] == "[Filtered]"
    assert cleaned["extra"]["message"]["message_id"] == "m-1"
    assert cleaned["extra"]["message"]["parts"] == "[Filtered]"
    assert cleaned["extra"]["event"]["seq"] == 7 and cleaned["extra"]["attempts"] == 3
    assert cleaned["breadcrumbs"]["values"][0]["data"]["headers"][1] == ["accept", "*/*"]
    assert cleaned["tags"] == {"route": "POST /v1/mesh/tasks", "process": "outbox"}


def test_scrub_text_patterns() -> None:
    assert scrub_text(f"Authorization: Bearer {JWT}") == "Authorization: Bearer [Filtered]"
    assert scrub_text(f"key={API_KEY}&x=1") == "key=[Filtered]&x=1"
    assert scrub_text(f"password: {PASSWORD}") == "password: [Filtered]"
    assert scrub_text("redis://:s3cret@h:6379/0") == "redis://:[Filtered]@h:6379/0"
    assert scrub_text("postgresql://mesh:pw@db/mesh") == "postgresql://mesh:[Filtered]@db/mesh"
    # Message bodies inside reprs, JSON and validation errors.
    assert scrub_text(f"bad {{'kind': 'text', 'text': '{MESSAGE_TEXT}', 'n': 1}}") == \
        "bad {'kind': 'text', 'text': [Filtered], 'n': 1}"
    assert scrub_text('{"parts": [{"kind": "text", "text": "a]\\"b"}], "task_id": "t-1"}') == \
        '{"parts": [Filtered], "task_id": "t-1"}'
    assert MESSAGE_TEXT not in scrub_text(
        f"1 validation error for Part\ntext\n  String too long [type=string_too_long, "
        f"input_value='{MESSAGE_TEXT}', input_type=str]")
    assert scrub_text(f"payload={{'text': '{MESSAGE_TEXT}'") == "payload=[Filtered]"  # truncated
    # Ordinary text stays readable.
    assert scrub_text("bookmark_list task_id=t-coder@bob-1 tokens=3") == \
        "bookmark_list task_id=t-coder@bob-1 tokens=3"


# --- init_sentry against a real HTTP endpoint ----------------------------------------


@pytest.fixture
def sentry_endpoint() -> Iterator[SentrySink]:
    with sentry_sink(project=42) as sink:
        yield sink


def wait_for_events(sink: SentrySink, n: int) -> list[dict[str, object]]:
    sentry_sdk.flush(timeout=5)
    deadline = time.monotonic() + 10
    while len(sink.events()) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return sink.events()


def test_no_dsn_no_sentry(base_settings: Settings) -> None:
    assert base_settings.sentry_dsn is None
    assert init_sentry(base_settings, "web") is False


def test_captured_exception_arrives_scrubbed(
        base_settings: Settings,
        sentry_endpoint: SentrySink) -> None:
    sink = sentry_endpoint
    dsn = sink.dsn
    settings = base_settings.model_copy(update={"sentry_dsn": dsn,
                                                "sentry_environment": "test"})
    assert init_sentry(settings, "outbox")
    assert "arq" in sentry_sdk.get_client().integrations

    with sentry_sdk.new_scope() as scope:
        scope.set_context("http", {"headers": {"Authorization": f"Bearer {JWT}"}})
        scope.set_extra("message", {"parts": [{"kind": "text", "text": MESSAGE_TEXT}]})
        scope.set_extra("login", {"username": "bob", "password": PASSWORD})
        sentry_sdk.add_breadcrumb(category="auth", message=f"exchanging {API_KEY}")
        api_key = API_KEY  # a local: Sentry must not ship frame variables  # noqa: F841
        text = MESSAGE_TEXT  # noqa: F841
        try:
            raise RuntimeError(f"relay failed for {API_KEY} (Bearer {JWT})")
        except RuntimeError as exc:
            sentry_sdk.capture_exception(exc)

    events = wait_for_events(sink, 1)
    assert len(events) == 1
    raw = sink.raw()
    assert secrets_in(raw) == [], raw
    event = events[0]
    assert event["tags"]["process"] == "outbox"  # type: ignore[index]
    assert event["environment"] == "test"
    assert event["exception"]["values"][0]["type"] == "RuntimeError"  # type: ignore[index]
    assert event["extra"]["login"]["username"] == "bob"  # type: ignore[index]


async def test_starlette_error_arrives_without_headers_or_body(
        base_settings: Settings,
        sentry_endpoint: SentrySink) -> None:
    sink = sentry_endpoint
    dsn = sink.dsn
    settings = base_settings.model_copy(update={"sentry_dsn": dsn})
    assert init_sentry(settings, "web")
    assert "starlette" in sentry_sdk.get_client().integrations

    async def send_task(request: Request) -> Response:
        body = await request.json()
        raise LookupError(f"no route to {body['to_agent_id']}")

    app = Starlette(routes=[Route("/v1/mesh/tasks", send_task, methods=["POST"])])
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://mesh") as client:
        response = await client.post(
            "/v1/mesh/tasks",
            headers={"Authorization": f"Bearer {JWT}", "X-Api-Key": API_KEY,
                     "Cookie": f"session={JWT}"},
            json={"to_agent_id": "coder@bob",
                  "message": {"parts": [{"kind": "text", "text": MESSAGE_TEXT}]}},
        )
    assert response.status_code == 500

    events = wait_for_events(sink, 1)
    assert events, "the Starlette integration sent nothing"
    raw = sink.raw()
    assert secrets_in(raw) == [], raw
    event = events[0]
    assert event["tags"]["process"] == "web"  # type: ignore[index]
    assert event["request"]["method"] == "POST"  # type: ignore[index]
    # max_request_body_size="never": the body is left out, not merely scrubbed.
    assert event["request"].get("data") in (None, "")  # type: ignore[attr-defined]
    assert event["request"]["headers"]["authorization"] == "[Filtered]"  # type: ignore[index]
    assert event["exception"]["values"][-1]["type"] == "LookupError"  # type: ignore[index]


# --- logging ------------------------------------------------------------------------


def test_setup_logging_is_idempotent_and_redacts(base_settings: Settings,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    try:
        setup_logging(base_settings.model_copy(update={"log_level": "debug"}), "web")
        setup_logging(base_settings.model_copy(update={"log_level": "info"}), "web")
        ours = [h for h in root.handlers if any(isinstance(f, RedactingFilter)
                                                  for f in h.filters)]
        assert len(ours) == 1 and root.level == logging.INFO
        logging.getLogger("app.test").info("token exchange for %s", API_KEY)
        ours[0].flush()
        err = capsys.readouterr().err
        assert "[web] app.test: token exchange for [Filtered]" in err
        assert API_KEY not in err
        with pytest.raises(ValueError, match="not a logging level"):
            setup_logging(base_settings.model_copy(update={"log_level": "loud"}))
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
