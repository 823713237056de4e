"""Who may register under which name, with which password."""

from __future__ import annotations

from app.platform.errors import Problem

# Names that read as the system itself or its staff: an owner called "admin" or
# "system" could pass itself off as the operator to other owners' humans. An
# operator who lists one in MESH_ADMIN_USERNAMES may still register it.
RESERVED_USERNAMES = frozenset({
    "admin", "administrator", "root", "human", "system", "mesh", "operator", "support",
    "security", "staff", "superuser", "sysadmin", "moderator", "official", "help",
    "null", "none", "undefined", "anonymous", "everyone", "all", "api", "www", "mail",
})
# A few passwords any guesser tries first (the length rule is the schema's).
COMMON_PASSWORDS = frozenset({
    "password", "password1", "12345678", "123456789", "1234567890", "qwertyuiop",
    "qwerty123", "iloveyou", "11111111", "00000000", "abcdefgh", "letmein1",
    "passw0rd", "changeme", "welcome1", "admin123",
})


def check(username: str, password: str, *, admin_usernames: list[str]) -> None:
    """422 with a clear reason for a reserved name or a trivially weak password."""
    if username in RESERVED_USERNAMES and username not in admin_usernames:
        _refuse("username", f"'{username}' is reserved; choose another username")
    weak = _weakness(username, password)
    if weak:
        _refuse("password", f"is too weak: {weak}; use a longer passphrase")


def _weakness(username: str, password: str) -> str | None:
    folded = password.strip().casefold()
    if not folded:
        return "it is only spaces"
    if folded == username.casefold() or folded == username.casefold()[::-1]:
        return "it is your username"
    if len(set(folded)) <= 2:
        return "it repeats one or two characters"
    if folded in COMMON_PASSWORDS:
        return "it is one of the most common passwords"
    return None


def _refuse(field: str, why: str) -> None:
    raise Problem(422, f"invalid request: {field}: {why}",
                  errors=[{"field": field, "message": why}])
