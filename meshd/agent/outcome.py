"""What a model run came to, decided from what the SDK gave back — pure, so every
case (limit, guard, timeout, error result, no result) is a unit test away.

``kind`` is ``ok``, ``guard`` (a policy guard stopped it), or a key of
:data:`LIMITS`; a run that failed raises :class:`~meshd.daemon.handlers.HandlerError`
with the reason, and the daemon retries it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from meshd.daemon.handlers import HandlerError

LIMITS = {
    "error_max_turns": "turn limit",
    "error_max_budget_usd": "budget limit",
    "timeout": "time limit",
}


class Result(Protocol):
    """The fields of the SDK's ResultMessage the outcome depends on."""

    subtype: str
    is_error: bool
    result: str | None
    errors: list[str] | None
    api_error_status: int | None
    total_cost_usd: float | None


@dataclass
class Outcome:
    kind: str  # "ok", "guard" or a key of LIMITS
    cost_usd: float
    turns: int
    duration_ms: int
    session_id: str | None
    text: str
    session_cost: float | None
    detail: str = ""  # why a guard stopped the run


def sdk_error_is_failure(result: Result | None, guard: str | None) -> bool:
    """The SDK raises after a limit result too: an error is the run's failure only
    when no guard stopped the run and there is no result, or an error result that
    is not a limit."""
    return not guard and (result is None or (result.is_error and result.subtype not in LIMITS))


def run_kind(result: Result | None, *, timed_out: bool, guard: str | None,
             model_url: str) -> str:
    """The run's kind; raises HandlerError for an error result or a run without one."""
    if guard:
        return "guard"
    if timed_out:
        return "timeout"
    if result is None:
        raise HandlerError("the agent run ended without a result")
    if result.subtype in LIMITS:
        return result.subtype
    if result.is_error:
        detail = "; ".join(result.errors or []) or result.result or result.subtype
        status = f" status {result.api_error_status}" if result.api_error_status else ""
        raise HandlerError(f"the agent run failed (model API at {model_url}{status}): {detail}")
    return "ok"


def run_cost(result: Result | None, prior_cost: float) -> float:
    """This run's cost: the session's running total less what it had cost before
    (the SDK reports a resumed session's total); never negative."""
    total = result.total_cost_usd if result is not None else None
    return max(0.0, (total if total is not None else prior_cost) - prior_cost)
