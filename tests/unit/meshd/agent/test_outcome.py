"""A model run's outcome from what the SDK gave back: every case decided purely."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from meshd.agent.outcome import LIMITS, run_cost, run_kind, sdk_error_is_failure
from meshd.daemon.handlers import HandlerError

URL = "http://model.test"


@dataclass
class Result:
    subtype: str = "success"
    is_error: bool = False
    result: str | None = "done"
    errors: list[str] | None = None
    api_error_status: int | None = None
    total_cost_usd: float | None = 0.5


def test_a_result_without_error_is_ok() -> None:
    assert run_kind(Result(), timed_out=False, guard=None, model_url=URL) == "ok"


@pytest.mark.parametrize("subtype", ["error_max_turns", "error_max_budget_usd"])
def test_a_limit_result_is_that_limit(subtype: str) -> None:
    assert subtype in LIMITS
    got = run_kind(Result(subtype=subtype, is_error=True), timed_out=False, guard=None,
                   model_url=URL)
    assert got == subtype


def test_a_guard_outranks_everything() -> None:
    for result in (None, Result(), Result(subtype="error_during_execution", is_error=True)):
        assert run_kind(result, timed_out=True, guard="a loop", model_url=URL) == "guard"


def test_a_timeout_needs_no_result() -> None:
    assert run_kind(None, timed_out=True, guard=None, model_url=URL) == "timeout"


def test_no_result_is_a_failure() -> None:
    with pytest.raises(HandlerError, match="without a result"):
        run_kind(None, timed_out=False, guard=None, model_url=URL)


def test_an_error_result_names_the_model_api_status_and_errors() -> None:
    result = Result(subtype="error_during_execution", is_error=True, errors=["overloaded"],
                    api_error_status=529)
    with pytest.raises(HandlerError) as raised:
        run_kind(result, timed_out=False, guard=None, model_url=URL)
    assert str(raised.value) == f"the agent run failed (model API at {URL} status 529): overloaded"


def test_an_error_result_without_errors_falls_back_to_its_text_then_subtype() -> None:
    with pytest.raises(HandlerError, match=r"\): boom$"):
        run_kind(Result(subtype="x", is_error=True, result="boom"), timed_out=False, guard=None,
                 model_url=URL)
    with pytest.raises(HandlerError, match=r"\): error_x$"):
        run_kind(Result(subtype="error_x", is_error=True, result=None), timed_out=False,
                 guard=None, model_url=URL)


def test_an_sdk_error_counts_only_without_a_usable_result() -> None:
    assert sdk_error_is_failure(None, None)
    assert sdk_error_is_failure(Result(subtype="error_during_execution", is_error=True), None)
    assert not sdk_error_is_failure(Result(subtype="error_max_turns", is_error=True), None)
    assert not sdk_error_is_failure(Result(), None)
    assert not sdk_error_is_failure(None, "a loop")


def test_the_cost_is_what_this_run_added_to_the_session() -> None:
    assert run_cost(Result(total_cost_usd=0.75), prior_cost=0.5) == pytest.approx(0.25)
    assert run_cost(Result(total_cost_usd=None), prior_cost=0.5) == 0.0
    assert run_cost(None, prior_cost=0.5) == 0.0
    assert run_cost(Result(total_cost_usd=0.1), prior_cost=0.5) == 0.0  # never negative
