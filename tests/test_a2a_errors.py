"""The mesh's problems as A2A errors, rendered by the SDK's own serializers for both
bindings (ADR 034). Through the gateway these are covered in test_a2a_conformance;
a 403 from inside a service call has no deterministic trigger there."""

from __future__ import annotations

import pytest
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from app.a2a.errors import PERMISSION_DENIED_CODE, PermissionDeniedError, a2a_errors
from app.domain.task_states import check_accepts_messages
from app.platform.errors import Problem, conflict, forbidden


def _raised(problem: Exception, **kw: type[A2AError]) -> A2AError:
    with pytest.raises(A2AError) as info, a2a_errors(**kw):
        raise problem
    return info.value


def test_a_service_403_is_permission_denied_in_both_bindings() -> None:
    error = _raised(forbidden("context 'c-1' is not yours; start a new one"))
    assert type(error) is PermissionDeniedError
    rpc = build_error_response(1, error)["error"]
    assert rpc["code"] == PERMISSION_DENIED_CODE
    assert rpc["message"] == "context 'c-1' is not yours; start a new one"
    assert rpc["data"][0]["reason"] == "PERMISSION_DENIED"
    rest = build_rest_error_payload(error)["error"]
    assert (rest["code"], rest["status"]) == (403, "PERMISSION_DENIED")
    assert rest["details"][0]["reason"] == "PERMISSION_DENIED"


def test_the_other_problems() -> None:
    terminal = Problem(409, "closed", current_state="completed")
    assert type(_raised(terminal, closed=UnsupportedOperationError)) is \
        UnsupportedOperationError
    assert type(_raised(terminal)) is InvalidRequestError  # no closed= given
    with pytest.raises(Problem) as closed:
        check_accepts_messages("rejected")  # the service's own check carries the state
    assert type(_raised(closed.value, closed=UnsupportedOperationError)) is \
        UnsupportedOperationError
    reused = conflict("message_id already used for different content")
    assert type(_raised(reused, closed=UnsupportedOperationError)) is InvalidRequestError
    assert type(_raised(Problem(404, "no task"))) is TaskNotFoundError
    for status in (400, 413, 415, 422):
        assert type(_raised(Problem(status, "bad"))) is InvalidParamsError
