"""Where the CLI, daemon and MCP server find the gateway and their credentials.

Precedence: command-line flags, then the environment (``MESH_URL``,
``MESH_API_KEY`` or ``MESH_TOKEN``), then the config file written by
``mesh login`` (``$MESH_CONFIG``, else ``$XDG_CONFIG_HOME/mesh/config.json``,
else ``~/.config/mesh/config.json``), which is created with mode 0600.
After ``mesh login --keyring`` that file names the agent (``"keyring"``) and the
key itself is read from the OS keyring (:mod:`meshd.keyring_store`) — here, so
every command finds it the same way.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from meshd.errors import ConfigError
from meshd.files import atomic_write_json


@dataclass(frozen=True, slots=True)
class Config:
    url: str | None = None
    api_key: str | None = None
    token: str | None = None
    path: Path | None = None

    def require(self) -> Config:
        if not self.url:
            raise ConfigError("no gateway URL: set MESH_URL, pass --url, or run `mesh login --url URL`")
        if not self.api_key and not self.token:
            raise ConfigError(
                "no credentials: set MESH_API_KEY (an agent key, mk_...), pass --api-key, or run `mesh login`"
            )
        return self


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def gateway_url(text: str) -> str:
    """``text`` as a gateway base URL, or a :class:`ConfigError` that says what is wrong.

    A loopback address without a scheme (``127.0.0.1:8080``, ``localhost:8080``)
    gets ``http://``: that is what a local gateway speaks, and nothing leaves the
    machine. Any other host needs its scheme written out: guessing ``http://``
    would send the key in clear text, guessing ``https://`` fails obscurely.
    """
    raw = text.strip()
    if not raw:
        raise ConfigError("the gateway URL is empty")
    if "://" not in raw:
        try:
            host = urlsplit("http://" + raw).hostname
        except ValueError:
            host = None
        if not _loopback(host):
            raise ConfigError(
                f"gateway URL {text!r} has no scheme: write https://{raw} (or http:// for a "
                "gateway without TLS)"
            )
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as e:
        raise ConfigError(f"gateway URL {text!r} is not a valid URL ({e})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"gateway URL {text!r}: the scheme must be http:// or https://")
    if not parts.hostname:
        raise ConfigError(f"gateway URL {text!r} names no host")
    if parts.query or parts.fragment:
        raise ConfigError(f"gateway URL {text!r}: give the base URL only, without ? or #")
    return raw.rstrip("/")


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("MESH_CONFIG"):
        return Path(env["MESH_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "mesh" / "config.json"


def state_root(env: Mapping[str, str] | None = None) -> Path:
    """Parent of the per-agent daemon state folders."""
    env = os.environ if env is None else env
    if env.get("MESH_STATE_DIR"):
        return Path(env["MESH_STATE_DIR"]).expanduser()
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "mesh"


def read_config_file(path: Path) -> dict[str, str]:
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); fix it or run `mesh login`") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object; run `mesh login` to rewrite it")
    return {k: str(v) for k, v in data.items() if v is not None}


def write_config_file(path: Path, data: Mapping[str, str]) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_json(path, dict(data), indent=2)


def save_login(path: Path, url: str, agent_id: str, api_key: str, *, keyring: bool = False) -> str:
    """Write what ``mesh login`` checked; returns where the key went, for the user."""
    url = url.rstrip("/")
    if not keyring:
        write_config_file(path, {"url": url, "api_key": api_key})
        return f"{path} (mode 0600)"
    from meshd.keyring_store import SERVICE, store_key

    store_key(agent_id, api_key)  # first: a config file must not point at a key that is not there
    write_config_file(path, {"url": url, "keyring": agent_id})
    return f"the OS keyring (service {SERVICE}, account {agent_id}); URL in {path}"


def load_config(
    *,
    url: str | None = None,
    api_key: str | None = None,
    token: str | None = None,
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    env = os.environ if env is None else env
    path = path or config_path(env)
    file = read_config_file(path)
    url = url or env.get("MESH_URL") or file.get("url")
    # Credentials come as a pair from one place: a key from a flag never meets a token from the file.
    if not (api_key or token):
        if env.get("MESH_API_KEY") or env.get("MESH_TOKEN"):
            api_key, token = env.get("MESH_API_KEY") or None, env.get("MESH_TOKEN") or None
        else:
            api_key, token = file.get("api_key"), file.get("token")
            if not (api_key or token) and file.get("keyring"):
                from meshd.keyring_store import read_key

                api_key = read_key(file["keyring"])
    return Config(url=gateway_url(url) if url else None, api_key=api_key, token=token, path=path)
