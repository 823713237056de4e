"""Who may register under which name, with which password."""

from __future__ import annotations

import pytest

from app.domain.registration import RESERVED_USERNAMES, check
from app.platform.errors import Problem


def _refusal(username: str, password: str, admins: list[str] | None = None) -> Problem:
    with pytest.raises(Problem) as raised:
        check(username, password, admin_usernames=admins or [])
    assert raised.value.status == 422
    return raised.value


@pytest.mark.parametrize("name", sorted(RESERVED_USERNAMES))
def test_reserved_names_are_refused_unless_the_operator_lists_them(name: str) -> None:
    assert "reserved" in str(_refusal(name, "correct horse battery").detail)
    check(name, "correct horse battery", admin_usernames=[name])


@pytest.mark.parametrize(("password", "why"), [
    ("        ", "only spaces"),
    ("alice-smith", "your username"),
    ("htims-ecila", "your username"),
    ("abababababab", "one or two characters"),
    ("Password1", "most common"),
    (" changeme ", "most common"),
])
def test_weak_passwords_name_their_weakness(password: str, why: str) -> None:
    problem = _refusal("alice-smith", password)
    assert why in str(problem.detail)


def test_a_passphrase_passes() -> None:
    check("alice-smith", "correct horse battery staple", admin_usernames=[])
