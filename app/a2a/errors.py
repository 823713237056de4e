"""The one translation of the mesh's problems into A2A errors (ADR 034).

The SDK renders an A2AError by its exact type — JSON-RPC code, HTTP+JSON status
and google.rpc reason — from module-level tables. A2A names no error for "you
may not do that" (its JSON-RPC binding leaves authorization to a custom error),
so :class:`PermissionDeniedError` is added to those tables here, once, at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers import response_helpers
from a2a.utils import error_handlers, errors
from a2a.utils.errors import (
    A2AError,
    ErrorMapping,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
)
from pydantic import ValidationError

from app.domain.task_states import is_terminal
from app.platform.errors import Problem, validation_problem

# In JSON-RPC's implementation-defined server-error range, clear of A2A's
# -32001…-32009.
PERMISSION_DENIED_CODE = -32050


class PermissionDeniedError(A2AError):
    """The caller is known and may reach the agent, but not do this (a 403)."""

    message = "Permission denied"


def _register() -> None:
    errors.JSON_RPC_ERROR_CODE_MAP[PermissionDeniedError] = PERMISSION_DENIED_CODE
    mapping = ErrorMapping(403, "PERMISSION_DENIED", "PERMISSION_DENIED")
    errors.A2A_ERROR_MAPPING[PermissionDeniedError] = mapping
    errors.A2A_ERROR_REASONS[PermissionDeniedError] = mapping.reason
    errors.A2A_REASON_TO_ERROR[mapping.reason] = PermissionDeniedError
    response_helpers.EXCEPTION_MAP[PermissionDeniedError] = JSONRPCError
    # error_handlers imported its names from errors: the same dict objects.
    assert error_handlers.A2A_ERROR_MAPPING is errors.A2A_ERROR_MAPPING


_register()


@contextlib.contextmanager
def a2a_errors(*, not_found: type[A2AError] = TaskNotFoundError,
               conflict: type[A2AError] = InvalidRequestError,
               closed: type[A2AError] | None = None) -> Iterator[None]:
    """Raise the A2A error of a mesh problem; the detail (what was wrong, what
    to do) travels as the error's message. ``closed`` is the error for a 409
    whose task is in a terminal state (the spec's answer to a message to it)."""
    try:
        yield
    except Problem as problem:
        raise _translate(problem, not_found, conflict, closed) from None
    except ValidationError as exc:
        raise InvalidParamsError(message=validation_problem(exc).detail) from None


def _translate(problem: Problem, not_found: type[A2AError], conflict: type[A2AError],
               closed: type[A2AError] | None) -> A2AError:
    if problem.status == 404:
        return not_found(message=problem.detail)
    if problem.status == 409:
        state = problem.extra.get("current_state")
        if closed is not None and isinstance(state, str) and is_terminal(state):
            return closed(message=problem.detail)
        return conflict(message=problem.detail)
    if problem.status == 403:
        return PermissionDeniedError(message=problem.detail)
    if problem.status in (400, 413, 415, 422):
        return InvalidParamsError(message=problem.detail)
    return InvalidRequestError(message=problem.detail)

