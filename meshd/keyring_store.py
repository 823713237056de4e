"""API keys in the OS keyring (``mesh login --keyring``) instead of the config file.

A key is stored under the service :data:`SERVICE` with the agent's id as the
account; the config file then holds only ``{"url": ..., "keyring": "<agent id>"}``,
nothing secret. Which keyring is used is the ``keyring`` package's choice (macOS
Keychain, Secret Service, Windows Credential Locker, or ``PYTHON_KEYRING_BACKEND``).
The package is imported only when a key is stored or read there.
"""

from __future__ import annotations

from typing import Any

from meshd.errors import ConfigError

SERVICE = "agent-mesh"

NO_BACKEND = (
    "no OS keyring backend is available; drop --keyring to keep the key in the config "
    "file (mode 0600), or install a backend (e.g. pip install keyrings.alt)"
)


def _keyring() -> Any:
    try:
        import keyring
    except ImportError as e:
        raise ConfigError(f"the OS keyring needs the keyring package ({e}); pip install keyring") from e
    return keyring


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def store_key(account: str, api_key: str) -> None:
    keyring = _keyring()
    from keyring.errors import KeyringError, NoKeyringError

    try:
        keyring.set_password(SERVICE, account, api_key)
    except NoKeyringError:
        raise ConfigError(NO_BACKEND) from None
    except KeyringError as e:
        raise ConfigError(f"could not store the key in the OS keyring: {_one_line(e)}") from None


def read_key(account: str) -> str:
    """The key stored for ``account``; a :class:`ConfigError` saying what to do when there is none."""
    keyring = _keyring()
    from keyring.errors import KeyringError, NoKeyringError

    try:
        key = keyring.get_password(SERVICE, account)
    except NoKeyringError:
        raise ConfigError(
            f"the API key of {account} is kept in the OS keyring, but no keyring backend is available; "
            "install one (e.g. pip install keyrings.alt), or run `mesh login --api-key KEY` without --keyring"
        ) from None
    except KeyringError as e:
        detail = _one_line(e)
        raise ConfigError(f"could not read the key of {account} from the OS keyring: {detail}") from None
    if not key:
        raise ConfigError(
            f"the OS keyring holds no API key for {account} (service {SERVICE}); "
            "run `mesh login --keyring` again"
        )
    return key


def delete_key(account: str) -> bool:
    """Forget the key of ``account``; False when there was none (or no backend)."""
    keyring = _keyring()
    from keyring.errors import KeyringError, PasswordDeleteError

    try:
        keyring.delete_password(SERVICE, account)
    except PasswordDeleteError:
        return False
    except KeyringError:
        return False
    return True
